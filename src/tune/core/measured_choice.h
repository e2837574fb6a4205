// Choosing between interchangeable kernels by timing them on the work at hand, and remembering the choice.
//
// Why measure: which of two kernels is faster depends on the CPU in ways its feature flags do not tell. The rule
// "LibTorch's bf16 GEMM only with AMX" was right on the Xeon it was measured on and 2.1x wrong on an AMD EPYC with
// AVX512-BF16 (issue 22). So a run times each candidate on its own shapes for a few milliseconds, keeps the faster,
// and writes the result to a cache file keyed by what decides it (CPU model, thread count, LibTorch version, the
// question with its shapes), so later runs, and the other processes of a run on this machine, take the same choice
// without re-measuring. Processes starting together wait on a lock while the first one measures: they read its
// result instead of timing kernels on cores the others are busy with.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tune {

struct TimedCandidate {
  std::string name;
  std::function<void()> run;  // one execution of the work with this kernel
};

struct CandidateTiming {
  std::string name;
  double seconds = 0.0;  // the best of its timed runs
};

struct MeasuredChoice {
  std::string chosen;
  std::vector<CandidateTiming> timings;  // every candidate's figure, as measured (also when read from the cache)
  bool from_cache = false;
};

// Seconds from an arbitrary origin; tests pass a fake one.
using SecondsClock = std::function<double()>;
double steady_seconds();

struct MeasureOptions {
  double min_seconds_per_candidate = 0.015;  // keep timing until each candidate ran this long in total...
  int min_runs = 3;                          // ...and at least this often (after one untimed warm-up run)
  int max_runs = 25;
  // The first candidate (the default) is kept unless another is faster by more than this fraction: two kernels
  // within noise of each other should not flip between machines of one model.
  double keep_default_within = 0.03;
};

// Times the candidates in turn (interleaved, so a slow phase of a shared machine hits all of them) and picks the
// one with the lowest best-run time, subject to keep_default_within. Requires at least one candidate.
MeasuredChoice measure_fastest(const std::vector<TimedCandidate>& candidates, const SecondsClock& clock,
                               const MeasureOptions& options = {});

// A JSON file of earlier choices. An empty path, a file that cannot be read or parsed, or a directory that cannot
// be written all degrade to measuring again (said once in the log), never to an error: a cache is an optimisation.
class ChoiceCache {
 public:
  explicit ChoiceCache(std::filesystem::path file) : file_(std::move(file)) {}
  const std::filesystem::path& file() const { return file_; }

  std::optional<MeasuredChoice> find(const std::string& key) const;
  // Adds or replaces `key`, rewriting the file atomically (a temporary file renamed over it).
  void store(const std::string& key, const MeasuredChoice& choice) const;

 private:
  std::filesystem::path file_;
};

// The cache file of this user: $TUNE_CACHE_DIR/cpu_kernels.json, else $XDG_CACHE_HOME/tune/..., else
// $HOME/.cache/tune/...; empty when none of them is set.
std::filesystem::path default_kernel_cache_file();

// What a cached choice is keyed by besides the question: "<CPU model> | <N> threads | LibTorch <version>".
std::string cpu_kernel_context();

// The cached choice for `key` when there is one naming a candidate, else measure_fastest's, stored. Holds an
// exclusive lock on "<cache file>.lock" from the lookup to the store, so processes asking together measure once.
MeasuredChoice choose_fastest(const std::string& key, const std::vector<TimedCandidate>& candidates,
                              const ChoiceCache& cache, const SecondsClock& clock = steady_seconds,
                              const MeasureOptions& options = {});

}  // namespace tune
