// JSON array files ([{...}, {...}]): a scanner finds where each top-level element starts and ends (tracking
// strings and bracket nesting only), so one element at a time is held and parsed, and a malformed element is one
// bad row (index N) rather than the whole file failing at some byte offset.
#include <fmt/format.h>

#include <vector>

#include "tune/core/error.h"
#include "tune/data/data_file_layouts.h"

namespace tune::data::layouts {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

class ArrayScanner {
 public:
  ArrayScanner(const std::filesystem::path& path, const RowVisitor& visit) : path_(path), visit_(visit) {}

  void feed(char c) {
    switch (state_) {
      case State::before_array:
        if (is_space(c)) break;
        if (c != '[') fail(fmt::format("expected a JSON array starting with '[', got '{}'", c));
        state_ = State::expect_element;
        break;
      case State::expect_element:
        if (is_space(c)) break;
        if (c == ']' && index_ == 0 && !after_comma_) {
          state_ = State::after_array;  // []: no rows; the caller reports the file as empty
          break;
        }
        if (c == ',' || c == ']') {
          fail(fmt::format("element {} (0-based) is empty: a stray comma{}", index_,
                           c == ']' ? " before the closing ']'" : ""));
        }
        state_ = State::in_element;
        element_line_ = line_;
        element_.clear();
        oversized_ = false;
        in_element(c);
        break;
      case State::in_element:
        in_element(c);
        break;
      case State::after_array:
        if (!is_space(c)) fail(fmt::format("text after the array's closing ']' ('{}')", c));
        break;
    }
    if (c == '\n') ++line_;
  }

  void finish() {
    if (state_ == State::after_array) return;
    if (state_ == State::before_array) fail("expected a JSON array, but the file is empty");
    if (state_ == State::expect_element && index_ == 0) fail("the JSON array is not closed: the file ends after '['");
    fail(fmt::format("the JSON array is not closed: the file ends {} element {} (0-based); is it truncated?",
                     state_ == State::in_element ? "inside" : "after", state_ == State::in_element ? index_ : index_ - 1));
  }

 private:
  enum class State { before_array, expect_element, in_element, after_array };
  const std::filesystem::path& path_;
  const RowVisitor& visit_;
  State state_ = State::before_array;
  int64_t line_ = 1;
  int64_t index_ = 0;
  int64_t element_line_ = 0;
  bool after_comma_ = false;
  std::string element_;
  bool oversized_ = false;
  std::vector<char> closers_;  // the brackets open inside the element, innermost last
  bool in_string_ = false;
  bool escaped_ = false;

  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(fmt::format("{}:{}: {}; the array's structure is broken, so its rows cannot be told apart; "
                                 "HINT: check the file with a JSON validator",
                                 path_.string(), line_, problem));
  }

  void append(char c) {
    if (element_.size() >= kMaxElementBytes) {
      oversized_ = true;
      return;
    }
    element_.push_back(c);
  }

  void in_element(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      append(c);
      return;
    }
    if (closers_.empty() && (c == ',' || c == ']')) {
      emit();
      after_comma_ = c == ',';
      state_ = c == ',' ? State::expect_element : State::after_array;
      return;
    }
    if (c == '"') in_string_ = true;
    if (c == '{') closers_.push_back('}');
    if (c == '[') closers_.push_back(']');
    if (c == '}' || c == ']') {
      if (closers_.empty() || closers_.back() != c) {
        fail(fmt::format("'{}' does not match {} in element {} (0-based, from line {})", c,
                         closers_.empty() ? std::string("any open bracket")
                                          : fmt::format("the open '{}'", closers_.back() == '}' ? '{' : '['),
                         index_, element_line_));
      }
      closers_.pop_back();
    }
    append(c);
  }

  void emit() {
    while (!element_.empty() && is_space(element_.back())) element_.pop_back();
    const std::string source = fmt::format("{}:index {}", path_.string(), index_);
    RawRow row{oversized_ ? std::string_view() : std::string_view(element_), source,
               fmt::format("{} (0-based; line {})", source, element_line_), oversized_};
    visit_(row);
    ++index_;
    element_.clear();
  }
};

}  // namespace

void for_each_json_array_row(const std::filesystem::path& path, std::istream& in, const RowVisitor& visit) {
  skip_byte_order_mark(in);
  ArrayScanner scanner(path, visit);
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < got; ++i) scanner.feed(buffer[i]);
  }
  scanner.finish();
}

}  // namespace tune::data::layouts
