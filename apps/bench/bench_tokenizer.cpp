// tune-bench-tokenizer: single-thread encode throughput of a tokenizer (tokenizer.json or tokenizer.model) on a
// corpus file, one JSON line. Driven by scripts/bench_tokenizer.py, which runs Hugging Face's `tokenizers` on the
// same file side by side.
//
// The BPE model caches the ids of pieces it has seen, so a second pass over the same corpus mostly hits the cache.
// Two figures are reported so that this cannot flatter the result:
//   cold: the first pass after loading (empty cache), best over --cold fresh loads;
//   warm: the best of --repeat further passes on the last loaded tokenizer (cache filled by earlier passes).
// Only encoding is timed: loading the tokenizer and reading the corpus are not.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tune/data/tokenizer.h"

namespace {

struct Options {
  std::string tokenizer;
  std::string corpus;
  bool whole = false;
  int repeat = 5;
  int cold = 1;
};

std::vector<std::string> read_documents(const std::string& path, bool whole) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (whole) return {std::move(text)};
  // One document per line, as Python's str.split("\n") (the driver script does the same, so the documents
  // match exactly); a trailing newline does not make an empty last document.
  std::vector<std::string> documents;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    documents.emplace_back(text, start, end - start);
    start = end + 1;
  }
  return documents;
}

struct Pass {
  double seconds = 0;
  int64_t tokens = 0;
};

// One encode of every document (no BOS/EOS), timed as a whole.
Pass encode_all(const tune::data::Tokenizer& tokenizer, const std::vector<std::string>& documents) {
  Pass pass;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& document : documents) {
    pass.tokens += static_cast<int64_t>(tokenizer.encode(document, /*add_bos=*/false, /*add_eos=*/false).size());
  }
  pass.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"tune-bench-tokenizer: single-thread tokenizer encode throughput on a corpus file"};
  app.add_option("--tokenizer", options.tokenizer, "tokenizer.json, tokenizer.model or a directory holding one")
      ->required();
  app.add_option("--corpus", options.corpus, "UTF-8 text, one document per line")->required();
  app.add_flag("--whole", options.whole, "encode the whole file as one document");
  app.add_option("--repeat", options.repeat, "warm passes after the cold one (fastest kept)")->capture_default_str();
  app.add_option("--cold", options.cold, "fresh loads, each timed on its first pass (fastest kept)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.cold = std::max(options.cold, 1);

  try {
    const std::vector<std::string> documents = read_documents(options.corpus, options.whole);
    int64_t bytes = 0;
    for (const auto& document : documents) bytes += static_cast<int64_t>(document.size());

    // Cold passes: a fresh tokenizer (empty piece cache) each time; the last one stays for the warm passes.
    std::optional<tune::data::Tokenizer> tokenizer;
    Pass cold{1e30, 0};
    for (int i = 0; i < options.cold; ++i) {
      tokenizer.reset();
      tokenizer.emplace(tune::data::Tokenizer::load(options.tokenizer));
      const Pass pass = encode_all(*tokenizer, documents);
      if (pass.seconds < cold.seconds) cold = pass;
    }
    Pass warm = cold;
    for (int i = 0; i < options.repeat; ++i) {
      const Pass pass = encode_all(*tokenizer, documents);
      if (pass.tokens != cold.tokens) throw std::runtime_error("token count changed between passes");
      if (i == 0 || pass.seconds < warm.seconds) warm = pass;
    }

    const double megabytes = static_cast<double>(bytes) / 1e6;
    const nlohmann::json line{
        {"tokenizer", tokenizer->model_path().string()},
        {"documents", documents.size()},
        {"bytes", bytes},
        {"tokens", cold.tokens},
        {"cold_seconds", cold.seconds},
        {"cold_mb_per_s", megabytes / cold.seconds},
        {"cold_tokens_per_s", static_cast<double>(cold.tokens) / cold.seconds},
        {"seconds", warm.seconds},
        {"mb_per_s", megabytes / warm.seconds},
        {"tokens_per_s", static_cast<double>(warm.tokens) / warm.seconds},
    };
    std::cout << line.dump() << std::endl;
  } catch (const std::exception& error) {
    std::cerr << "tune-bench-tokenizer: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
