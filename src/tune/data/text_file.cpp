// Plain-text files (format text): the whole file is one document; and telling the three layouts apart.
#include <fstream>
#include <iterator>

#include "tune/data/data_file_layouts.h"
#include "tune/data/file_extension.h"

namespace tune::data::layouts {

void skip_byte_order_mark(std::istream& in) {
  char bytes[3] = {};
  in.read(bytes, 3);
  if (in.gcount() == 3 && std::string_view(bytes, 3) == "\xEF\xBB\xBF") return;
  in.clear();
  in.seekg(0);
}

Layout detect_layout(const std::filesystem::path& path) {
  const std::string extension = lower_extension(path);
  if (extension == ".txt") return Layout::plain_text;
  if (extension == ".jsonl") return Layout::jsonl;
  std::ifstream in(path, std::ios::binary);
  skip_byte_order_mark(in);
  // Character by character: a minified array is one line, which getline would read whole.
  for (char c = 0; in.get(c);) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '[' ? Layout::json_array : Layout::jsonl;
  }
  return Layout::jsonl;  // empty: the JSONL reader says so
}

std::string read_plain_text(std::istream& in) {
  skip_byte_order_mark(in);
  return std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace tune::data::layouts
