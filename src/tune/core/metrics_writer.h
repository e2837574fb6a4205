// metrics.jsonl: one JSON object per logged step, appended and flushed line by line so a crash loses nothing
// already logged, and trimmed on resume so a resumed run never repeats a step (ARCHITECTURE.md §4).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tune {

// Appends records to output_dir/metrics.jsonl. A record is a JSON object with an integer "step" and any of
// loss, lr, grad_norm, tokens_per_s or samples_per_s, peak_mem_bytes, elapsed_s, eval_loss. NaN and inf are
// written as null (JSON has no spelling for them), so every line stays valid JSON.
class MetricsWriter {
 public:
  // Creates output_dir if needed and opens metrics.jsonl for appending: existing whole lines are kept, a last line
  // torn by a crash (no newline) is cut off.
  explicit MetricsWriter(const std::filesystem::path& output_dir);

  // On resume from `step`: drops every record with step > `step` (they belong to the part of the run that is
  // being redone) and any torn line a crash left behind. The file is rewritten atomically (temp + rename).
  void truncate_after(int64_t step);

  // Appends one line and flushes it. Throws std::invalid_argument unless `record` is an object with an integer
  // "step"; throws tune::Error when the write fails.
  void write(const nlohmann::json& record);

  const std::filesystem::path& path() const { return path_; }

 private:
  void open_for_append();

  std::filesystem::path path_;
  std::ofstream stream_;
};

// Every record of a metrics.jsonl file, in file order. A missing file gives no records; blank lines are skipped;
// an unparsable last line (a write torn by a crash) is skipped; an unparsable line elsewhere throws
// tune::InputError naming the file and line.
std::vector<nlohmann::json> read_metrics(const std::filesystem::path& metrics_path);

}  // namespace tune
