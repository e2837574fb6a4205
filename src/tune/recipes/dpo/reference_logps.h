// dpo.precompute_reference (TRL's precompute_ref_log_probs): the reference model's summed completion log-probs of
// every training and evaluation pair, computed in one pass before training and kept with the pairs, so training
// runs no reference forward and holds no reference copy. The figures are stored in RUN/reference_logps.safetensors;
// a resumed run (or a new run on the same data and reference) reads them back instead of computing them again when
// the file's fingerprint matches: the pairs' token ids, the reference's identity and the precision it ran in. An
// unfinished pass saves its progress every 100 global batches (RUN/reference_logps.safetensors.partial) and the
// next run of the same pairs goes on from there.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/data/preference_loader.h"
#include "tune/recipes/data_parallel.h"
#include "tune/recipes/dpo/dpo_data.h"
#include "tune/train/preference_loss.h"

namespace tune::recipes::dpo {

struct ReferencePass {
  // The reference's log-probs of a batch (without gradients), under the run's precision.
  std::function<train::PairLogps(const data::PreferenceBatch&)> logps;
  std::string identity;         // what the reference is ("base of DIR with adapters off, bf16 autocast"): fingerprinted
  int64_t pairs_per_batch = 1;  // global pairs per forward: every rank computes its share
};

// Fills every pair's reference_chosen / reference_rejected: from `file` (or, when it lacks them, from `earlier`: the
// run directory a --resume continues) if one holds figures for exactly these pairs and this reference, else by
// running `pass` over the pairs in order (ranks share each batch; the sums are added over ranks) and writing
// `file` (rank 0). Logs which it did and how long the pass took.
void attach_reference_logps(PreparedPairs& pairs, const ReferencePass& pass, DataParallel& parallel,
                            const std::filesystem::path& file, const std::optional<std::filesystem::path>& earlier);

}  // namespace tune::recipes::dpo
