// tokenizer.json decoders (see decoder.h).
#include "tune/data/hf/decoder.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/data/hf/byte_level.h"
#include "tune/data/hf/normalizer.h"
#include "tune/data/hf/text_utils.h"

namespace tune::data::hf {
namespace {

// "<0xAB>" -> 0xAB, or -1.
int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int high = hex(token[3]), low = hex(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

}  // namespace

Decoder make_decoder(const nlohmann::json& spec, const std::string& source) {
  if (spec.is_null()) return [](std::vector<std::string> tokens) { return tokens; };
  const std::string type = spec.at("type").get<std::string>();
  const std::string where = fmt::format("{}: decoder {}", source, type);
  if (type == "Sequence") {
    std::vector<Decoder> parts;
    for (const auto& part : spec.at("decoders")) parts.push_back(make_decoder(part, source));
    return [parts](std::vector<std::string> tokens) {
      for (const auto& part : parts) tokens = part(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel") {
    // The tokens' alphabet characters back to bytes, joined, then read as UTF-8 with invalid sequences replaced.
    return [](std::vector<std::string> tokens) {
      std::string bytes;
      for (const auto& token : tokens) bytes += alphabet_to_bytes(token);
      return std::vector<std::string>{sanitize(bytes)};
    };
  }
  if (type == "Replace") {
    const Normalizer replace = make_replace(spec, where);
    return [replace](std::vector<std::string> tokens) {
      for (auto& token : tokens) token = replace(token);
      return tokens;
    };
  }
  if (type == "ByteFallback") {
    // Runs of <0xXX> tokens become the bytes they spell when those are valid UTF-8, else one U+FFFD per byte.
    return [](std::vector<std::string> tokens) {
      std::vector<std::string> out;
      std::string pending;
      size_t pending_count = 0;
      auto flush = [&]() {
        if (pending_count == 0) return;
        if (sanitize(pending) == pending) {
          out.push_back(pending);
        } else {
          for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
        }
        pending.clear();
        pending_count = 0;
      };
      for (auto& token : tokens) {
        const int value = byte_token_value(token);
        if (value >= 0) {
          pending += static_cast<char>(value);
          ++pending_count;
          continue;
        }
        flush();
        out.push_back(std::move(token));
      }
      flush();
      return out;
    };
  }
  if (type == "Fuse") {
    return [](std::vector<std::string> tokens) {
      std::string joined;
      for (const auto& token : tokens) joined += token;
      return std::vector<std::string>{joined};
    };
  }
  if (type == "Strip") {
    const std::string content = spec.at("content").get<std::string>();
    const size_t start = spec.value("start", 0), stop = spec.value("stop", 0);
    return [content, start, stop](std::vector<std::string> tokens) {
      for (auto& token : tokens) {
        size_t begin = 0, end = token.size();
        for (size_t i = 0; i < start && token.compare(begin, content.size(), content) == 0 && begin < end; ++i) {
          begin += content.size();
        }
        for (size_t i = 0; i < stop && end >= begin + content.size() &&
                           token.compare(end - content.size(), content.size(), content) == 0;
             ++i) {
          end -= content.size();
        }
        token = token.substr(begin, end - begin);
      }
      return tokens;
    };
  }
  if (type == "Metaspace") {
    const std::string replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = spec.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    return [replacement, scheme](std::vector<std::string> tokens) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string text = replace_all(tokens[i], replacement, " ");
        if (i == 0 && scheme != "never" && text.rfind(' ', 0) == 0) text.erase(0, 1);
        tokens[i] = std::move(text);
      }
      return tokens;
    };
  }
  throw InputError(fmt::format("{}: decoder type '{}' is not supported (supported: Sequence, ByteLevel, Replace, "
                               "ByteFallback, Fuse, Strip, Metaspace)",
                               source, type));
}

}  // namespace tune::data::hf
