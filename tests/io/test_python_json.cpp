// io::parse_python_json: JSON as Python's json.dumps writes it (diffusers' save_config), with the bare
// non-finite literals outside strings read as doubles and left alone inside strings.
#include <catch2/catch.hpp>

#include <cmath>

#include "io_test_helpers.h"
#include "tune/io/python_json.h"

using Catch::Contains;
using tune::io::parse_python_json;
using tune::io::testing::input_error_message;

TEST_CASE("parse_python_json reads NaN, Infinity and -Infinity outside strings only", "[io][json]") {
  const auto json = parse_python_json(
      R"({"low": -Infinity, "high": Infinity, "bad": NaN, "list": [1, -Infinity], "text": "NaN \"Infinity\" -1",
          "minus": -2.5})",
      "scheduler_config.json");
  CHECK(std::isinf(json.at("low").get<double>()));
  CHECK(json.at("low").get<double>() < 0);
  CHECK(json.at("high").get<double>() > 0);
  CHECK(std::isinf(json.at("high").get<double>()));
  CHECK(std::isnan(json.at("bad").get<double>()));
  CHECK(std::isinf(json.at("list").at(1).get<double>()));
  CHECK(json.at("text").get<std::string>() == "NaN \"Infinity\" -1");
  CHECK(json.at("minus").get<double>() == -2.5);
}

TEST_CASE("parse_python_json names the source of invalid JSON", "[io][json]") {
  CHECK_THAT(input_error_message([] { parse_python_json(R"({"a": Inf})", "model_index.json"); }),
             Contains("model_index.json") && Contains("invalid JSON"));
}
