//===- WebPage.h - the chat page served at / --------------------*- C++ -*-===//
//
// One self-contained HTML page (inline CSS and JavaScript, no external assets): a chat box that sends the
// conversation to /v1/chat/completions with stream: true and appends the streamed deltas as they come.
// Element ids the browser test drives: #input, #send, #messages; an answer is a `.msg.assistant` element
// whose data-done becomes "1" when its stream ended ("error" on failure). An API key typed into #key is
// sent as a Bearer token.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_WEBPAGE_H
#define TPC_SERVER_WEBPAGE_H

#include <string>

namespace tpc::server {

/// The page's HTML.
const std::string &chatPage();

} // namespace tpc::server

#endif // TPC_SERVER_WEBPAGE_H
