//===- JinjaRender.cpp - render a template over JSON contexts (test driver) ===//
//
// `tpc-jinja-render TEMPLATE CONTEXTS.json` renders TEMPLATE once per context of the JSON array and prints
// a JSON array of {"ok": text} or {"error": message}; jinja_oracle.py compares it with Python's jinja2.
// strftime_now returns a fixed date (2024-07-26 12:00:00, the oracle's) so the outputs are reproducible.
//===----------------------------------------------------------------------===//
#include "server/jinja/Template.h"

#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace tpc::server::jinja;

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: tpc-jinja-render TEMPLATE CONTEXTS.json\n";
    return 2;
  }
  std::ifstream tf(argv[1]), cf(argv[2]);
  if (!tf || !cf) {
    std::cerr << "cannot read " << (tf ? argv[2] : argv[1]) << "\n";
    return 2;
  }
  std::stringstream ts;
  ts << tf.rdbuf();
  const nlohmann::ordered_json contexts = nlohmann::ordered_json::parse(cf);
  nlohmann::json results = nlohmann::json::array();
  auto t = Template::parse(ts.str());
  for (const auto &c : contexts) {
    if (!t) {
      results.push_back({{"error", t.message()}});
      continue;
    }
    Dict ctx;
    for (auto it = c.begin(); it != c.end(); ++it)
      ctx.set(Value(it.key()), Value::fromJson(it.value()));
    ctx.set(Value("strftime_now"), Value::function(
                                       [](Args &a) {
                                         std::tm tm{};
                                         tm.tm_year = 124;
                                         tm.tm_mon = 6;
                                         tm.tm_mday = 26;
                                         tm.tm_hour = 12;
                                         tm.tm_wday = 5;
                                         tm.tm_yday = 207;
                                         char buf[256];
                                         const std::string f = a.get(0, "format").toString();
                                         return Value(std::string(buf, std::strftime(buf, sizeof buf, f.c_str(), &tm)));
                                       },
                                       "strftime_now"));
    auto out = t->render(ctx);
    results.push_back(out ? nlohmann::json{{"ok", *out}} : nlohmann::json{{"error", out.message()}});
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}
