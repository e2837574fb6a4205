// tokenizer.json normalizers (see normalizer.h).
#include "tune/data/hf/normalizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "tune/core/error.h"
#include "tune/data/hf/regex.h"
#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {
namespace {

bool is_whitespace_byte_start(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

// {"String": "..."} or {"Regex": "..."} patterns of Replace and Split.
Normalizer make_replace(const nlohmann::json& spec, const std::string& where) {
  const auto& pattern = spec.at("pattern");
  const std::string content = spec.at("content").get<std::string>();
  if (pattern.contains("String")) {
    const std::string from = pattern["String"].get<std::string>();
    if (from.empty()) return [](const std::string& text) { return text; };
    return [from, content](const std::string& text) { return replace_all(text, from, content); };
  }
  const Regex regex(pattern.at("Regex").get<std::string>(), where);
  return [regex, content](const std::string& text) {
    std::string out;
    size_t last = 0;
    for (const auto& [begin, end] : regex.find_all(text)) {
      out.append(text, last, begin - last);
      out += content;
      last = end;
    }
    out.append(text, last, std::string::npos);
    return out;
  };
}

Normalizer make_normalizer(const nlohmann::json& spec, const std::string& source) {
  if (spec.is_null()) return [](const std::string& text) { return text; };
  const std::string type = spec.at("type").get<std::string>();
  const std::string where = fmt::format("{}: normalizer {}", source, type);
  if (type == "NFC") return [](const std::string& t) { return normalize(t, NormalForm::nfc); };
  if (type == "NFD") return [](const std::string& t) { return normalize(t, NormalForm::nfd); };
  if (type == "NFKC") return [](const std::string& t) { return normalize(t, NormalForm::nfkc); };
  if (type == "NFKD") return [](const std::string& t) { return normalize(t, NormalForm::nfkd); };
  if (type == "Lowercase") return [](const std::string& t) { return lowercase(t); };
  if (type == "Prepend") {
    const std::string prefix = spec.at("prepend").get<std::string>();
    return [prefix](const std::string& t) { return t.empty() ? t : prefix + t; };
  }
  if (type == "Replace") return make_replace(spec, where);
  if (type == "Strip") {
    const bool left = spec.value("strip_left", true), right = spec.value("strip_right", true);
    return [left, right](const std::string& t) {
      size_t begin = 0, end = t.size();
      while (left && begin < end && is_whitespace_byte_start(t, begin)) ++begin;
      while (right && end > begin && is_whitespace_byte_start(t, end - 1)) --end;
      return t.substr(begin, end - begin);
    };
  }
  if (type == "Sequence") {
    std::vector<Normalizer> parts;
    for (const auto& part : spec.at("normalizers")) parts.push_back(make_normalizer(part, source));
    return [parts](const std::string& t) {
      std::string text = t;
      for (const auto& part : parts) text = part(text);
      return text;
    };
  }
  throw InputError(fmt::format("{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
                               "Prepend, Replace, Strip, Sequence)",
                               source, type));
}

}  // namespace tune::data::hf
