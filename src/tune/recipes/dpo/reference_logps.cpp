#include "tune/recipes/dpo/reference_logps.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

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

// [pairs, 2] float32: chosen and rejected per pair, in order; every rank computes its share of each batch (under
// full_shard a rank without pairs runs pair 0 for the gathers) and the shares are summed over ranks.
torch::Tensor compute(const std::vector<data::TokenizedPair>& pairs, const ReferencePass& pass, DataParallel& parallel) {
  const auto count = static_cast<int64_t>(pairs.size());
  torch::Tensor values = torch::zeros({count, 2}, torch::kFloat);
  if (count == 0) return values;
  const data::PreferenceLoader loader(pairs, pass.pairs_per_batch, /*shuffle=*/false, 0);
  int64_t first = 0;
  for (const data::PreferenceBatch& global : loader.all_batches_in_order()) {
    RowRange rows = parallel.share(global.pairs);
    const bool dummy = rows.size() == 0 && parallel.every_rank_computes();
    if (rows.size() > 0 || dummy) {
      if (dummy) rows = {0, 1};
      const data::PreferenceBatch batch = parallel.active() ? data::slice_pairs(global, rows.begin, rows.end) : global;
      parallel.before_forward();
      const train::PairLogps logps = pass.logps(batch);
      if (!dummy) {
        values.slice(0, first + rows.begin, first + rows.end)
            .copy_(torch::stack({logps.chosen, logps.rejected}, 1).to(torch::kCPU, torch::kFloat));
      }
    }
    first += global.pairs;
  }
  parallel.release_parameters();
  return parallel.sum(values);
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
    log::info("dpo: precomputing the reference's log-probs of {} training and {} evaluation pairs ({})",
              pairs.train.size(), pairs.eval.size(), pass.identity);
    const auto start = std::chrono::steady_clock::now();
    train = compute(pairs.train, pass, parallel);
    eval = compute(pairs.eval, pass, parallel);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run_on_main_rank([&] { io::save_safetensors(file, {{"train", train}, {"eval", eval}}, {{"fingerprint", expected}}); },
                     "write the precomputed reference log-probs");
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
