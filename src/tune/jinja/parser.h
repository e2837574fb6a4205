// Builds the statement tree from tokens: jinja2's grammar for the statements and expressions chat templates use.
#pragma once

#include <string>
#include <vector>

#include "tune/jinja/ast.h"

namespace tune::jinja {

// Throws tune::InputError naming the template, line and column and what was expected, for a syntax error or a
// construct this interpreter does not support ({% include %}, {% extends %}, ...).
Body parse_template(const std::vector<Token>& tokens, const std::string& template_name);

}  // namespace tune::jinja
