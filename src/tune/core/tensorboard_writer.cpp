// TensorBoard event files: TFRecord framing, CRC-32C and the few Event proto fields tune writes.
#include "tune/core/tensorboard_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include "tune/core/error.h"

namespace tune {
namespace {

namespace fs = std::filesystem;

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;  // reflected
    table[i] = crc;
  }
  return table;
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  std::array<char, sizeof(T)> bytes{};
  std::memcpy(bytes.data(), &value, sizeof(T));  // x86-64 and aarch64 Linux are little-endian, as the format
  out.append(bytes.data(), bytes.size());
}

// Protobuf field keys: (field number << 3) | wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }

void put_bytes_field(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::pair<std::string, float>> scalars_of(const nlohmann::json& record) {
  std::vector<std::pair<std::string, float>> scalars;
  for (const auto& [key, value] : record.items()) {
    if (key == "step" || !value.is_number()) continue;
    scalars.emplace_back(key, value.get<float>());
  }
  return scalars;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) crc = table[(crc ^ static_cast<uint8_t>(c)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string frame_record(std::string_view payload) {
  std::string length;
  put_little_endian<uint64_t>(length, payload.size());
  std::string record = length;
  put_little_endian<uint32_t>(record, masked_crc32c(length));
  record.append(payload.data(), payload.size());
  put_little_endian<uint32_t>(record, masked_crc32c(payload));
  return record;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_key(event, 1, 1);
  put_little_endian<double>(event, wall_time);
  put_bytes_field(event, 3, "brain.Event:2");
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    put_bytes_field(entry, 1, tag);
    put_key(entry, 2, 5);
    put_little_endian<float>(entry, value);
    put_bytes_field(summary, 1, entry);
  }
  std::string event;
  put_key(event, 1, 1);
  put_little_endian<double>(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes_field(event, 5, summary);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& directory, const std::vector<nlohmann::json>& history,
                                     double elapsed_s) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw Error(fmt::format("cannot create {}: {}", directory.string(), error.message()));
  // The earlier files of this run go: their records are all in `history` up to the resume step, and anything after
  // it is being redone. (Files of other tools in the directory are left alone.)
  for (const auto& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".tune") {
      fs::remove(entry.path(), error);
    }
  }
  const double now = now_seconds();
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  // TensorBoard's naming (events.out.tfevents.<seconds>.<host>), with the pid and ".tune" so that files of the same
  // second never collide and this class can tell its own files.
  path_ = directory / fmt::format("events.out.tfevents.{}.{}.{}.tune", static_cast<int64_t>(now), host, getpid());
  stream_.open(path_, std::ios::binary | std::ios::trunc);
  if (!stream_) throw Error(fmt::format("cannot write {}", path_.string()));
  append(encode_file_version_event(now));
  for (const auto& record : history) {
    // Earlier records' wall times, from their elapsed_s where they have it (the curves' time axis stays whole).
    const double at = record.contains("elapsed_s") && record["elapsed_s"].is_number()
                          ? now - (elapsed_s - record["elapsed_s"].get<double>())
                          : now;
    if (record.contains("step") && record["step"].is_number_integer()) {
      append(encode_scalars_event(at, record["step"].get<int64_t>(), scalars_of(record)));
    }
  }
  stream_.flush();
}

void TensorBoardWriter::write(const nlohmann::json& record) {
  append(encode_scalars_event(now_seconds(), record.at("step").get<int64_t>(), scalars_of(record)));
  stream_.flush();
  if (!stream_) throw Error(fmt::format("writing {} failed (disk full?)", path_.string()));
}

void TensorBoardWriter::append(const std::string& payload) {
  const std::string record = frame_record(payload);
  stream_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

}  // namespace tune
