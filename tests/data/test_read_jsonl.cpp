// read_jsonl: both row formats, automatic detection, and errors that name file:line and the problem.
#include <catch2/catch.hpp>

#include "data_test_helpers.h"
#include "tune/core/error.h"

using namespace tune::data;
using tune::data::testing::write_file;

namespace {
std::vector<std::string> roles(const Conversation& conversation) {
  std::vector<std::string> result;
  for (const auto& message : conversation.messages) result.push_back(message.role);
  return result;
}

// The message read_jsonl throws for `content`, which is written to its own file.
std::string error_for(const std::string& content, DataFormat format = DataFormat::automatic) {
  const auto path = write_file("bad.jsonl", content);
  try {
    read_jsonl(path, format, OnBadLine::fail);
  } catch (const tune::InputError& error) {
    return error.what();
  }
  FAIL("no error for: " << content);
  return "";
}
}  // namespace

TEST_CASE("read_jsonl reads instruction and chat rows, skipping blank lines", "[data][jsonl]") {
  const auto path = write_file("mixed.jsonl",
                               "{\"instruction\": \"Reverse:\", \"input\": \"a b\", \"output\": \"b a\"}\n"
                               "\n"
                               "{\"instruction\": \"Say hi\", \"output\": \"hi\", \"system\": \"Be brief.\", \"extra\": 1}\r\n"
                               "   \n"
                               "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U1\"},"
                               " {\"role\": \"assistant\", \"content\": \"A1\"}, {\"role\": \"user\", \"content\": \"U2\"},"
                               " {\"role\": \"assistant\", \"content\": \"A2\"}]}\n");
  ReadReport report;
  const auto conversations = read_jsonl(path, DataFormat::automatic, OnBadLine::fail, &report);
  REQUIRE(conversations.size() == 3);
  CHECK(report.rows_read == 3);
  CHECK(report.rows_skipped == 0);

  CHECK(roles(conversations[0]) == std::vector<std::string>{"user", "assistant"});
  CHECK(conversations[0].messages[0].content == "Reverse:\n\na b");
  CHECK(conversations[0].messages[1].content == "b a");
  CHECK(conversations[0].source == path.string() + ":1");

  CHECK(roles(conversations[1]) == std::vector<std::string>{"system", "user", "assistant"});
  CHECK(conversations[1].messages[0].content == "Be brief.");
  CHECK(conversations[1].messages[1].content == "Say hi");
  CHECK(conversations[1].source == path.string() + ":3");

  CHECK(roles(conversations[2]) == std::vector<std::string>{"system", "user", "assistant", "user", "assistant"});
  CHECK(conversations[2].messages[4].content == "A2");
  CHECK(conversations[2].source == path.string() + ":5");
}

TEST_CASE("read_jsonl errors name file:line and the problem", "[data][jsonl]") {
  const std::string good = "{\"instruction\": \"i\", \"output\": \"o\"}\n";
  SECTION("malformed JSON carries the parser's message") {
    const auto message = error_for(good + "{\"instruction\": \"i\", \"output\": }\n");
    CHECK_THAT(message, Catch::Contains("bad.jsonl:2: malformed JSON") && Catch::Contains("parse error"));
  }
  SECTION("a number beyond double's range is malformed JSON (nlohmann's out_of_range, found by fuzzing)") {
    CHECK_THAT(error_for(good + "{\"instruction\": \"i\", \"output\": \"o\", \"n\": 1e999}\n"),
               Catch::Contains("bad.jsonl:2: malformed JSON") && Catch::Contains("number overflow"));
  }
  SECTION("missing output") {
    CHECK_THAT(error_for(good + good + "{\"instruction\": \"i\"}\n"),
               Catch::Contains("bad.jsonl:3: missing field 'output'"));
  }
  SECTION("wrong type") {
    CHECK_THAT(error_for("{\"instruction\": \"i\", \"output\": 5}\n"),
               Catch::Contains("bad.jsonl:1: field 'output' must be a string, got number"));
  }
  SECTION("unknown role") {
    CHECK_THAT(error_for("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"bot\", \"content\": \"b\"}]}"),
               Catch::Contains("bad.jsonl:1: messages[1].role 'bot' is not one of system, user, assistant"));
  }
  SECTION("no assistant turn") {
    CHECK_THAT(error_for("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}]}"),
               Catch::Contains("bad.jsonl:1: messages contain no assistant turn"));
  }
  SECTION("ends with a user turn") {
    CHECK_THAT(error_for("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", "
                         "\"content\": \"a\"}, {\"role\": \"user\", \"content\": \"u\"}]}"),
               Catch::Contains("bad.jsonl:1: messages end with a user turn"));
  }
  SECTION("roles out of order") {
    CHECK_THAT(error_for("{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", "
                         "\"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}"),
               Catch::Contains("messages[0].role is 'assistant' where 'user' was expected"));
  }
  SECTION("message without content") {
    CHECK_THAT(error_for("{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}"),
               Catch::Contains("bad.jsonl:1: messages[0]: missing field 'content'"));
  }
  SECTION("neither format") {
    CHECK_THAT(error_for("{\"prompt\": \"p\", \"completion\": \"c\"}"),
               Catch::Contains("bad.jsonl:1: neither 'messages'") && Catch::Contains("fields: 'completion', 'prompt'"));
  }
  SECTION("not an object") { CHECK_THAT(error_for("[1, 2]\n"), Catch::Contains("bad.jsonl:1: each row must be a JSON object")); }
  SECTION("a forced format reports its own fields") {
    CHECK_THAT(error_for(good, DataFormat::chat), Catch::Contains("bad.jsonl:1: missing field 'messages'"));
  }
  SECTION("empty file") { CHECK_THAT(error_for(""), Catch::Contains("bad.jsonl") && Catch::Contains("is empty")); }
  SECTION("only blank lines") { CHECK_THAT(error_for("\n  \n\n"), Catch::Contains("is empty")); }
  SECTION("missing file") {
    CHECK_THROWS_WITH(read_jsonl("/nonexistent/x.jsonl", DataFormat::automatic, OnBadLine::fail),
                      Catch::Contains("cannot open dataset '/nonexistent/x.jsonl'"));
  }
}

TEST_CASE("read_jsonl skip mode counts bad lines, and an all-bad file is still an error", "[data][jsonl]") {
  const std::string good = "{\"instruction\": \"i\", \"output\": \"o\"}\n";
  const auto path = write_file("some_bad.jsonl", good + "not json\n" + good + "{\"instruction\": \"i\"}\n\n" + good);
  ReadReport report;
  const auto conversations = read_jsonl(path, DataFormat::automatic, OnBadLine::skip, &report);
  CHECK(conversations.size() == 3);
  CHECK(report.rows_read == 5);
  CHECK(report.rows_skipped == 2);
  CHECK(conversations[2].source == path.string() + ":6");

  const auto all_bad = write_file("all_bad.jsonl", "not json\n{}\n");
  CHECK_THROWS_WITH(read_jsonl(all_bad, DataFormat::automatic, OnBadLine::skip),
                    Catch::Contains(all_bad.string()) && Catch::Contains("all 2 were skipped"));
}
