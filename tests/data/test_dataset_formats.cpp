// read_dataset_file: ShareGPT rows, JSON array files (errors by 0-based index), raw text (JSONL text rows and .txt
// files), layout detection, and the skip report.
#include <catch2/catch.hpp>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/data_file_layouts.h"
#include "tune/data/dataset_file.h"

using namespace tune::data;
using tune::data::testing::write_file;

namespace {

std::vector<std::string> roles(const Conversation& conversation) {
  std::vector<std::string> result;
  for (const auto& message : conversation.messages) result.push_back(message.role);
  return result;
}

std::string error_for(const std::string& name, const std::string& content, DataFormat format = DataFormat::automatic) {
  const auto path = write_file(name, content);
  try {
    read_dataset_file(path, format, OnBadLine::fail);
  } catch (const tune::InputError& error) {
    return error.what();
  }
  FAIL("no error for: " << content);
  return "";
}

const std::string kShareGpt =
    R"({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},)"
    R"( {"from": "gpt", "value": "Hello"}, {"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Bye!"}]})";
const std::string kAlpaca = R"({"instruction": "Reverse:", "input": "a b", "output": "b a"})";

}  // namespace

TEST_CASE("ShareGPT rows map human/gpt/system (and user/assistant) onto chat roles", "[data][formats]") {
  const auto path = write_file("sharegpt.jsonl",
                               kShareGpt + "\n" +
                                   R"({"conversations": [{"from": "user", "value": "U"}, {"from": "assistant", "value": "A"}]})"
                                   "\n" +
                                   R"({"system": "S", "conversations": [{"from": "human", "value": "U"}, {"from": "gpt", "value": "A"}]})"
                                   "\n");
  for (const DataFormat format : {DataFormat::sharegpt, DataFormat::automatic}) {
    const DatasetRows rows = read_dataset_file(path, format, OnBadLine::fail);
    REQUIRE(rows.conversations.size() == 3);
    CHECK(rows.documents.empty());
    CHECK(roles(rows.conversations[0]) ==
          std::vector<std::string>{"system", "user", "assistant", "user", "assistant"});
    CHECK(rows.conversations[0].messages[0].content == "Be brief.");
    CHECK(rows.conversations[0].messages[4].content == "Bye!");
    CHECK(roles(rows.conversations[1]) == std::vector<std::string>{"user", "assistant"});
    CHECK(roles(rows.conversations[2]) == std::vector<std::string>{"system", "user", "assistant"});
    CHECK(rows.conversations[2].messages[0].content == "S");
    CHECK(rows.conversations[1].source == path.string() + ":2");
  }
}

TEST_CASE("ShareGPT errors name file:line, the turn and the role", "[data][formats]") {
  const std::string user = R"({"from": "human", "value": "U"})";
  CHECK_THAT(error_for("s.jsonl", kShareGpt + "\n" + R"({"conversations": [)" + user +
                                      R"(, {"from": "bing", "value": "B"}]})" + "\n"),
             Catch::Contains("s.jsonl:2: conversations[1].from 'bing' is not one of human, gpt, system"));
  CHECK_THAT(error_for("s.jsonl", R"({"conversations": [{"from": "gpt", "value": "A"}, )" + user + "]}"),
             Catch::Contains("s.jsonl:1: conversations end with a user turn"));
  CHECK_THAT(error_for("s.jsonl", R"({"conversations": [{"from": "gpt", "value": "A"}, )" + user +
                                      R"(, {"from": "gpt", "value": "A"}]})"),
             Catch::Contains("conversations[0].from is 'gpt' (assistant) where 'user' was expected"));
  CHECK_THAT(error_for("s.jsonl", R"({"conversations": [{"from": "human"}, {"from": "gpt", "value": "A"}]})"),
             Catch::Contains("s.jsonl:1: conversations[0]: missing field 'value'"));
  CHECK_THAT(error_for("s.jsonl", R"({"conversations": []})"), Catch::Contains("'conversations' is empty"));
  // A forced format names its own field.
  CHECK_THAT(error_for("s.jsonl", kAlpaca, DataFormat::sharegpt), Catch::Contains("missing field 'conversations'"));
}

TEST_CASE("JSON arrays are read element by element, in any of the row formats", "[data][formats]") {
  const std::string chat = R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]})";
  // Pretty-printed as alpaca_data.json is, with a byte-order mark, brackets and commas inside strings.
  const auto path = write_file("alpaca_data.json", "\xEF\xBB\xBF[\n  " + kAlpaca + ",\n  " +
                                                       R"({"instruction": "say [x], {y}", "output": "\"ok\" \\"})" +
                                                       ",\n  " + chat + ",\n  " + kShareGpt + "\n]\n");
  ReadReport report;
  const auto conversations = read_jsonl(path, DataFormat::automatic, OnBadLine::fail, &report);
  REQUIRE(conversations.size() == 4);
  CHECK(report.rows_read == 4);
  CHECK(conversations[0].messages[0].content == "Reverse:\n\na b");
  CHECK(conversations[1].messages[0].content == "say [x], {y}");
  CHECK(conversations[1].messages[1].content == "\"ok\" \\");
  CHECK(roles(conversations[2]) == std::vector<std::string>{"user", "assistant"});
  CHECK(roles(conversations[3]).size() == 5);
  CHECK(conversations[0].source == path.string() + ":index 0");
  CHECK(conversations[3].source == path.string() + ":index 3");

  // A .json file holding JSON lines (many datasets name them so) is read as JSONL; any name starting with '['
  // is an array.
  CHECK(read_jsonl(write_file("lines.json", kAlpaca + "\n" + kAlpaca + "\n"), DataFormat::automatic,
                   OnBadLine::fail).size() == 2);
  CHECK(read_jsonl(write_file("array.data", "[" + kAlpaca + "]"), DataFormat::automatic, OnBadLine::fail).size() == 1);
  CHECK(layouts::detect_layout(write_file("x.json", "  \n [")) == layouts::Layout::json_array);
  CHECK(layouts::detect_layout(write_file("x.jsonl", "[")) == layouts::Layout::jsonl);
  CHECK(layouts::detect_layout(write_file("x.TXT", "[")) == layouts::Layout::plain_text);
}

TEST_CASE("JSON array errors name file:index N (0-based) and the line", "[data][formats]") {
  SECTION("a bad element") {
    const std::string message = error_for("a.json", "[\n" + kAlpaca + ",\n" + kAlpaca + ",\n{\"instruction\": \"i\"}\n]");
    CHECK_THAT(message, Catch::Contains("a.json:index 2 (0-based; line 4): missing field 'output'"));
  }
  SECTION("malformed JSON inside an element") {
    CHECK_THAT(error_for("a.json", "[" + kAlpaca + ", {\"instruction\": }]"),
               Catch::Contains("a.json:index 1 (0-based; line 1): malformed JSON"));
  }
  SECTION("a non-object element") {
    CHECK_THAT(error_for("a.json", "[" + kAlpaca + ", 5]"),
               Catch::Contains("a.json:index 1 (0-based; line 1): each row must be a JSON object, got number"));
  }
  SECTION("structure: not closed") {
    CHECK_THAT(error_for("a.json", "[\n" + kAlpaca + ",\n" + kAlpaca),
               Catch::Contains("a.json:3: the JSON array is not closed") && Catch::Contains("element 1 (0-based)"));
  }
  SECTION("structure: a stray comma") {
    CHECK_THAT(error_for("a.json", "[" + kAlpaca + ",]"), Catch::Contains("element 1 (0-based) is empty"));
  }
  SECTION("structure: mismatched brackets") {
    CHECK_THAT(error_for("a.json", "[\n{\"instruction\": [\"i\"}]"),
               Catch::Contains("a.json:2: '}' does not match the open '['"));
  }
  SECTION("structure: text after the array") {
    CHECK_THAT(error_for("a.json", "[" + kAlpaca + "]\n[" + kAlpaca + "]"), Catch::Contains("a.json:2: text after"));
  }
  SECTION("an empty array") { CHECK_THAT(error_for("a.json", " [ ] "), Catch::Contains("is empty: it has no array elements")); }
}

TEST_CASE("raw text: JSONL/JSON text rows and whole .txt files, only with format text", "[data][formats]") {
  const auto jsonl = write_file("corpus.jsonl", "{\"text\": \"first doc\"}\n\n{\"text\": \"second\\ndoc\", \"meta\": 1}\n");
  const DatasetRows rows = read_dataset_file(jsonl, DataFormat::text, OnBadLine::fail);
  CHECK(rows.conversations.empty());
  REQUIRE(rows.documents.size() == 2);
  CHECK(rows.documents[1].text == "second\ndoc");
  CHECK(rows.documents[1].source == jsonl.string() + ":3");
  const auto array = write_file("corpus.json", "[{\"text\": \"a\"}, {\"text\": \"b\"}]");
  CHECK(read_dataset_file(array, DataFormat::text, OnBadLine::fail).documents.size() == 2);

  const std::string book = "\xEF\xBB\xBFLine one.\n\nLine two [not JSON].\n";
  const auto txt = write_file("book.txt", book);
  const DatasetRows text = read_dataset_file(txt, DataFormat::text, OnBadLine::fail);
  REQUIRE(text.documents.size() == 1);
  CHECK(text.documents[0].text == book.substr(3));
  CHECK(text.documents[0].source == txt.string());
  CHECK(text.report.rows_read == 1);

  CHECK_THAT(error_for("book.txt", "hello"), Catch::Contains("is plain text") && Catch::Contains("data.format: text"));
  CHECK_THAT(error_for("c.jsonl", "{\"text\": \"x\"}"), Catch::Contains("c.jsonl:1: a row with only 'text' is raw text"));
  CHECK_THAT(error_for("c.jsonl", "{\"text\": \"  \"}", DataFormat::text), Catch::Contains("c.jsonl:1: field 'text' is empty"));
  CHECK_THAT(error_for("c.jsonl", kAlpaca, DataFormat::text), Catch::Contains("c.jsonl:1: missing field 'text'"));
  CHECK_THAT(error_for("empty.txt", " \n", DataFormat::text), Catch::Contains("empty.txt: the file has no text"));
  CHECK_THROWS_AS(read_jsonl(jsonl, DataFormat::text, OnBadLine::fail), tune::UsageError);
}

TEST_CASE("files that are not regular files are refused", "[data][formats]") {
  const auto dir = tune::data::testing::scratch_dir();
  CHECK_THROWS_WITH(read_dataset_file(dir, DataFormat::automatic, OnBadLine::fail), Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(read_dataset_file("/dev/null", DataFormat::automatic, OnBadLine::fail),
                    Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_dataset_file(dir / "missing.jsonl", DataFormat::automatic, OnBadLine::fail),
                    Catch::Contains("cannot open dataset") && Catch::Contains("missing.jsonl"));
}

TEST_CASE("skip mode: counts per file, the first reasons, and one summary line", "[data][formats]") {
  std::string content = "[\n";
  for (int i = 0; i < 10; ++i) {
    content += (i == 0 ? "" : ",\n") + (i % 3 == 1 ? std::string("{\"instruction\": \"no output\"}") : kAlpaca);
  }
  content += "\n]\n";
  const auto path = write_file("some_bad.json", content);
  const DatasetRows rows = read_dataset_file(path, DataFormat::automatic, OnBadLine::skip);
  CHECK(rows.conversations.size() == 7);
  CHECK(rows.report.rows_read == 10);
  CHECK(rows.report.rows_skipped == 3);  // indices 1, 4, 7
  REQUIRE(rows.report.first_problems.size() == 3);
  CHECK_THAT(rows.report.first_problems[0], Catch::StartsWith(path.string() + ":index 1 (0-based; line 3): missing field 'output'"));
  CHECK_THAT(rows.report.first_problems[2], Catch::StartsWith(path.string() + ":index 7"));
  const std::string summary = skip_summary(path, rows.report);
  CHECK_THAT(summary, Catch::StartsWith("skipped 3 of 10 rows in " + path.string() + " (first: " + path.string() +
                                        ":index 1"));
  CHECK_THAT(summary, !Catch::Contains("; ...)"));

  // More bad rows than are kept: the summary says there are more.
  const auto jsonl = write_file("many_bad.jsonl", "x\nx\nx\nx\nx\n" + kAlpaca + "\n");
  const DatasetRows many = read_dataset_file(jsonl, DataFormat::automatic, OnBadLine::skip);
  CHECK(many.report.rows_skipped == 5);
  CHECK(many.report.first_problems.size() == kReportedProblems);
  CHECK_THAT(skip_summary(jsonl, many.report), Catch::StartsWith("skipped 5 of 6 rows") && Catch::EndsWith("; ...)"));

  // An oversized-free all-bad file is still an error, naming the reasons.
  CHECK_THROWS_WITH(read_dataset_file(write_file("all_bad.json", "[1, 2]"), DataFormat::automatic, OnBadLine::skip),
                    Catch::Contains("all 2 were skipped") && Catch::Contains("index 0"));
}
