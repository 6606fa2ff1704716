//===- CorsTest.cpp - --cors-origins parsing and matching ------------------===//
//
// The preflight and refusal paths run end to end in serve_dropin.py; here the flag's grammar.
//===----------------------------------------------------------------------===//
#include "server/Cors.h"

#include <gtest/gtest.h>

using namespace tpc::server;

TEST(Cors, ParsesOriginsAndMatchesExactly) {
  CorsPolicy p;
  EXPECT_TRUE(p.allows("https://any.example")); // the default is llama-server's: any origin
  ASSERT_EQ(CorsPolicy::parse("https://a.example:8443/, http://localhost:3000", p), "");
  EXPECT_EQ(p.origins, (std::vector<std::string>{"https://a.example:8443", "http://localhost:3000"}));
  EXPECT_TRUE(p.allows("https://a.example:8443"));
  EXPECT_TRUE(p.allows("http://localhost:3000"));
  EXPECT_FALSE(p.allows("https://a.example"));      // another port is another origin
  EXPECT_FALSE(p.allows("http://localhost:30000")); // no prefix matching
  EXPECT_FALSE(p.allows("null"));
  ASSERT_EQ(CorsPolicy::parse("none", p), "");
  EXPECT_FALSE(p.allows("http://localhost:3000"));
  ASSERT_EQ(CorsPolicy::parse("*", p), "");
  EXPECT_TRUE(p.allows("null"));
  for (const char *bad : {"localhost:3000", "ftp://a.example", "https://a.example/path", "", "http://a,"}) {
    std::string err = CorsPolicy::parse(bad, p);
    EXPECT_NE(err.find("--cors-origins"), std::string::npos) << bad;
  }
}
