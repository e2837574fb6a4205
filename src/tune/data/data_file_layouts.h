// The layouts an SFT data file can have, each read row by row without parsing the rows: JSONL (one JSON object per
// line), a JSON array of objects (as alpaca_data.json ships), or plain text (a .txt file is one document).
// dataset_file.h parses the rows and decides what a bad one means.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <string>
#include <string_view>

namespace tune::data::layouts {

enum class Layout { jsonl, json_array, plain_text };

// .txt is plain text and .jsonl is JSONL; anything else (.json included: many "JSON" datasets are JSON lines) is
// a JSON array when its first non-space character is '[', else JSONL.
Layout detect_layout(const std::filesystem::path& path);

// One row before parsing: its JSON text, and where it is for messages.
struct RawRow {
  std::string_view json;  // empty when oversized
  std::string source;     // "FILE:LINE" or "FILE:index N": what Conversation::source records
  std::string where;      // what problems start with: source, plus "(0-based; line L)" for array elements
  bool oversized = false;  // a JSON array element over kMaxElementBytes (skipped over, not held)
};
using RowVisitor = std::function<void(const RawRow&)>;

// A JSON array element larger than this is refused: a training row is kilobytes, and a runaway element (a file
// that is one giant object) must not take all memory. JSONL lines have no limit of their own.
constexpr size_t kMaxElementBytes = size_t{64} << 20;

// Every non-blank line, in order (a UTF-8 byte-order mark is dropped). Lines are numbered from 1.
void for_each_jsonl_row(const std::filesystem::path& path, std::istream& in, const RowVisitor& visit);

// Every element of the top-level array, in order, holding one element at a time (an alpaca_data.json of 52k rows
// is never a DOM in memory). Elements are numbered from 0, as JSON arrays are indexed. A broken structure (no '[',
// mismatched brackets, an empty element, the array not closed, text after it) throws tune::InputError with the
// line: later elements cannot be found, so it cannot be skipped as one bad row.
void for_each_json_array_row(const std::filesystem::path& path, std::istream& in, const RowVisitor& visit);

// The whole file as one document (byte-order mark dropped).
std::string read_plain_text(std::istream& in);

// Moves past a UTF-8 byte-order mark at the start of `in`, if there is one (editors on Windows write them).
void skip_byte_order_mark(std::istream& in);

}  // namespace tune::data::layouts
