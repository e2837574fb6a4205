// Evaluation of a parsed template: statements append to the output, expressions produce values. Scoping follows
// jinja2: `for` bodies and macros get a scope of their own (fresh for each iteration), `if` does not, and
// variables resolve through the scopes, then the render context, then the globals.
#pragma once

#include <memory>
#include <string>

#include "tune/jinja/ast.h"
#include "tune/jinja/builtins.h"

namespace tune::jinja {

struct Scope {
  Map variables;
  const Scope* parent = nullptr;
  // Expires with the scope; a macro defined in it holds a weak_ptr to know whether the scope still exists.
  std::shared_ptr<const bool> alive = std::make_shared<const bool>(true);
};

class Renderer {
 public:
  Renderer(std::string template_name, Map context, Map globals);

  std::string render(const Body& body);

  // Public for the macro values, which render their body when called.
  Value evaluate(const Expression& expression, const Scope& scope);

 private:
  enum class Flow { next, break_loop, continue_loop };

  Flow render_body(const Body& body, Scope& scope, std::string& out);
  Flow render_statement(const Statement& statement, Scope& scope, std::string& out);
  void render_for(const ForStatement& loop, Scope& scope, std::string& out);
  void render_set(const SetStatement& set, Scope& scope);
  Value make_macro(const MacroStatement& macro, const Scope& scope);

  Value lookup(const std::string& name, const Scope& scope) const;
  Value evaluate_node(const Expression& expression, const Scope& scope);
  Value evaluate_call(const Call& call, const Scope& scope);
  Value evaluate_slice(const Slice& slice, const Scope& scope);
  CallArguments evaluate_arguments(const Arguments& arguments, const Scope& scope);
  [[noreturn]] void fail(Location location, const std::string& message) const;

  // Counts a unit of work (a statement run or an expression evaluated); past kMaxWork the render fails. jinja2 has
  // no such limit, but a chat template renders one conversation: nested loops over long strings (found by fuzzing)
  // would otherwise run for hours, and no real template comes near this.
  void spend_work(Location location);

  static constexpr int kMaxDepth = 512;  // evaluate()'s recursion (jinja2 stops near 100 levels)
  static constexpr int64_t kMaxWork = 500'000;
  static constexpr size_t kMaxOutputBytes = size_t{64} << 20;  // 64 MiB of rendered text

  std::string template_name_;
  Map context_;
  Map globals_;
  int depth_ = 0;  // evaluate() calls in progress
  int64_t work_ = 0;  // units of work spent so far (spend_work)
};

}  // namespace tune::jinja
