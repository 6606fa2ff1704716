//===- WebPage.cpp - the chat page served at / -----------------------------===//
//
// The SSE parser reads `data:` lines from fetch()'s body stream (EventSource cannot POST); comment lines
// (": keep-alive") and blank lines are skipped. Text is inserted with textContent, never as HTML.
//===----------------------------------------------------------------------===//
#include "server/WebPage.h"

namespace tpc::server {

const std::string &chatPage() {
  static const std::string page = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tpc serve</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: .5em 1em; background: #223; color: #eef; display: flex; gap: 1em; align-items: center; }
  header input { width: 8em; }
  #messages { flex: 1; overflow-y: auto; padding: 1em; }
  .msg { white-space: pre-wrap; margin: .4em 0; padding: .5em .7em; border-radius: 6px; max-width: 50em; }
  .user { background: #dde7ff; margin-left: auto; }
  .assistant { background: #eee; }
  .assistant[data-done="error"] { background: #fdd; }
  form { display: flex; gap: .5em; padding: .7em; border-top: 1px solid #ccc; }
  textarea { flex: 1; height: 3.5em; font: inherit; }
</style>
</head>
<body>
<header><b>tpc serve</b><span id="model"></span>
  <label>max tokens <input id="max" type="number" value="128" min="1"></label>
  <label>temperature <input id="temp" type="number" value="0.8" step="0.1" min="0" max="2"></label>
  <label>API key <input id="key" type="password" autocomplete="off"></label>
  <button id="clear" type="button">clear</button></header>
<div id="messages"></div>
<form id="form"><textarea id="input" placeholder="Message (Enter sends, Shift+Enter: new line)"></textarea>
  <button id="send" type="submit">Send</button></form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let busy = false;
function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}
function bubble(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role;
  d.textContent = text;
  $("messages").appendChild(d);
  d.scrollIntoView();
  return d;
}
fetch("/v1/models", { headers: headers() }).then((r) => r.json())
  .then((j) => { if (j.data) $("model").textContent = j.data[0].id; }).catch(() => {});
async function send(text) {
  busy = true;
  history.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant", "");
  let answer = "";
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(),
      body: JSON.stringify({ messages: history, stream: true, max_tokens: Number($("max").value),
                             temperature: Number($("temp").value) }) });
    if (!res.ok) throw new Error(((await res.json()).error || {}).message || res.statusText);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const delta = j.choices && j.choices[0] && j.choices[0].delta;
        if (delta && delta.content) { answer += delta.content; out.textContent = answer; out.scrollIntoView(); }
      }
    }
    history.push({ role: "assistant", content: answer });
    out.dataset.done = "1";
  } catch (e) {
    out.textContent = answer + "\n[error: " + e.message + "]";
    out.dataset.done = "error";
    history.pop();
  }
  busy = false;
}
$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || busy) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("form").requestSubmit(); }
});
$("clear").addEventListener("click", () => { history.length = 0; $("messages").textContent = ""; });
</script>
</body>
</html>
)HTML";
  return page;
}

} // namespace tpc::server
