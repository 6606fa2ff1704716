//===- Cors.h - cross-origin requests from browser pages ----------*- C++ -*-===//
//
// A page on another origin (a web UI, an editor's webview) calls the API only if the server answers the
// browser's preflight (OPTIONS with Access-Control-Request-Method) and marks its responses with
// Access-Control-Allow-Origin. --cors-origins is the list of origins allowed ("*", the default as in
// llama-server, allows any; "none" allows none). A request that carries an Origin header the list does
// not allow is refused with 403 (preflight or not), so a page that may not read the answer cannot make
// the server generate either (a form post needs no preflight). Requests without Origin (curl, SDKs)
// are not affected. The preflight is answered before the API key is checked: browsers never send
// credentials with it.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_CORS_H
#define TPC_SERVER_CORS_H

#include <string>
#include <vector>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace tpc::server {

/// The allowed origins (see the file comment).
struct CorsPolicy {
  std::vector<std::string> origins{"*"};

  /// Parses --cors-origins ("*", "none", or comma-separated origins such as https://a.example:8443);
  /// empty on success, else one line naming the bad entry.
  static std::string parse(const std::string &flag, CorsPolicy &out);
  /// Whether a request with this Origin header value may be answered.
  bool allows(const std::string &origin) const;
};

enum class CorsResult { NotCors, Allowed, Refused, Preflight };

/// Checks `req` against `policy`, adds the Access-Control-* headers to `res` when allowed, and says
/// whether the request is a preflight to answer now (204) or one to refuse (403).
CorsResult applyCors(const CorsPolicy &policy, const httplib::Request &req, httplib::Response &res);

} // namespace tpc::server

#endif // TPC_SERVER_CORS_H
