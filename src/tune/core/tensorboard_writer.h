// TensorBoard event files (logging.tensorboard): the scalars of metrics.jsonl as `tensorboard --logdir` reads them.
//
// The format, written here without TensorFlow or protobuf: a file of TFRecords (each: the payload's length as a
// little-endian uint64, the masked CRC-32C of those 8 bytes, the payload, the masked CRC-32C of the payload), whose
// payloads are tensorflow.Event protos: the first holds file_version "brain.Event:2", each later one a wall time, a
// step and a Summary of simple_value scalars. Only the proto fields used are encoded (Event: wall_time 1, step 2,
// file_version 3, summary 5; Summary: value 1; Summary.Value: tag 1, simple_value 2).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tune {

// CRC-32C (Castagnoli), as TFRecord uses it, and TFRecord's masking of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// The Event protos, encoded: the file's first record, and one of scalars at a step.
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
// One TFRecord framing `payload`.
std::string frame_record(std::string_view payload);

// A run's TensorBoard directory (RUN/tensorboard/). Opening it replaces the event files a previous process of this
// run wrote with one new file holding `history` (metrics.jsonl's records, already trimmed to the resume step), so a
// resumed run continues the same curves without a step twice; write() then appends each new record. Every numeric
// field of a record except "step" becomes a scalar of that name (null, i.e. non-finite, fields are left out).
class TensorBoardWriter {
 public:
  TensorBoardWriter(const std::filesystem::path& directory, const std::vector<nlohmann::json>& history,
                    double elapsed_s);
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  void append(const std::string& payload);

  std::filesystem::path path_;
  std::ofstream stream_;
};

}  // namespace tune
