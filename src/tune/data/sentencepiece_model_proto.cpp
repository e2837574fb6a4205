// Reading and rewriting a ModelProto's NormalizerSpec (see sentencepiece_model_proto.h).
#include "tune/data/sentencepiece_model_proto.h"

#include <fmt/format.h>

#include <cstdint>
#include <optional>

#include "tune/core/error.h"

namespace tune::data {
namespace {

// sentencepiece_model.proto's field numbers.
constexpr uint64_t kModelNormalizerSpec = 3;
constexpr uint64_t kModelSelfTestData = 4;
constexpr uint64_t kNormalizerName = 1;
constexpr uint64_t kNormalizerPrecompiledCharsmap = 2;
constexpr uint64_t kNormalizerRuleTsv = 6;

constexpr uint64_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

struct Field {
  uint64_t number = 0;
  std::string_view whole;    // key and payload, as stored
  std::string_view payload;  // the bytes of a length-delimited field
};

class FieldReader {
 public:
  FieldReader(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  std::optional<Field> next() {
    if (at_ >= bytes_.size()) return std::nullopt;
    const size_t begin = at_;
    const uint64_t key = varint();
    Field field;
    field.number = key >> 3;
    switch (key & 7U) {
      case kVarint: varint(); break;
      case kFixed64: skip(8); break;
      case kFixed32: skip(4); break;
      case kLengthDelimited: {
        const uint64_t length = varint();
        const size_t payload_begin = at_;
        skip(length);
        field.payload = bytes_.substr(payload_begin, length);
        break;
      }
      default: malformed(fmt::format("wire type {} at byte {}", key & 7U, begin));
    }
    field.whole = bytes_.substr(begin, at_ - begin);
    return field;
  }

 private:
  uint64_t varint() {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= bytes_.size()) malformed("a varint runs past the end");
      const auto byte = static_cast<unsigned char>(bytes_[at_++]);
      result |= static_cast<uint64_t>(byte & 0x7FU) << shift;
      if ((byte & 0x80U) == 0) return result;
    }
    malformed("a varint longer than 10 bytes");
  }

  void skip(uint64_t length) {
    if (length > bytes_.size() - at_) malformed("a field runs past the end");
    at_ += length;
  }

  [[noreturn]] void malformed(const std::string& what) const {
    throw InputError(fmt::format("{}: not a sentencepiece model ({})", source_, what));
  }

  std::string_view bytes_;
  const std::string& source_;
  size_t at_ = 0;
};

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80U) {
    out += static_cast<char>((value & 0x7FU) | 0x80U);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void append_length_delimited(std::string& out, uint64_t number, std::string_view payload) {
  append_varint(out, (number << 3) | kLengthDelimited);
  append_varint(out, payload.size());
  out.append(payload);
}

std::optional<std::string_view> normalizer_spec(std::string_view model_bytes, const std::string& source) {
  std::optional<std::string_view> spec;
  FieldReader reader(model_bytes, source);
  while (const auto field = reader.next()) {
    if (field->number == kModelNormalizerSpec) spec = field->payload;  // protobuf: the last one wins
  }
  return spec;
}

}  // namespace

std::string sentencepiece_normalization_map(std::string_view model_bytes, const std::string& source) {
  const auto spec = normalizer_spec(model_bytes, source);
  if (!spec) return "";
  std::string map;
  FieldReader reader(*spec, source);
  while (const auto field = reader.next()) {
    if (field->number == kNormalizerPrecompiledCharsmap) map.assign(field->payload);
  }
  return map;
}

std::string sentencepiece_model_without_normalization_map(std::string_view model_bytes, const std::string& source) {
  std::string spec;
  if (const auto original = normalizer_spec(model_bytes, source)) {
    FieldReader reader(*original, source);
    while (const auto field = reader.next()) {
      const bool dropped = field->number == kNormalizerName || field->number == kNormalizerPrecompiledCharsmap ||
                           field->number == kNormalizerRuleTsv;
      if (!dropped) spec.append(field->whole);
    }
  }
  append_length_delimited(spec, kNormalizerName, "identity");

  std::string model;
  FieldReader reader(model_bytes, source);
  while (const auto field = reader.next()) {
    if (field->number != kModelNormalizerSpec && field->number != kModelSelfTestData) model.append(field->whole);
  }
  append_length_delimited(model, kModelNormalizerSpec, spec);
  return model;
}

}  // namespace tune::data
