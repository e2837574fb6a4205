// Reading captioned-item lists (see captioned_media.h): JSONL rows through the SFT data files' row readers, or a
// folder walked for items with NAME.txt beside them.
#include "tune/data/captioned_media.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/data_file_layouts.h"
#include "tune/data/dataset_file.h"
#include "tune/data/file_extension.h"
#include "tune/data/sft_rows.h"

namespace tune::data {

namespace fs = std::filesystem;

namespace {

std::string row_shape(const CaptionedMediaKind& kind) {
  return fmt::format(R"({{"{}": PATH, "caption": TEXT}})", kind.key);
}

bool is_blank(const std::string& text) { return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

// "a video", "an image".
std::string with_article(const std::string& noun) {
  const bool vowel = !noun.empty() && std::string("aeiou").find(noun.front()) != std::string::npos;
  return (vowel ? "an " : "a ") + noun;
}

// The one place that decides between failing and skipping: only a bad item (missing, or without a usable
// caption) may be skipped.
void bad_item(const CaptionedMediaKind& kind, OnBadVideo on_bad, CaptionedItemList& list,
              const std::string& where, const std::string& reason) {
  if (on_bad == OnBadVideo::fail) {
    throw InputError(fmt::format("{}: {}; HINT: fix it, or skip such {} ({}; each skip is logged and counted)",
                                 where, reason, kind.plural, kind.skip_setting));
  }
  ++list.skipped;
  list.skipped_names.push_back(where);
  log::warn("skipping {} ({} skipped so far): {}", where, list.skipped, reason);
}

// A broken row is a broken file, skipped in neither mode.
[[noreturn]] void bad_row(const CaptionedMediaKind& kind, const std::string& where, const std::string& reason) {
  throw InputError(fmt::format("{}: {}; HINT: each row is one JSON object {}", where, reason, row_shape(kind)));
}

void read_jsonl_rows(const fs::path& path, const CaptionedMediaKind& kind, OnBadVideo on_bad,
                     CaptionedItemList& list) {
  const fs::path base = path.parent_path();
  ReadReport report;  // rows_read only: every bad row throws or is handled by bad_item
  for_each_json_row(path, OnBadLine::fail, report, [&](const layouts::RawRow& raw) {
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(raw.json.begin(), raw.json.end());
    } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
      bad_row(kind, raw.where, fmt::format("malformed JSON: {}", error.what()));
    }
    if (!row.is_object()) {
      bad_row(kind, raw.where, fmt::format("the row is a JSON {}, not an object", row.type_name()));
    }
    const auto item = row.find(kind.key);
    if (item == row.end() || item->is_null()) {
      bad_row(kind, raw.where, fmt::format("missing field '{}' ({}); the row has {}", kind.key, kind.described,
                                           rows::field_names(row)));
    }
    if (!item->is_string() || item->get<std::string>().empty()) {
      bad_row(kind, raw.where,
              fmt::format("field '{}' must be a path (a non-empty string), got {}", kind.key, item->dump()));
    }
    const auto caption = row.find("caption");
    if (caption != row.end() && !caption->is_null() && !caption->is_string()) {
      bad_row(kind, raw.where, fmt::format("field 'caption' must be a string, got {}", caption->type_name()));
    }
    const fs::path named = item->get<std::string>();
    const fs::path resolved = named.is_absolute() ? named : (base / named).lexically_normal();
    if (caption == row.end() || caption->is_null()) {
      return bad_item(kind, on_bad, list, raw.where,
                      fmt::format("missing field 'caption' (the text for {} {}); the row has {}", kind.key,
                                  resolved.string(), rows::field_names(row)));
    }
    if (is_blank(caption->get<std::string>())) {
      return bad_item(kind, on_bad, list, raw.where,
                      fmt::format("field 'caption' is empty ({} {})", kind.key, resolved.string()));
    }
    if (!fs::exists(resolved)) {
      return bad_item(kind, on_bad, list, raw.where,
                      fmt::format("{} {} does not exist{}", kind.key, resolved.string(),
                                  named.is_absolute() ? std::string()
                                                      : fmt::format(" ('{}' is relative to the JSONL file's folder)",
                                                                    named.string())));
    }
    list.items.push_back({resolved, caption->get<std::string>(), raw.source});
  });
  if (report.rows_read == 0) {
    throw InputError(
        fmt::format("{}: the file is empty; expected one row {} per line", path.string(), row_shape(kind)));
  }
}

// NAME.txt beside the item: the extension replaced for a file, appended for a folder (clip.v2/ -> clip.v2.txt).
fs::path caption_path_of(const fs::path& item) {
  if (fs::is_directory(item)) return item.parent_path() / (item.filename().string() + ".txt");
  return fs::path(item).replace_extension(".txt");
}

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n\f\v") - first + 1);
}

void read_folder(const fs::path& root, const CaptionedMediaKind& kind, OnBadVideo on_bad, CaptionedItemList& list) {
  std::vector<fs::path> items;
  std::set<fs::path> text_files;  // to tell how many captions name no item (a typo in a name shows up as both)
  for (auto entry = fs::recursive_directory_iterator(root); entry != fs::recursive_directory_iterator(); ++entry) {
    const fs::path& path = entry->path();
    if (entry->is_directory()) {
      if (kind.is_item_folder && kind.is_item_folder(path)) {
        items.push_back(path);
        entry.disable_recursion_pending();  // its files are parts of the item (a video's frames), not items
      }
    } else if (entry->is_regular_file()) {
      if (kind.is_item_file(path)) items.push_back(path);
      if (lower_extension(path) == ".txt") text_files.insert(path);
    }
  }
  if (items.empty()) {
    throw InputError(fmt::format("{}: no {} (looked recursively for {}, each with a NAME.txt caption beside it)",
                                 root.string(), kind.plural, kind.folder_contents));
  }
  std::sort(items.begin(), items.end());
  for (const fs::path& item : items) {
    const fs::path caption_file = caption_path_of(item);
    text_files.erase(caption_file);
    if (!fs::is_regular_file(caption_file)) {
      bad_item(kind, on_bad, list, item.string(),
               fmt::format("no caption: expected {} beside it", caption_file.string()));
      continue;
    }
    std::ifstream in(caption_file, std::ios::binary);
    if (!in) {
      throw InputError(fmt::format("{}: cannot open the caption file (check its permissions)", caption_file.string()));
    }
    const std::string caption = trimmed(layouts::read_plain_text(in));
    if (caption.empty()) {
      bad_item(kind, on_bad, list, item.string(), fmt::format("its caption {} is empty", caption_file.string()));
      continue;
    }
    list.items.push_back({item, caption, caption_file.string()});
  }
  if (!text_files.empty()) {
    log::info("captioned {} {}: {} .txt files beside no {} were ignored (first: {})", kind.plural, root.string(),
              text_files.size(), kind.key, text_files.begin()->string());
  }
}

}  // namespace

CaptionedItemList read_captioned_items(const fs::path& path, const CaptionedMediaKind& kind, OnBadVideo on_bad) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw InputError(fmt::format("{}: no such file or folder (expected a JSONL file of {} rows, or a folder of {} "
                                 "with NAME.txt captions)",
                                 path.string(), row_shape(kind), kind.plural));
  }
  CaptionedItemList list;
  if (fs::is_directory(status)) {
    read_folder(path, kind, on_bad, list);
  } else {
    if (kind.is_item_file(path)) {
      throw InputError(fmt::format("{}: is {}; captioned {} are a JSONL file of {} rows, or a folder of {} with "
                                   "NAME.txt captions",
                                   path.string(), with_article(kind.key), kind.plural, row_shape(kind), kind.plural));
    }
    read_jsonl_rows(path, kind, on_bad, list);
  }
  if (list.items.empty()) {
    throw InputError(fmt::format("{}: no usable captioned {}: all {} were skipped (first: {})", path.string(),
                                 kind.key, list.skipped, list.skipped_names.front()));
  }
  log::info("captioned {} {}: {} {}{}", kind.plural, path.string(), list.items.size(), kind.plural,
            list.skipped > 0 ? fmt::format(" ({} skipped)", list.skipped) : std::string());
  return list;
}

}  // namespace tune::data
