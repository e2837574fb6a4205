// TensorBoard event files: CRC-32C against its published check value, the record framing, the proto bytes of an
// Event against a hand encoding from the protobuf wire format, and the run directory's rewrite on resume. (The CLI
// tests read the files back with TensorBoard's own reader.)
#include "tune/core/tensorboard_writer.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

using namespace tune;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Splits a file of TFRecords into payloads, checking both CRCs of each.
std::vector<std::string> payloads(const std::string& file) {
  std::vector<std::string> result;
  size_t at = 0;
  while (at < file.size()) {
    REQUIRE(at + 12 <= file.size());
    uint64_t length = 0;
    uint32_t length_crc = 0, payload_crc = 0;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    CHECK(length_crc == masked_crc32c(std::string_view(file.data() + at, 8)));
    REQUIRE(at + 12 + length + 4 <= file.size());
    result.emplace_back(file.substr(at + 12, length));
    std::memcpy(&payload_crc, file.data() + at + 12 + length, 4);
    CHECK(payload_crc == masked_crc32c(result.back()));
    at += 12 + length + 4;
  }
  return result;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C matches the Castagnoli check value") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // RFC 3720 / the CRC catalogue's check value for CRC-32C
  CHECK(crc32c("") == 0u);
  const uint32_t crc = crc32c("abc");
  CHECK(masked_crc32c("abc") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8u));
}

TEST_CASE("tensorboard: an Event with one scalar is the protobuf wire encoding of its fields") {
  // wall_time 1.5 (field 1, fixed64), step 300 (field 2, varint 0xAC 0x02), summary (field 5) holding one value
  // (field 1) with tag "loss" (field 1) and simple_value 0.25f (field 2, fixed32).
  const std::string expected = std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f", 9) + std::string("\x10\xac\x02", 3) +
                               std::string("\x2a\x0d\x0a\x0b\x0a\x04loss\x15\x00\x00\x80\x3e", 15);
  CHECK(encode_scalars_event(1.5, 300, {{"loss", 0.25f}}) == expected);
  CHECK(encode_file_version_event(0.0) == std::string("\x09\0\0\0\0\0\0\0\0\x1a\x0d", 11) + "brain.Event:2");
  const std::string framed = frame_record("xyz");
  CHECK(framed.size() == 8 + 4 + 3 + 4);
  CHECK(payloads(framed) == std::vector<std::string>{"xyz"});
}

TEST_CASE("tensorboard: reopening a run's directory replaces its event file with the history, then appends") {
  const auto directory = std::filesystem::temp_directory_path() / "tune-test-tensorboard";
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::ofstream(directory / "events.out.tfevents.1.other-tool") << "not ours";
  {
    TensorBoardWriter first(directory, {}, 0.0);
    for (int step = 1; step <= 4; ++step) first.write({{"step", step}, {"loss", 1.0 / step}, {"lr", 0.1}});
  }
  // Resumed at step 2: the history is metrics.jsonl trimmed to step 2 (one record has a null, i.e. NaN, loss).
  const std::vector<nlohmann::json> history = {{{"step", 1}, {"loss", 1.0}, {"elapsed_s", 1.0}},
                                               {{"step", 2}, {"loss", nullptr}, {"elapsed_s", 2.0}}};
  TensorBoardWriter resumed(directory, history, 2.0);
  resumed.write({{"step", 3}, {"loss", 0.3}});
  int ours = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    ours += entry.path().extension() == ".tune" ? 1 : 0;
  }
  CHECK(ours == 1);  // the first writer's file is gone
  CHECK(std::filesystem::exists(directory / "events.out.tfevents.1.other-tool"));
  const auto records = payloads(read_file(resumed.path()));
  REQUIRE(records.size() == 4);  // file version, steps 1, 2 (elapsed_s only), 3
  CHECK(records[1].find("loss") != std::string::npos);
  CHECK(records[2].find("loss") == std::string::npos);  // the null is left out
  CHECK(records[2].find("elapsed_s") != std::string::npos);
  CHECK(records[3].find("loss") != std::string::npos);
  std::filesystem::remove_all(directory);
}
