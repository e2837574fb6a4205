// Reading one SFT data file, whatever its layout (data_file_layouts.h) and row format (sft_rows.h), into
// conversations or (format text) documents. Every row is parsed and validated here, before anything trains.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tune/data/data_file_layouts.h"
#include "tune/data/sft_dataset.h"

namespace tune::data {

struct DatasetRows {
  std::vector<Conversation> conversations;  // formats automatic, instruction, chat, sharegpt
  std::vector<TextDocument> documents;      // format text
  ReadReport report;
};

// Reads `path`: a JSONL file, a JSON array (.json, or any file starting with '['), or with format text also a
// plain .txt file (one document). A bad row throws tune::InputError "FILE:LINE: reason" ("FILE:index N (0-based;
// line L): reason" in an array) with a hint; with OnBadLine::skip it is counted in the report instead (the first
// kReportedProblems reasons kept) and reading goes on. A file with no usable row, a missing or unreadable path, a
// directory, a device and a .txt file without format text are errors in both modes.
DatasetRows read_dataset_file(const std::filesystem::path& path, DataFormat format, OnBadLine on_bad_line);

// The bad-row policy every reader shares: OnBadLine::fail throws tune::InputError "WHERE: REASON; HINT: ...";
// skip counts the row in `report` (keeping the first kReportedProblems reasons).
void handle_bad_row(OnBadLine on_bad_line, ReadReport& report, const std::string& where, const std::string& reason);

// Every row of a JSONL file or JSON array at `path`, in order, handed to `parse` (rows_read counted); a
// rows::BadRow (sft_rows.h) that `parse` throws, or an oversized element, goes to handle_bad_row. The file checks
// of read_dataset_file; plain text is refused. For readers of other row kinds (preference pairs).
void for_each_json_row(const std::filesystem::path& path, OnBadLine on_bad_line, ReadReport& report,
                       const std::function<void(const layouts::RawRow&)>& parse);

// "skipped K of N rows in FILE (first: REASON; REASON; ...)": the one line a run logs per file with skipped rows.
std::string skip_summary(const std::filesystem::path& path, const ReadReport& report);

}  // namespace tune::data
