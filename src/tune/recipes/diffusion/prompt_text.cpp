#include "tune/recipes/diffusion/prompt_text.h"

#include <cctype>

namespace tune::recipes::diffusion_common {

std::string preprocess_prompt(const std::string& prompt) {
  std::string text;
  text.reserve(prompt.size());
  for (const char c : prompt) text.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  // str.strip(): ASCII whitespace (space, \t, \n, \v, \f, \r) and the file/group/record/unit separators.
  auto is_space = [](unsigned char c) { return std::isspace(c) != 0 || (c >= 0x1c && c <= 0x1f); };
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && is_space(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

}  // namespace tune::recipes::diffusion_common
