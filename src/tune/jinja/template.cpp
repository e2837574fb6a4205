// Template: lex and parse once, render with a fresh renderer for each context.
#include "tune/jinja/template.h"

#include <ctime>

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/jinja/lexer.h"
#include "tune/jinja/parser.h"
#include "tune/jinja/renderer.h"

namespace tune::jinja {
namespace {

std::string strftime_local_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[512];
  const size_t written = std::strftime(buffer, sizeof buffer, format.c_str(), &local);
  return std::string(buffer, written);
}

}  // namespace

Template Template::parse(const std::string& source, const std::string& name) {
  auto body = std::make_shared<const Body>(parse_template(tokenize(source, name), name));
  return Template(name, std::move(body));
}

std::string Template::render(const Value& context, const RenderOptions& options) const {
  if (!context.is_map()) {
    throw InputError(fmt::format("template '{}': the render context must be a map of variables, got {}", name_,
                                 context.type_name()));
  }
  const StrftimeNow clock = options.strftime_now ? options.strftime_now : strftime_local_now;
  Renderer renderer(name_, context.as_map(), make_globals(clock));
  return renderer.render(*body_);
}

}  // namespace tune::jinja
