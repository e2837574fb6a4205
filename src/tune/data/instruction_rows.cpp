// Instruction rows (Alpaca): {"instruction", "input"?, "output", "system"?} -> [system?, user, assistant].
#include <fmt/format.h>

#include "tune/data/sft_rows.h"

namespace tune::data::rows {

namespace {
const char* const kInstructionFields = "instruction rows need 'instruction' and 'output' (optional: 'input', 'system')";
}  // namespace

std::vector<ChatMessage> instruction_messages(const nlohmann::json& row) {
  std::vector<ChatMessage> messages;
  const std::string system = string_field(row, "system", false, kInstructionFields);
  const std::string instruction = string_field(row, "instruction", true, kInstructionFields);
  const std::string input = string_field(row, "input", false, kInstructionFields);
  const std::string output = string_field(row, "output", true, kInstructionFields);
  if (!system.empty()) messages.push_back({"system", system});
  // Alpaca's own prompt puts the input after the instruction; a blank line keeps the two apart.
  messages.push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
  messages.push_back({"assistant", output});
  return messages;
}

}  // namespace tune::data::rows
