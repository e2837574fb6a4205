// Reading SFT data files into conversations or documents, with problems that name file:line (or file:index N) and
// the reason, and the fail-or-skip decision made in one place for every layout and format.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>

#include "tune/core/error.h"
#include "tune/data/data_file_layouts.h"
#include "tune/data/dataset_file.h"
#include "tune/data/sft_rows.h"

namespace tune::data {

namespace {

namespace fs = std::filesystem;

const char* format_name(DataFormat format) {
  switch (format) {
    case DataFormat::automatic: return "auto";
    case DataFormat::instruction: return "instruction";
    case DataFormat::chat: return "chat";
    case DataFormat::sharegpt: return "sharegpt";
    case DataFormat::text: return "text";
  }
  return "?";
}

// Data files are read whole, row by row: a directory, FIFO or device would fail obscurely or never end.
void check_regular_file(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) throw InputError(fmt::format("cannot open dataset '{}': no such file", path.string()));
  if (fs::is_directory(status)) {
    throw InputError(fmt::format("dataset '{}' is a directory; give its files (data.train takes a list)",
                                 path.string()));
  }
  if (!fs::is_regular_file(status)) {
    throw InputError(fmt::format("dataset '{}' is not a regular file (a device or FIFO?)", path.string()));
  }
}

}  // namespace

void handle_bad_row(OnBadLine on_bad_line, ReadReport& report, const std::string& where, const std::string& reason) {
  if (on_bad_line == OnBadLine::fail) {
    throw InputError(fmt::format("{}: {}; HINT: fix the row, or skip bad rows (data.on_bad_line: skip)", where,
                                 reason));
  }
  ++report.rows_skipped;
  if (report.first_problems.size() < kReportedProblems) {
    report.first_problems.push_back(fmt::format("{}: {}", where, reason));
  }
}

namespace {

class RowCollector {
 public:
  RowCollector(DataFormat format, OnBadLine on_bad_line, DatasetRows& out)
      : format_(format), on_bad_line_(on_bad_line), out_(out) {}

  void row(const layouts::RawRow& raw) {
    ++out_.report.rows_read;
    try {
      if (raw.oversized) {
        throw rows::BadRow{fmt::format("the element is larger than {} MiB", layouts::kMaxElementBytes >> 20)};
      }
      rows::ParsedRow parsed = rows::parse_row(raw.json, format_);
      if (format_ == DataFormat::text) {
        out_.documents.push_back({std::move(parsed.text), raw.source});
      } else {
        out_.conversations.push_back({std::move(parsed.messages), raw.source});
      }
    } catch (const rows::BadRow& bad) {
      bad_row(raw.where, bad.reason);
    }
  }

  void document(std::string text, const std::string& source) {
    ++out_.report.rows_read;
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      bad_row(source, "the file has no text (a .txt file is one document)");
      return;
    }
    out_.documents.push_back({std::move(text), source});
  }

 private:
  DataFormat format_;
  OnBadLine on_bad_line_;
  DatasetRows& out_;

  void bad_row(const std::string& where, const std::string& reason) {
    handle_bad_row(on_bad_line_, out_.report, where, reason);
  }
};

}  // namespace

DatasetRows read_dataset_file(const fs::path& path, DataFormat format, OnBadLine on_bad_line) {
  check_regular_file(path);
  const layouts::Layout layout = layouts::detect_layout(path);
  if (layout == layouts::Layout::plain_text && format != DataFormat::text) {
    throw InputError(fmt::format("dataset '{}' is plain text, which is raw text for continued pre-training: set "
                                 "data.format: text (data.format is {}), or give JSONL or JSON rows",
                                 path.string(), format_name(format)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot open dataset '{}' (check its permissions)", path.string()));
  DatasetRows rows;
  RowCollector collector(format, on_bad_line, rows);
  const layouts::RowVisitor visit = [&](const layouts::RawRow& raw) { collector.row(raw); };
  switch (layout) {
    case layouts::Layout::jsonl: layouts::for_each_jsonl_row(path, in, visit); break;
    case layouts::Layout::json_array: layouts::for_each_json_array_row(path, in, visit); break;
    case layouts::Layout::plain_text: collector.document(layouts::read_plain_text(in), path.string()); break;
  }
  if (in.bad()) throw InputError(fmt::format("dataset '{}' could not be read to its end", path.string()));
  const ReadReport& report = rows.report;
  if (rows.conversations.empty() && rows.documents.empty()) {
    throw InputError(report.rows_read == 0
                         ? fmt::format("dataset '{}' is empty: it has no {}", path.string(),
                                       layout == layouts::Layout::json_array ? "array elements" : "JSONL rows")
                         : fmt::format("dataset '{}' has no usable rows: all {} were skipped as bad ({})",
                                       path.string(), report.rows_skipped, fmt::join(report.first_problems, "; ")));
  }
  return rows;
}

void for_each_json_row(const fs::path& path, OnBadLine on_bad_line, ReadReport& report,
                       const std::function<void(const layouts::RawRow&)>& parse) {
  check_regular_file(path);
  const layouts::Layout layout = layouts::detect_layout(path);
  if (layout == layouts::Layout::plain_text) {
    throw InputError(fmt::format("dataset '{}' is plain text; this data needs JSONL rows or a JSON array",
                                 path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot open dataset '{}' (check its permissions)", path.string()));
  const layouts::RowVisitor visit = [&](const layouts::RawRow& raw) {
    ++report.rows_read;
    try {
      if (raw.oversized) {
        throw rows::BadRow{fmt::format("the element is larger than {} MiB", layouts::kMaxElementBytes >> 20)};
      }
      parse(raw);
    } catch (const rows::BadRow& bad) {
      handle_bad_row(on_bad_line, report, raw.where, bad.reason);
    }
  };
  if (layout == layouts::Layout::jsonl) {
    layouts::for_each_jsonl_row(path, in, visit);
  } else {
    layouts::for_each_json_array_row(path, in, visit);
  }
  if (in.bad()) throw InputError(fmt::format("dataset '{}' could not be read to its end", path.string()));
}

std::vector<Conversation> read_jsonl(const fs::path& path, DataFormat format, OnBadLine on_bad_line,
                                     ReadReport* report) {
  if (format == DataFormat::text) {
    throw UsageError("read_jsonl reads conversations; raw text (format text) is read by read_dataset_file");
  }
  DatasetRows rows = read_dataset_file(path, format, on_bad_line);
  if (report != nullptr) *report = rows.report;
  return std::move(rows.conversations);
}

std::string skip_summary(const fs::path& path, const ReadReport& report) {
  return fmt::format("skipped {} of {} rows in {} (first: {}{})", report.rows_skipped, report.rows_read,
                     path.string(), fmt::join(report.first_problems, "; "),
                     report.rows_skipped > static_cast<int64_t>(report.first_problems.size()) ? "; ..." : "");
}

}  // namespace tune::data
