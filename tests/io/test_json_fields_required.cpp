// io::JsonFields' required reads (tune's own files: trainer_state.json, latents.json): a missing field, a value of
// the wrong type and an integer beyond int64 are InputErrors naming the file and the field, never a conversion of an
// out-of-range number (undefined behaviour that fuzz/latent_manifest_fuzzer.cpp found under UBSan).
#include <catch2/catch.hpp>

#include "io_test_helpers.h"
#include "tune/io/json_fields.h"

using Catch::Contains;
using tune::io::JsonFields;
using tune::io::testing::input_error_message;

TEST_CASE("JsonFields' required reads name the file and field of a missing or out-of-range value", "[io][json]") {
  const auto json = nlohmann::json::parse(
      R"({"step": 7, "huge": 1e300, "unsigned": 18446744073709551615, "flag": true, "name": "x", "rate": 2})");
  const JsonFields fields(json, "run/trainer_state.json");
  CHECK(fields.integer("step") == 7);
  CHECK(fields.real("rate") == 2.0);  // an integer is a number
  CHECK(fields.boolean("flag"));
  CHECK(fields.string("name") == "x");
  CHECK_THAT(input_error_message([&] { fields.integer("missing"); }),
             Contains("run/trainer_state.json: field 'missing' is missing"));
  CHECK_THAT(input_error_message([&] { fields.integer("huge"); }),
             Contains("field 'huge' must be an integer, got 1e+300"));
  CHECK_THAT(input_error_message([&] { fields.integer("unsigned"); }),
             Contains("field 'unsigned' is out of range, got 18446744073709551615"));
  CHECK_THAT(input_error_message([&] { fields.string("step"); }), Contains("field 'step' must be a string"));
  CHECK(fields.integer("absent", 3) == 3);  // optional reads keep their default
}
