// Statement rendering: text and {{ }} output, if, for (with jinja2's `loop` object, else, filter, break and
// continue), set (plain, unpacking, namespace attribute, block) and macros.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/jinja/arguments.h"
#include "tune/jinja/operators.h"
#include "tune/jinja/python_text.h"
#include "tune/jinja/renderer.h"

namespace tune::jinja {
namespace {

// Binds `for a, b in ...` and `set a, b = ...` targets, unpacking as Python does.
void assign_targets(const std::vector<std::string>& targets, const Value& value, Map& variables) {
  if (targets.size() == 1) {
    variables.set(targets[0], value);
    return;
  }
  const List items = iterate(value);
  if (items.size() != targets.size()) {
    throw EvaluationError(fmt::format("cannot unpack {} value(s) into {} variables", items.size(), targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) variables.set(targets[i], items[i]);
}

// jinja2's `loop` variable for the iteration at `index` of `items`.
Value loop_object(const List& items, size_t index) {
  const auto length = static_cast<int64_t>(items.size());
  const auto position = static_cast<int64_t>(index);
  Map loop;
  loop.set("index0", Value(position));
  loop.set("index", Value(position + 1));
  loop.set("revindex0", Value(length - position - 1));
  loop.set("revindex", Value(length - position));
  loop.set("first", Value(index == 0));
  loop.set("last", Value(position == length - 1));
  loop.set("length", Value(length));
  loop.set("depth", Value(1));
  loop.set("depth0", Value(0));
  loop.set("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
  loop.set("nextitem", position + 1 < length ? items[index + 1] : Value::undefined("there is no next item"));
  loop.set("cycle", Value::function("loop.cycle", [position](const CallArguments& call) {
    if (call.positional.empty()) throw EvaluationError("no items for cycling given");
    return call.positional[static_cast<size_t>(position) % call.positional.size()];
  }));
  return Value(loop);
}

// Namespaces are the only values a template can change, hence the only way to build a value that holds itself (a
// shared_ptr cycle, leaked, on which str() would recurse forever) or one nested without bound by a loop (whose
// destruction would recurse as deep): what a namespace attribute may hold is checked when it is stored. jinja2
// allows both; no chat template does either.
constexpr int kMaxStoredDepth = 100;

void check_storable(const Value& value, const std::string& attribute, int depth = 0) {
  if (value.is_namespace()) {
    throw EvaluationError(fmt::format("namespace attribute '{}' cannot hold a namespace", attribute));
  }
  if (depth >= kMaxStoredDepth) {
    throw EvaluationError(fmt::format("the value for namespace attribute '{}' nests more than {} levels deep",
                                      attribute, kMaxStoredDepth));
  }
  if (value.is_list()) {
    for (const Value& item : value.as_list()) check_storable(item, attribute, depth + 1);
  } else if (value.is_map()) {
    for (const auto& entry : value.as_map().entries()) check_storable(entry.second, attribute, depth + 1);
  }
}

}  // namespace

Renderer::Renderer(std::string template_name, Map context, Map globals)
    : template_name_(std::move(template_name)), context_(std::move(context)), globals_(std::move(globals)) {}

std::string Renderer::render(const Body& body) {
  Scope root;
  std::string out;
  render_body(body, root, out);
  return out;
}

Renderer::Flow Renderer::render_body(const Body& body, Scope& scope, std::string& out) {
  for (const Statement& statement : body) {
    spend_work(statement.location);
    const Flow flow = render_statement(statement, scope, out);
    if (out.size() > kMaxOutputBytes) {
      fail(statement.location, fmt::format("the template's output exceeds {} MiB", kMaxOutputBytes >> 20));
    }
    if (flow != Flow::next) return flow;
  }
  return Flow::next;
}

Renderer::Flow Renderer::render_statement(const Statement& statement, Scope& scope, std::string& out) {
  const auto& node = statement.node;
  if (const auto* text = std::get_if<TextOutput>(&node)) {
    out += text->text;
  } else if (const auto* output = std::get_if<ExpressionOutput>(&node)) {
    const Value value = evaluate(*output->expression, scope);
    try {
      out += python_str(value);
    } catch (const EvaluationError& error) {  // str() of a namespace that holds itself
      fail(output->expression->location, error.what());
    }
  } else if (const auto* branch = std::get_if<IfStatement>(&node)) {
    for (const auto& [condition, body] : branch->branches) {
      if (evaluate(*condition, scope).truthy()) return render_body(body, scope, out);
    }
    return render_body(branch->otherwise, scope, out);
  } else if (const auto* loop = std::get_if<ForStatement>(&node)) {
    try {
      render_for(*loop, scope, out);
    } catch (const EvaluationError& error) {
      fail(statement.location, error.what());
    }
  } else if (const auto* set = std::get_if<SetStatement>(&node)) {
    try {
      render_set(*set, scope);
    } catch (const EvaluationError& error) {
      fail(statement.location, error.what());
    }
  } else if (const auto* macro = std::get_if<MacroStatement>(&node)) {
    scope.variables.set(macro->name, make_macro(*macro, scope));
  } else if (std::holds_alternative<BreakStatement>(node)) {
    return Flow::break_loop;
  } else if (std::holds_alternative<ContinueStatement>(node)) {
    return Flow::continue_loop;
  } else {
    return render_body(std::get<GenerationBlock>(node).body, scope, out);
  }
  return Flow::next;
}

void Renderer::render_for(const ForStatement& loop, Scope& scope, std::string& out) {
  List items = iterate(evaluate(*loop.iterable, scope));
  if (loop.filter) {
    // The filter sees the loop variable but not `loop`, and loop.length counts only the items it keeps.
    List kept;
    for (const Value& item : items) {
      Scope candidate{{}, &scope};
      assign_targets(loop.targets, item, candidate.variables);
      if (evaluate(*loop.filter, candidate).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    render_body(loop.otherwise, scope, out);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    // A fresh scope each iteration: jinja2 forgets an iteration's `set`s when the next one starts.
    Scope iteration{{}, &scope};
    iteration.variables.set("loop", loop_object(items, i));
    assign_targets(loop.targets, items[i], iteration.variables);
    if (render_body(loop.body, iteration, out) == Flow::break_loop) break;
  }
}

void Renderer::render_set(const SetStatement& set, Scope& scope) {
  if (!set.attribute.empty()) {
    const Value target = lookup(set.targets[0], scope);
    if (!target.is_namespace()) {
      throw EvaluationError(fmt::format("cannot assign attribute on non-namespace object '{}'", set.targets[0]));
    }
    if (set.attribute[0] == '_') {
      throw EvaluationError(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, "
                                        "but got '{}'", set.attribute));
    }
    Value value = evaluate(*set.value, scope);
    check_storable(value, set.attribute);
    target.namespace_attributes().set(set.attribute, std::move(value));
    return;
  }
  if (set.value) {
    assign_targets(set.targets, evaluate(*set.value, scope), scope.variables);
    return;
  }
  std::string captured;
  Scope block{{}, &scope};
  render_body(set.body, block, captured);
  scope.variables.set(set.targets[0], Value(captured));
}

Value Renderer::make_macro(const MacroStatement& macro, const Scope& scope) {
  return Value::function(macro.name, [this, &macro, &scope, alive = std::weak_ptr<const bool>(scope.alive)](
                                         const CallArguments& call) {
    // Stored in a namespace, a macro can outlive the scope it was defined in (a loop's iteration), whose variables
    // it would read: refused (jinja2's closure would keep them alive; no chat template does this).
    if (alive.expired()) {
      throw EvaluationError(fmt::format("macro '{}' was called after the block it was defined in had ended",
                                        macro.name));
    }
    if (call.positional.size() > macro.parameters.size()) {
      throw EvaluationError(fmt::format("macro '{}' takes not more than {} argument(s)", macro.name,
                                        macro.parameters.size()));
    }
    Scope local{{}, &scope};
    for (size_t i = 0; i < macro.parameters.size(); ++i) {
      const auto& [name, default_value] = macro.parameters[i];
      const Value* keyword = nullptr;
      for (const auto& [key, value] : call.keyword)
        if (key == name) keyword = &value;
      if (i < call.positional.size()) {
        if (keyword) throw EvaluationError(fmt::format("macro '{}' got multiple values for argument '{}'", macro.name, name));
        local.variables.set(name, call.positional[i]);
      } else if (keyword) {
        local.variables.set(name, *keyword);
      } else if (default_value) {
        local.variables.set(name, evaluate(*default_value, local));  // defaults may use earlier parameters
      } else {
        local.variables.set(name, Value::undefined(fmt::format("parameter '{}' was not provided", name)));
      }
    }
    for (const auto& [key, value] : call.keyword) {
      bool known = false;
      for (const auto& parameter : macro.parameters) known = known || parameter.first == key;
      if (!known) throw EvaluationError(fmt::format("macro '{}' takes no keyword argument '{}'", macro.name, key));
    }
    std::string out;
    render_body(macro.body, local, out);
    return Value(out);
  });
}

}  // namespace tune::jinja
