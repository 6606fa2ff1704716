//===- Lexer.cpp - template text -> chunks and tokens -----------------------===//
//
// As jinja2's lexer: the source is cut into text and tags ({{ }}, {% %}, {# #}) with the whitespace rules
// applied (`-` strips all whitespace on its side; lstrip_blocks strips the spaces before a block or comment
// tag that opens its line; trim_blocks drops the newline after one), then a tag's contents are tokenized.
//===----------------------------------------------------------------------===//
#include "server/jinja/Lexer.h"

#include "server/jinja/Value.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tpc::server::jinja {
namespace {
[[noreturn]] void fail(int line, const std::string &msg) { throw RenderError{msg, line}; }

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

} // namespace

/// Cuts `src` into chunks with the whitespace control applied.
std::vector<Chunk> cut(const std::string &source) {
  // jinja2's keep_trailing_newline=False: one newline at the end of the source is dropped.
  std::string src = source;
  if (!src.empty() && src.back() == '\n') {
    src.pop_back();
    if (!src.empty() && src.back() == '\r')
      src.pop_back();
  }
  std::vector<Chunk> out;
  size_t pos = 0;
  int line = 1;
  bool stripNext = false, trimNext = false;
  auto lineAt = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      line += src[i] == '\n';
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && !strchr("{%#", src[open + 1]))
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size())
      open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (stripNext) {
      size_t b = 0;
      while (b < text.size() && isSpace(text[b]))
        ++b;
      text.erase(0, b);
    } else if (trimNext && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    } else if (trimNext && text.size() > 1 && text[0] == '\r' && text[1] == '\n') {
      text.erase(0, 2);
    }
    const int textLine = line;
    if (open == std::string::npos) {
      if (!text.empty())
        out.push_back({Chunk::Text, text, textLine});
      break;
    }
    lineAt(pos, open);
    const char kind = src[open + 1];
    const bool minusLeft = open + 2 < src.size() && src[open + 2] == '-';
    const bool plusLeft = open + 2 < src.size() && src[open + 2] == '+';
    if (minusLeft) {
      while (!text.empty() && isSpace(text.back()))
        text.pop_back();
    } else if (kind != '{' && !plusLeft) {
      // lstrip_blocks: only when the tag is the first thing on its line (judged on the source text).
      size_t k = open;
      while (k > pos && (src[k - 1] == ' ' || src[k - 1] == '\t'))
        --k;
      const size_t n = open - k;
      if ((k == 0 || src[k - 1] == '\n') && n <= text.size())
        text.erase(text.size() - n);
    }
    if (!text.empty())
      out.push_back({Chunk::Text, text, textLine});
    const char *close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t bodyStart = open + 2 + (minusLeft || plusLeft);
    size_t end = src.find(close, bodyStart);
    // A "}}" or "%}" inside a string literal or inside brackets of the tag does not close it (jinja2's
    // lexer balances brackets too: `{{ {'a': {'b': 1}} }}`).
    if (kind != '#') {
      char quote = 0;
      int depth = 0;
      size_t firstClose = std::string::npos; // unbalanced brackets: the parser names them at the first close
      size_t i = bodyStart;
      for (; i + 1 < src.size(); ++i) {
        const char c = src[i];
        if (quote) {
          if (c == '\\')
            ++i;
          else if (c == quote)
            quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
          continue;
        }
        if (c == close[0] && src[i + 1] == close[1]) {
          if (depth == 0)
            break;
          if (firstClose == std::string::npos)
            firstClose = i;
        }
        if (c == '(' || c == '[' || c == '{')
          ++depth;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0)
          --depth;
      }
      end = i + 1 < src.size() ? i : firstClose;
    }
    if (end == std::string::npos)
      fail(line, std::string("unclosed '{") + kind + "': no '" + close + "' follows");
    const bool minusRight = end > bodyStart && src[end - 1] == '-';
    const bool plusRight = end > bodyStart && src[end - 1] == '+';
    std::string body = src.substr(bodyStart, end - bodyStart - (minusRight || plusRight));
    // {% raw %}: everything up to {% endraw %} is text.
    size_t b0 = 0;
    while (b0 < body.size() && isSpace(body[b0]))
      ++b0;
    if (kind == '%' && body.compare(b0, 3, "raw") == 0 && body.find_first_not_of(" \t\n", b0 + 3) == std::string::npos) {
      size_t e = end + 2;
      size_t rawEnd = e;
      for (;;) {
        rawEnd = src.find("{%", rawEnd);
        if (rawEnd == std::string::npos)
          fail(line, "{% raw %} has no {% endraw %}");
        size_t k = rawEnd + 2 + (src[rawEnd + 2] == '-');
        while (k < src.size() && isSpace(src[k]))
          ++k;
        if (src.compare(k, 6, "endraw") == 0)
          break;
        rawEnd += 2;
      }
      std::string raw = src.substr(e, rawEnd - e);
      if (minusRight)
        raw.erase(0, raw.find_first_not_of(" \t\n\r"));
      else if (!raw.empty() && raw[0] == '\n')
        raw.erase(0, 1);
      if (src[rawEnd + 2] == '-')
        while (!raw.empty() && isSpace(raw.back()))
          raw.pop_back();
      out.push_back({Chunk::Text, raw, line});
      const size_t rawClose = src.find("%}", rawEnd);
      if (rawClose == std::string::npos)
        fail(line, "unclosed {% endraw %}");
      lineAt(open, rawClose + 2);
      stripNext = src[rawClose - 1] == '-';
      trimNext = true;
      pos = rawClose + 2;
      continue;
    }
    if (kind != '#')
      out.push_back({kind == '{' ? Chunk::Var : Chunk::Block, body, line});
    lineAt(open, end + 2);
    stripNext = minusRight;
    trimNext = kind != '{' && !plusRight;
    pos = end + 2;
  }
  return out;
}

std::vector<Token> tokenize(const std::string &s, int line) {
  std::vector<Token> toks;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (isSpace(c)) {
      line += c == '\n';
      ++i;
    } else if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      toks.push_back({Token::Name, s.substr(i, j - i), line});
      i = j;
    } else if (isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool isFloat = false;
      while (j < s.size() && (isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      if (j + 1 < s.size() && s[j] == '.' && isdigit(static_cast<unsigned char>(s[j + 1]))) {
        isFloat = true;
        ++j;
        while (j < s.size() && isdigit(static_cast<unsigned char>(s[j])))
          ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1 + (j + 1 < s.size() && (s[j + 1] == '+' || s[j + 1] == '-'));
        if (k < s.size() && isdigit(static_cast<unsigned char>(s[k]))) {
          isFloat = true;
          j = k;
          while (j < s.size() && isdigit(static_cast<unsigned char>(s[j])))
            ++j;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_')
          num += s[k];
      toks.push_back({isFloat ? Token::Float : Token::Int, num, line});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          line += s[j] == '\n';
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '0': v += '\0'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break; // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + n >= s.size() || !std::all_of(s.begin() + static_cast<long>(j) + 1,
                                                s.begin() + static_cast<long>(j + n) + 1,
                                                [](char h) { return isxdigit(static_cast<unsigned char>(h)); }))
            fail(line, "invalid \\" + std::string(1, e) + " escape in a string");
          const uint32_t cp = static_cast<uint32_t>(std::stoul(s.substr(j + 1, n), nullptr, 16));
          j += n;
          if (cp < 0x80) {
            v += static_cast<char>(cp);
          } else if (cp < 0x800) {
            v += static_cast<char>(0xC0 | (cp >> 6));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            v += static_cast<char>(0xE0 | (cp >> 12));
            v += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            v += static_cast<char>(0xF0 | (cp >> 18));
            v += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            v += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: // Python keeps an unknown escape as written
          v += '\\';
          v += e;
        }
      }
      if (j >= s.size())
        fail(line, "unterminated string literal");
      toks.push_back({Token::String, v, line});
      i = j + 1;
    } else {
      static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                        "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
      const char *hit = nullptr;
      for (const char *op : ops)
        if (s.compare(i, strlen(op), op) == 0) {
          hit = op;
          break;
        }
      if (!hit)
        fail(line, std::string("unexpected character '") + c + "'");
      toks.push_back({Token::Op, hit, line});
      i += strlen(hit);
    }
  }
  toks.push_back({Token::End, "", line});
  return toks;
}

} // namespace tpc::server::jinja
