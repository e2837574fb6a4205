// An SFT data file (read_dataset_file, the reader behind read_jsonl): JSONL, a JSON array, or plain text, in each
// data.format, with data.on_bad_line skip (every row is visited) and fail (the first bad row ends the read).
#include <iterator>

#include "fuzz_support.h"
#include "tune/data/dataset_file.h"

namespace {

using tune::data::DataFormat;
using tune::data::OnBadLine;

constexpr DataFormat kFormats[] = {DataFormat::automatic, DataFormat::instruction, DataFormat::chat,
                                   DataFormat::sharegpt, DataFormat::text};

void read(const std::filesystem::path& path, DataFormat format, OnBadLine on_bad_line) {
  tune::fuzz::expect_input_errors([&] {
    const auto rows = tune::data::read_dataset_file(path, format, on_bad_line);
    (void)tune::data::skip_summary(path, rows.report);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tune::fuzz::as_text(data, size);
  // One format per input, chosen by its length (a mutation that adds or drops a byte tries the next): reading in
  // every format each time made the target five times slower for little more coverage.
  const DataFormat format = kFormats[size % std::size(kFormats)];
  // .jsonl is always read as JSON lines; .json as an array when it starts with '[' (else lines); .txt is one
  // document (format text only).
  for (const char* name : {"rows.jsonl", "rows.json"}) {
    read(tune::fuzz::write_file(name, text), format, OnBadLine::skip);
  }
  read(tune::fuzz::scratch_dir() / "rows.jsonl", DataFormat::automatic, OnBadLine::fail);
  if (format == DataFormat::text) read(tune::fuzz::write_file("rows.txt", text), format, OnBadLine::fail);
  return 0;
}
