// Real chat templates (Llama 3, Qwen3, Gemma 3) rendered by tune's interpreter must equal, byte for byte, what
// jinja2 renders in transformers' configuration: scripts/make_chat_template_fixtures.py writes those renderings
// (CTest runs it first, as the chat_template_fixtures fixture).
#include <catch2/catch.hpp>

#include <ctime>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/jinja/template.h"

namespace {

using nlohmann::ordered_json;
using tune::jinja::Map;
using tune::jinja::Template;
using tune::jinja::Value;

// The script's FIXED_DATE, 2024-07-26 09:30:00, for templates that call strftime_now.
std::string fixed_strftime(const std::string& format) {
  std::tm date{};
  date.tm_year = 2024 - 1900;
  date.tm_mon = 6;
  date.tm_mday = 26;
  date.tm_hour = 9;
  date.tm_min = 30;
  date.tm_wday = 5;   // a Friday
  date.tm_yday = 207;
  char buffer[256];
  return std::string(buffer, std::strftime(buffer, sizeof buffer, format.c_str(), &date));
}

ordered_json read_fixtures() {
  std::ifstream file(TUNE_CHAT_TEMPLATE_FIXTURES);
  if (!file) {
    FAIL("no fixture file " TUNE_CHAT_TEMPLATE_FIXTURES "; run .venv/bin/python scripts/make_chat_template_fixtures.py "
         "--out " TUNE_CHAT_TEMPLATE_FIXTURES " (CTest does this in chat_template_fixtures_setup)");
  }
  return ordered_json::parse(file);
}

// apply_chat_template's variables: the special tokens that are set, messages, tools, documents, the flag, extras.
Value render_context(const ordered_json& fixture, const ordered_json& test_case) {
  Map context;
  for (const char* token : {"bos_token", "eos_token"}) {
    if (!fixture[token].is_null()) context.set(token, Value(fixture[token].get<std::string>()));
  }
  context.set("messages", tune::jinja::from_json(test_case["messages"]));
  context.set("tools", tune::jinja::from_json(test_case["tools"]));
  context.set("documents", Value());
  context.set("add_generation_prompt", Value(test_case["add_generation_prompt"].get<bool>()));
  for (const auto& [key, value] : test_case["extra_context"].items()) context.set(key, tune::jinja::from_json(value));
  return Value(context);
}

void check_template(const std::string& name) {
  const ordered_json fixtures = read_fixtures();
  REQUIRE(fixtures.contains(name));
  const ordered_json& fixture = fixtures[name];
  if (fixture.contains("unavailable")) {
    WARN("SKIPPED, NOTHING CHECKED for the " << name << " chat template: " << fixture["unavailable"].get<std::string>());
    return;
  }
  const Template chat_template = Template::parse(fixture["template"].get<std::string>(), name + " chat template");
  tune::jinja::RenderOptions options;
  options.strftime_now = fixed_strftime;
  REQUIRE(fixture["cases"].size() > 0);
  for (const ordered_json& test_case : fixture["cases"]) {
    INFO(name << " case " << test_case["name"].get<std::string>());
    const Value context = render_context(fixture, test_case);
    if (test_case.contains("error")) {
      try {
        chat_template.render(context, options);
        FAIL_CHECK("expected raise_exception: " << test_case["error"].get<std::string>());
      } catch (const tune::InputError& error) {
        CHECK(std::string(error.what()) == test_case["error"].get<std::string>());
      }
      continue;
    }
    CHECK(chat_template.render(context, options) == test_case["expected"].get<std::string>());
  }
}

}  // namespace

TEST_CASE("Llama 3 chat template renders as transformers does") { check_template("llama3"); }
TEST_CASE("Qwen3 chat template renders as transformers does") { check_template("qwen3"); }
TEST_CASE("Gemma 3 chat template renders as transformers does") { check_template("gemma3"); }
