//===- Ast.h - a parsed chat template -----------------------------*- C++ -*-===//
//
// Expressions and statements of the Jinja subset chat templates use. One node struct per level with a
// kind and children (rather than a class per construct) keeps the evaluator a pair of switches. Every node
// keeps its template line, which names it in errors.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_JINJA_AST_H
#define TPC_SERVER_JINJA_AST_H

#include "server/jinja/Value.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::server::jinja {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum class K {
    Literal, ///< lit
    Name,    ///< name
    List,    ///< kids
    Tuple,   ///< kids
    Dict,    ///< kids: key, value, key, value...
    Attr,    ///< kids[0].name
    Item,    ///< kids[0][kids[1]]
    Slice,   ///< kids[0][kids[1]:kids[2]:kids[3]] (null kids for omitted bounds)
    Call,    ///< kids[0](kids[1..], kwargs)
    Filter,  ///< kids[0] | name(kids[1..], kwargs)
    Test,    ///< kids[0] is [not] name(kids[1..])
    Neg,     ///< -kids[0]
    Pos,     ///< +kids[0]
    Not,     ///< not kids[0]
    And,     ///< kids[0] and kids[1]
    Or,      ///< kids[0] or kids[1]
    Binary,  ///< kids[0] name kids[1]: + - * / // % ** ~ == != < > <= >= in notin
    Cond,    ///< kids[0] if kids[1] else kids[2] (kids[2] null: Undefined)
  };
  K k;
  int line = 0;
  Value lit;
  std::string name;
  std::vector<ExprP> kids;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negated = false; ///< Test: `is not`
};

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

struct Node {
  enum class K {
    Text,      ///< text
    Output,    ///< {{ expr }}
    If,        ///< branches (cond null for else)
    For,       ///< for targets in expr [if filter]: body [else elseBody]
    Set,       ///< set targets|target = expr
    SetBlock,  ///< set targets[0] %}body{% endset
    Macro,     ///< macro name(params): body
    CallBlock, ///< call [(params)] expr: body is caller()
    Filter,    ///< filter expr (a Filter Expr whose kids[0] is null): body
    Break,
    Continue,
    Block, ///< a body rendered in place ({% generation %})
  };
  K k;
  int line = 0;
  std::string text;
  ExprP expr;
  ExprP target;                      ///< Set: an Attr target (ns.x)
  std::vector<std::string> targets;  ///< For/Set: names (several: unpacked)
  std::vector<std::pair<ExprP, Body>> branches;
  Body body, elseBody;
  ExprP filter;
  std::vector<std::pair<std::string, ExprP>> params; ///< Macro/CallBlock: name, default (or null)
};

/// Parses a template (trim_blocks and lstrip_blocks on, as transformers sets them). Throws RenderError
/// with the line and the construct on a syntax error.
Body parseTemplate(const std::string &source);

} // namespace tpc::server::jinja

#endif // TPC_SERVER_JINJA_AST_H
