// Timed choice between kernels with a per-user cache file (see measured_choice.h).
#include "tune/core/measured_choice.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "tune/core/log.h"

namespace tune {
namespace {

constexpr int kCacheVersion = 1;

// "model name" of /proc/cpuinfo's first processor: what distinguishes one CPU model from another for the kernels.
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "unknown CPU";
}

// A problem with the cache is said once per process: a damaged file as a warning (someone else's file may sit
// there), an unwritable directory at debug level (each run's log says whether its choice was measured or cached).
void say_once(log::Level level, const std::string& message) {
  static bool said = false;
  if (said) return;
  said = true;
  log::write(level, message);
}

nlohmann::json read_cache_json(const std::filesystem::path& file) {
  std::error_code error;
  if (file.empty() || !std::filesystem::exists(file, error)) return nlohmann::json::object();
  std::ifstream in(file);
  nlohmann::json parsed = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || parsed.value("version", 0) != kCacheVersion ||
      !parsed.contains("choices") || !parsed["choices"].is_object()) {
    say_once(log::Level::warn, fmt::format("kernel choice cache {} is not one tune wrote (or an older format): "
                                           "measuring again and rewriting it",
                                           file.string()));
    return nlohmann::json::object();
  }
  return parsed;
}

std::optional<MeasuredChoice> choice_from_json(const nlohmann::json& entry) {
  if (!entry.is_object() || !entry.contains("chosen") || !entry["chosen"].is_string()) return std::nullopt;
  MeasuredChoice choice;
  choice.chosen = entry["chosen"].get<std::string>();
  choice.from_cache = true;
  if (entry.contains("seconds") && entry["seconds"].is_object()) {
    for (const auto& [name, seconds] : entry["seconds"].items()) {
      if (seconds.is_number()) choice.timings.push_back({name, seconds.get<double>()});
    }
  }
  return choice;
}

// An exclusive flock on "<file>.lock" for the scope; no lock (and no error) where the directory cannot be made or
// written: the choice is then measured by each process on its own.
class CacheLock {
 public:
  explicit CacheLock(const std::filesystem::path& file) {
    if (file.empty()) return;
    std::error_code error;
    std::filesystem::create_directories(file.parent_path(), error);
    fd_ = ::open((file.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~CacheLock() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

bool names_candidate(const std::string& name, const std::vector<TimedCandidate>& candidates) {
  return std::any_of(candidates.begin(), candidates.end(), [&](const TimedCandidate& c) { return c.name == name; });
}

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

MeasuredChoice measure_fastest(const std::vector<TimedCandidate>& candidates, const SecondsClock& clock,
                               const MeasureOptions& options) {
  if (candidates.empty()) throw std::invalid_argument("measure_fastest: no candidates");
  const size_t count = candidates.size();
  std::vector<double> best(count, std::numeric_limits<double>::infinity()), total(count, 0.0);
  for (const TimedCandidate& candidate : candidates) candidate.run();  // warm-up: first-touch allocation, caches
  for (int run = 0; run < options.max_runs; ++run) {
    for (size_t i = 0; i < count; ++i) {
      const double start = clock();
      candidates[i].run();
      const double took = clock() - start;
      best[i] = std::min(best[i], took);
      total[i] += took;
    }
    const bool enough = std::all_of(total.begin(), total.end(),
                                    [&](double t) { return t >= options.min_seconds_per_candidate; });
    if (run + 1 >= options.min_runs && enough) break;
  }
  size_t chosen = 0;
  for (size_t i = 1; i < count; ++i) {
    if (best[i] < best[chosen]) chosen = i;
  }
  if (chosen != 0 && best[chosen] >= best[0] * (1.0 - options.keep_default_within)) chosen = 0;
  MeasuredChoice result;
  result.chosen = candidates[chosen].name;
  for (size_t i = 0; i < count; ++i) result.timings.push_back({candidates[i].name, best[i]});
  return result;
}

std::optional<MeasuredChoice> ChoiceCache::find(const std::string& key) const {
  if (file_.empty()) return std::nullopt;
  const nlohmann::json cache = read_cache_json(file_);
  if (!cache.contains("choices") || !cache["choices"].contains(key)) return std::nullopt;
  return choice_from_json(cache["choices"][key]);
}

void ChoiceCache::store(const std::string& key, const MeasuredChoice& choice) const {
  if (file_.empty()) return;
  nlohmann::json cache = read_cache_json(file_);
  cache["version"] = kCacheVersion;
  nlohmann::json seconds = nlohmann::json::object();
  for (const CandidateTiming& timing : choice.timings) seconds[timing.name] = timing.seconds;
  cache["choices"][key] = {{"chosen", choice.chosen}, {"seconds", seconds}};
  std::error_code error;
  std::filesystem::create_directories(file_.parent_path(), error);
  const std::filesystem::path temporary = file_.string() + fmt::format(".{}.tmp", ::getpid());
  {
    std::ofstream out(temporary);
    out << cache.dump(1) << '\n';
    if (!out.good()) {
      std::filesystem::remove(temporary, error);
      say_once(log::Level::debug,
               fmt::format("cannot write the kernel choice cache {}: later runs will measure again", file_.string()));
      return;
    }
  }
  std::filesystem::rename(temporary, file_, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    say_once(log::Level::debug,
             fmt::format("cannot write the kernel choice cache {}: later runs will measure again", file_.string()));
  }
}

std::filesystem::path default_kernel_cache_file() {
  constexpr const char* kName = "cpu_kernels.json";
  if (const char* dir = std::getenv("TUNE_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    return std::filesystem::path(dir) / kName;
  }
  if (const char* dir = std::getenv("XDG_CACHE_HOME"); dir != nullptr && *dir != '\0') {
    return std::filesystem::path(dir) / "tune" / kName;
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "tune" / kName;
  }
  return {};
}

std::string cpu_kernel_context() {
  return fmt::format("{} | {} threads | LibTorch {}.{}.{}", cpu_model_name(), at::get_num_threads(),
                     TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

MeasuredChoice choose_fastest(const std::string& key, const std::vector<TimedCandidate>& candidates,
                              const ChoiceCache& cache, const SecondsClock& clock, const MeasureOptions& options) {
  const CacheLock lock(cache.file());
  if (std::optional<MeasuredChoice> cached = cache.find(key); cached && names_candidate(cached->chosen, candidates)) {
    return *cached;
  }
  MeasuredChoice measured = measure_fastest(candidates, clock, options);
  cache.store(key, measured);
  return measured;
}

}  // namespace tune
