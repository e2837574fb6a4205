// Reading one SFT data file, whatever its layout (data_file_layouts.h) and row format (sft_rows.h), into
// conversations or (format text) documents. Every row is parsed and validated here, before anything trains.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

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

// "skipped K of N rows in FILE (first: REASON; REASON; ...)": the one line a run logs per file with skipped rows.
std::string skip_summary(const std::filesystem::path& path, const ReadReport& report);

}  // namespace tune::data
