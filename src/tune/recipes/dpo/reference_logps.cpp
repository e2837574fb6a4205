#include "tune/recipes/dpo/reference_logps.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <string>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/safetensors.h"

namespace tune::recipes::dpo {
namespace {

// FNV-1a over the pairs' token ids and the reference's identity: a changed dataset, tokenizer, max_length or
// reference gives another fingerprint, and the stored figures are not reused.
std::string fingerprint(const PreparedPairs& pairs, const std::string& identity) {
  uint64_t hash = 1469598103934665603ULL;
  auto mix = [&hash](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ULL;
    }
  };
  for (const char c : identity) mix(static_cast<unsigned char>(c));
  for (const auto* split : {&pairs.train, &pairs.eval}) {
    mix(split->size());
    for (const auto& pair : *split) {
      for (const auto* ids : {&pair.prompt_ids, &pair.chosen_ids, &pair.rejected_ids}) {
        mix(ids->size());
        for (const int64_t id : *ids) mix(static_cast<uint64_t>(id));
      }
    }
  }
  return fmt::format("{:016x}", hash);
}

// Global batches between two saves of an unfinished pass (RUN/reference_logps.safetensors.partial).
constexpr int64_t kProgressEveryBatches = 100;

// Fills rows [begin, count) of `values` ([pairs, 2] float32: chosen and rejected per pair, in order; the rows before
// `begin` are known already). Every rank computes its share of each global batch (under full_shard a rank without
// pairs runs pair 0 for the gathers) and the shares are summed over ranks; every kProgressEveryBatches batches the
// rows done so far are merged and `save(done)` called (on every rank: it is collective).
void compute(const std::vector<data::TokenizedPair>& pairs, int64_t begin, const ReferencePass& pass,
             DataParallel& parallel, torch::Tensor& values, const std::function<void(int64_t)>& save) {
  const auto count = static_cast<int64_t>(pairs.size());
  if (begin >= count) return;
  const data::PreferenceLoader loader(std::vector<data::TokenizedPair>(pairs.begin() + begin, pairs.end()),
                                      pass.pairs_per_batch, /*shuffle=*/false, 0);
  torch::Tensor fresh = torch::zeros({count, 2}, torch::kFloat);  // this rank's shares
  auto merge = [&](int64_t done) {
    const torch::Tensor merged = parallel.sum(fresh);
    values.slice(0, begin, done).copy_(merged.slice(0, begin, done));
  };
  int64_t first = begin, batches = 0;
  for (const data::PreferenceBatch& global : loader.all_batches_in_order()) {
    RowRange rows = parallel.share(global.pairs);
    const bool dummy = rows.size() == 0 && parallel.every_rank_computes();
    if (rows.size() > 0 || dummy) {
      if (dummy) rows = {0, 1};
      const data::PreferenceBatch batch = parallel.active() ? data::slice_pairs(global, rows.begin, rows.end) : global;
      parallel.before_forward();
      const train::PairLogps logps = pass.logps(batch);
      if (!dummy) {
        fresh.slice(0, first + rows.begin, first + rows.end)
            .copy_(torch::stack({logps.chosen, logps.rejected}, 1).to(torch::kCPU, torch::kFloat));
      }
    }
    first += global.pairs;
    if (++batches % kProgressEveryBatches == 0 && first < count) {
      merge(first);
      save(first);
    }
  }
  parallel.release_parameters();
  merge(count);
}

void attach(std::vector<data::TokenizedPair>& pairs, const torch::Tensor& values) {
  const auto table = values.accessor<float, 2>();
  for (size_t i = 0; i < pairs.size(); ++i) {
    pairs[i].reference_chosen = table[static_cast<int64_t>(i)][0];
    pairs[i].reference_rejected = table[static_cast<int64_t>(i)][1];
  }
}

// The stored figures if `file` holds them for this fingerprint and these pair counts; nullopt otherwise (logged).
std::optional<std::pair<torch::Tensor, torch::Tensor>> read_stored(const std::filesystem::path& file,
                                                                   const std::string& expected,
                                                                   const PreparedPairs& pairs) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  const auto stored = io::SafetensorsFile::open(file);
  const auto found = stored.metadata().find("fingerprint");
  if (found == stored.metadata().end() || found->second != expected || !stored.contains("train") ||
      !stored.contains("eval")) {
    log::info("dpo: {} holds reference log-probs of other pairs or another reference; computing them again",
              file.string());
    return std::nullopt;
  }
  torch::Tensor train = stored.load("train"), eval = stored.load("eval");
  const auto rows_ok = [](const torch::Tensor& t, size_t n) {
    return t.dim() == 2 && t.size(0) == static_cast<int64_t>(n) && t.size(1) == 2 && t.scalar_type() == torch::kFloat;
  };
  if (!rows_ok(train, pairs.train.size()) || !rows_ok(eval, pairs.eval.size())) {
    log::info("dpo: {} does not hold one row per pair; computing the reference log-probs again", file.string());
    return std::nullopt;
  }
  return std::pair{train, eval};
}

// How far an unfinished pass got: the figures so far (zero beyond) and the pairs done in each split.
struct PassProgress {
  torch::Tensor train, eval;
  int64_t done_train = 0, done_eval = 0;
  bool done() const { return done_train > 0 || done_eval > 0; }
};

PassProgress read_progress(const std::filesystem::path& partial, const std::string& expected,
                           const PreparedPairs& pairs) {
  if (!std::filesystem::exists(partial)) return {};
  const auto stored = read_stored(partial, expected, pairs);
  if (!stored) return {};
  const auto file = io::SafetensorsFile::open(partial);
  PassProgress progress;
  try {
    progress.done_train = std::stoll(file.metadata().at("done_train"));
    progress.done_eval = std::stoll(file.metadata().at("done_eval"));
  } catch (const std::exception&) {
    log::info("dpo: {} does not say how far the pass got; computing the reference log-probs again", partial.string());
    return {};
  }
  const auto train_count = static_cast<int64_t>(pairs.train.size()), eval_count = static_cast<int64_t>(pairs.eval.size());
  if (progress.done_train < 0 || progress.done_train > train_count || progress.done_eval < 0 ||
      progress.done_eval > eval_count || (progress.done_eval > 0 && progress.done_train != train_count)) {
    return {};
  }
  std::tie(progress.train, progress.eval) = *stored;
  return progress;
}

}  // namespace

void attach_reference_logps(PreparedPairs& pairs, const ReferencePass& pass, DataParallel& parallel,
                            const std::filesystem::path& file, const std::optional<std::filesystem::path>& earlier) {
  const std::string expected = fingerprint(pairs, pass.identity);
  auto stored = read_stored(file, expected, pairs);
  std::filesystem::path source = file;
  if (!stored && earlier && std::filesystem::exists(*earlier) && *earlier != file) {
    stored = read_stored(*earlier, expected, pairs);
    source = *earlier;
  }
  // Every rank decides alike (they read the same files); a rank that found none makes all compute.
  if (parallel.active() && parallel.sum(stored ? 0.0 : 1.0) > 0) stored.reset();
  torch::Tensor train, eval;
  if (stored) {
    std::tie(train, eval) = *stored;
    log::info("dpo: reference log-probs of {} + {} pairs read from {} (computed before; the reference is not loaded "
              "again)", pairs.train.size(), pairs.eval.size(), source.string());
  } else {
    // An unfinished pass of these pairs (interrupted, or a process killed) goes on where its last save left it.
    const std::filesystem::path partial = file.string() + ".partial";
    PassProgress progress = read_progress(partial, expected, pairs);
    if (parallel.active() && parallel.sum(progress.done() ? 0.0 : 1.0) > 0) progress = PassProgress{};
    train = progress.done() ? progress.train : torch::zeros({static_cast<int64_t>(pairs.train.size()), 2});
    eval = progress.done() ? progress.eval : torch::zeros({static_cast<int64_t>(pairs.eval.size()), 2});
    if (progress.done()) {
      log::info("dpo: resuming the reference pass saved in {}: {} of {} training and {} of {} evaluation pairs done",
                partial.string(), progress.done_train, pairs.train.size(), progress.done_eval, pairs.eval.size());
    } else {
      log::info("dpo: precomputing the reference's log-probs of {} training and {} evaluation pairs ({})",
                pairs.train.size(), pairs.eval.size(), pass.identity);
    }
    auto save = [&](int64_t done_train, int64_t done_eval) {
      run_on_main_rank([&] {
        io::save_safetensors(partial, {{"train", train}, {"eval", eval}},
                             {{"fingerprint", expected}, {"done_train", std::to_string(done_train)},
                              {"done_eval", std::to_string(done_eval)}});
      }, "save the reference pass's progress");
    };
    const auto start = std::chrono::steady_clock::now();
    const auto train_count = static_cast<int64_t>(pairs.train.size());
    compute(pairs.train, progress.done_train, pass, parallel, train, [&](int64_t done) { save(done, 0); });
    compute(pairs.eval, progress.done_eval, pass, parallel, eval, [&](int64_t done) { save(train_count, done); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run_on_main_rank([&] {
      io::save_safetensors(file, {{"train", train}, {"eval", eval}}, {{"fingerprint", expected}});
      std::filesystem::remove(partial);
    }, "write the precomputed reference log-probs");
    log::info("dpo: reference log-probs computed in {:.1f} s, stored in {}", seconds, file.string());
  }
  if (train.isnan().any().item<bool>() || eval.isnan().any().item<bool>()) {
    throw Error(fmt::format("dpo: the reference's log-probs hold NaN ({}); check the reference model and "
                            "mixed_precision", source.string()));
  }
  attach(pairs.train, train);
  attach(pairs.eval, eval);
}

}  // namespace tune::recipes::dpo
