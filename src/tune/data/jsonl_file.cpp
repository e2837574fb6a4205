// JSONL files: one row per non-blank line, numbered from 1 as editors number lines.
#include <fmt/format.h>

#include "tune/data/data_file_layouts.h"

namespace tune::data::layouts {

void for_each_jsonl_row(const std::filesystem::path& path, std::istream& in, const RowVisitor& visit) {
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string source = fmt::format("{}:{}", path.string(), line_number);
    visit(RawRow{line, source, source, false});
  }
}

}  // namespace tune::data::layouts
