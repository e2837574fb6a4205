// Corrupt and lying files made by hand: each must be refused on open with a message naming the file and, where
// one is at fault, the tensor.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "io_test_helpers.h"
#include "tune/io/safetensors.h"

using Catch::Contains;
using tune::io::SafetensorsFile;
using tune::io::testing::input_error_message;
using tune::io::testing::ScratchDir;
using tune::io::testing::write_raw;

namespace {

std::string open_error(const std::filesystem::path& path) {
  return input_error_message([&] { SafetensorsFile::open(path); });
}

}  // namespace

TEST_CASE("truncated data is refused naming the tensor that no longer fits", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "truncated.safetensors";
  tune::io::save_safetensors(path, {{"first", torch::zeros({4})}, {"last", torch::ones({4})}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  CHECK_THAT(open_error(path), Contains("truncated.safetensors") && Contains("'last'") && Contains("truncated"));
}

TEST_CASE("a file shorter than the size field is refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "tiny.safetensors";
  std::ofstream(path) << "abc";
  CHECK_THAT(open_error(path), Contains("tiny.safetensors") && Contains("3 bytes"));
}

TEST_CASE("a header size larger than the file is refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "big_header.safetensors";
  write_raw(path, "{}      ", "", /*size_field=*/1000);
  CHECK_THAT(open_error(path), Contains("big_header.safetensors") && Contains("1000") && Contains("only 8 bytes"));
}

TEST_CASE("an absurd header size is refused before allocating", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "absurd.safetensors";
  write_raw(path, "{}", "", /*size_field=*/int64_t{1} << 50);
  CHECK_THAT(open_error(path), Contains("absurd.safetensors") && Contains("more than"));
}

TEST_CASE("offsets past the end of the data section are refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "past_end.safetensors";
  write_raw(path, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0'));
  CHECK_THAT(open_error(path), Contains("past_end.safetensors") && Contains("'w'") && Contains("holds 4 bytes"));
}

TEST_CASE("offsets whose size does not match dtype and shape are refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "size.safetensors";
  write_raw(path, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(16, '\0'));
  CHECK_THAT(open_error(path), Contains("size.safetensors") && Contains("'w'") && Contains("span 8 bytes") &&
                                   Contains("need 12 bytes"));
}

TEST_CASE("offsets that end before they begin are refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "reversed.safetensors";
  write_raw(path, R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", std::string(8, '\0'));
  CHECK_THAT(open_error(path), Contains("reversed.safetensors") && Contains("'w'") && Contains("[4, 0]"));
}

TEST_CASE("overlapping tensors are refused naming both", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "overlap.safetensors";
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  CHECK_THAT(open_error(path), Contains("overlap.safetensors") && Contains("'a'") && Contains("'b'") &&
                                   Contains("overlap"));
}

TEST_CASE("empty tensors may share an offset with their neighbours", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "empty_between.safetensors";
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::string(8, '\0'));
  const SafetensorsFile file = SafetensorsFile::open(path);
  CHECK(file.load("e").numel() == 0);
}

TEST_CASE("an unknown dtype is refused listing the supported ones", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "dtype.safetensors";
  write_raw(path, R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0'));
  CHECK_THAT(open_error(path), Contains("dtype.safetensors") && Contains("'w'") && Contains("F8_E4M3") &&
                                   Contains("BF16"));
}

TEST_CASE("malformed JSON is refused", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "json.safetensors";
  write_raw(path, R"({"w":{"dtype":"F32",)", "");
  CHECK_THAT(open_error(path), Contains("json.safetensors") && Contains("not valid JSON"));
}

TEST_CASE("malformed header fields are refused naming the tensor", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "fields.safetensors";
  SECTION("negative dimension") {
    write_raw(path, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
    CHECK_THAT(open_error(path), Contains("'w'") && Contains("shape") && Contains("-1"));
  }
  SECTION("fractional offset") {
    write_raw(path, R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1.5]}})", "xx");
    CHECK_THAT(open_error(path), Contains("'w'") && Contains("data_offsets"));
  }
  SECTION("missing field") {
    write_raw(path, R"({"w":{"dtype":"U8","shape":[1]}})", "x");
    CHECK_THAT(open_error(path), Contains("'w'") && Contains("data_offsets"));
  }
  SECTION("duplicate name") {
    write_raw(path,
              R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
              R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
              "xx");
    CHECK_THAT(open_error(path), Contains("'w'") && Contains("more than once"));
  }
  SECTION("metadata value not a string") {
    write_raw(path, R"({"__metadata__":{"step":3}})", "");
    CHECK_THAT(open_error(path), Contains("__metadata__") && Contains("'step'"));
  }
  SECTION("header not an object") {
    write_raw(path, "[1, 2]", "");
    CHECK_THAT(open_error(path), Contains("object"));
  }
}

// Found by fuzz/safetensors_fuzzer.cpp: nlohmann reports a number beyond double's range as out_of_range, not as a
// parse_error, and it escaped as an "internal error" that named no file.
TEST_CASE("a number too large for a double in the header is refused as invalid JSON", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "huge_number.safetensors";
  write_raw(path, R"({"__metadata__":{"x":1e999}})", "");
  CHECK_THAT(open_error(path), Contains("huge_number.safetensors") && Contains("not valid JSON") &&
                                   Contains("number overflow"));
}

TEST_CASE("BOOL data other than 0 and 1 is refused on load", "[io][safetensors][errors]") {
  ScratchDir dir;
  const auto path = dir / "bool.safetensors";
  write_raw(path, R"({"flags":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x07", 2));
  const SafetensorsFile file = SafetensorsFile::open(path);
  CHECK_THAT(input_error_message([&] { file.load("flags"); }),
             Contains("bool.safetensors") && Contains("'flags'") && Contains("BOOL"));
}

TEST_CASE("a missing file is reported by name", "[io][safetensors][errors]") {
  ScratchDir dir;
  CHECK_THAT(open_error(dir / "absent.safetensors"), Contains("absent.safetensors"));
}
