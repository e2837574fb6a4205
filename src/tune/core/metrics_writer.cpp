// MetricsWriter and read_metrics: the run's metrics.jsonl.
#include "tune/core/metrics_writer.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

namespace tune {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_lines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

MetricsWriter::MetricsWriter(const fs::path& output_dir) : path_(output_dir / "metrics.jsonl") {
  std::error_code error;
  fs::create_directories(output_dir, error);
  if (error) throw Error(fmt::format("cannot create output directory '{}': {}", output_dir.string(), error.message()));
  open_for_append();
}

void MetricsWriter::open_for_append() {
  // A crash mid-write can leave a last line without its newline. Cut it off, so the file holds only whole records
  // and the next record does not get glued onto the torn one.
  std::error_code error;
  if (fs::exists(path_, error)) {
    std::ifstream in(path_, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!content.empty() && content.back() != '\n') {
      const size_t last_newline = content.rfind('\n');
      fs::resize_file(path_, last_newline == std::string::npos ? 0 : last_newline + 1, error);
      if (error) throw Error(fmt::format("cannot trim the torn last line of '{}': {}", path_.string(), error.message()));
    }
  }
  stream_.open(path_, std::ios::out | std::ios::app | std::ios::binary);
  if (!stream_) throw Error(fmt::format("cannot open '{}' for appending: {}", path_.string(), std::strerror(errno)));
}

void MetricsWriter::truncate_after(int64_t step) {
  stream_.close();
  std::string kept;
  for (const std::string& line : read_lines(path_)) {
    if (is_blank(line)) continue;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    if (record["step"].get<int64_t>() > step) continue;
    kept += line;
    kept += '\n';
  }
  // Atomic so that a crash during the rewrite leaves either the old or the new file, never half of one.
  const fs::path temporary = path_.string() + fmt::format(".tmp-{}", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) throw Error(fmt::format("cannot write '{}': {}", temporary.string(), std::strerror(errno)));
  }
  std::error_code error;
  fs::rename(temporary, path_, error);
  if (error) throw Error(fmt::format("cannot replace '{}': {}", path_.string(), error.message()));
  open_for_append();
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
    throw std::invalid_argument(
        fmt::format("MetricsWriter::write: a record must be a JSON object with an integer \"step\", got {}",
                    record.dump()));
  }
  // error_handler::replace: a non-UTF-8 string in a record must not abort training.
  stream_ << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  if (!stream_) throw Error(fmt::format("cannot write to '{}': {}", path_.string(), std::strerror(errno)));
}

std::vector<nlohmann::json> read_metrics(const fs::path& metrics_path) {
  std::vector<nlohmann::json> records;
  const std::vector<std::string> lines = read_lines(metrics_path);
  size_t last_content = lines.size();
  for (size_t i = lines.size(); i-- > 0;) {
    if (!is_blank(lines[i])) {
      last_content = i;
      break;
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    auto record = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      if (i == last_content) break;  // torn by a crash mid-write: everything before it is intact
      throw InputError(fmt::format("{}:{}: not a JSON object: {}", metrics_path.string(), i + 1, lines[i]));
    }
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace tune
