// Raw-text rows (format text, continued pre-training): {"text": "..."}, one document each.
#include "tune/data/sft_rows.h"

namespace tune::data::rows {

std::string text_of(const nlohmann::json& row) {
  std::string text = string_field(row, "text", true, "text rows need 'text'");
  // A document of whitespace would train only BOS -> EOS; almost certainly an export glitch.
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw BadRow{"field 'text' is empty"};
  return text;
}

}  // namespace tune::data::rows
