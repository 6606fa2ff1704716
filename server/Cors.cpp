//===- Cors.cpp - cross-origin requests from browser pages -----------------===//
#include "server/Cors.h"

#include <fmt/core.h>
#include <httplib.h>

namespace tpc::server {

std::string CorsPolicy::parse(const std::string &flag, CorsPolicy &out) {
  out.origins.clear();
  if (flag == "none")
    return {};
  size_t start = 0;
  while (start <= flag.size()) {
    size_t end = flag.find(',', start);
    if (end == std::string::npos)
      end = flag.size();
    std::string o = flag.substr(start, end - start);
    while (!o.empty() && o.back() == ' ')
      o.pop_back();
    while (!o.empty() && o.front() == ' ')
      o.erase(o.begin());
    while (!o.empty() && o.back() == '/')
      o.pop_back(); // browsers send the origin without a path
    const bool scheme = o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0;
    if (o != "*" && (!scheme || o.find('/', o.find("//") + 2) != std::string::npos))
      return fmt::format("--cors-origins: '{}' is not an origin (give scheme://host[:port], '*' or 'none')",
                         o);
    out.origins.push_back(o);
    start = end + 1;
  }
  return {};
}

bool CorsPolicy::allows(const std::string &origin) const {
  for (const std::string &o : origins)
    if (o == "*" || o == origin)
      return true;
  return false;
}

CorsResult applyCors(const CorsPolicy &policy, const httplib::Request &req, httplib::Response &res) {
  const std::string origin = req.get_header_value("Origin");
  const bool preflight = req.method == "OPTIONS";
  if (origin.empty())
    return preflight ? CorsResult::Preflight : CorsResult::NotCors;
  if (!policy.allows(origin))
    return CorsResult::Refused;
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  if (!preflight)
    return CorsResult::Allowed;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The headers the page asked for (Authorization, Content-Type, x-api-key, ...): the origin is allowed.
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? "Authorization, Content-Type, x-api-key" : asked);
  res.set_header("Access-Control-Max-Age", "86400");
  return CorsResult::Preflight;
}

} // namespace tpc::server
