// The recipe-agnostic training step loop.
#include "tune/recipes/step_loop.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <fstream>
#include <optional>
#include <vector>

#include "tune/core/cpu_block_cache.h"
#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/core/loss_plot.h"
#include "tune/core/memory_tracker.h"
#include "tune/core/metrics_writer.h"
#include "tune/core/tensorboard_writer.h"
#include "tune/core/progress.h"
#include "tune/distributed/process_group.h"
#include "tune/io/run_checkpoints.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/run_directory.h"

namespace tune::recipes {
namespace {

// -v: the CPU block cache's state at each logged step (core/cpu_block_cache.h): what it maps beyond the
// tensors is the part of the process's RSS that tensor accounting does not show; misses since the last log are
// fresh mappings (page faults).
void log_block_cache(int64_t step) {
  static memory_tracker::CpuBlockCache::Stats last;
  const memory_tracker::CpuBlockCache::Stats now = memory_tracker::cpu_block_cache_stats();
  if (now.mapped_bytes == 0) return;
  auto bytes = [](int64_t value) { return format_bytes(static_cast<double>(value)); };
  log::debug("step {}: CPU block cache maps {} ({} cached; at most {} so far), live peak {}; {} hits, {} misses ({} "
             "of them served by cutting down a cached block), {} evictions since the last log", step,
             bytes(now.mapped_bytes), bytes(now.cached_bytes), bytes(now.peak_mapped_bytes), bytes(now.peak_live_bytes),
             now.hits - last.hits, now.misses - last.misses, now.reuses - last.reuses, now.evictions - last.evictions);
  last = now;
}

using Clock = std::chrono::steady_clock;

void write_memory_report(const std::filesystem::path& output_dir, const nlohmann::json& report) {
  const auto path = output_dir / "memory.json";
  const auto temporary = output_dir / "memory.json.tmp";
  std::ofstream(temporary) << report.dump(2) << "\n";
  std::filesystem::rename(temporary, path);
}

// The most of `value` over ranks (itself in a single process).
int64_t max_over_ranks(int64_t value, const char* what) {
  auto* group = distributed::world();
  if (group == nullptr) return value;
  return static_cast<int64_t>(group->all_reduce(static_cast<double>(value), distributed::ReduceOp::max, what));
}

// Every rank's value, indexed by rank (each rank fills its slot of a zero vector; the sum gathers them).
std::vector<int64_t> gather_over_ranks(int64_t value, const char* what) {
  auto* group = distributed::world();
  if (group == nullptr) return {value};
  auto slots = torch::zeros({group->size()}, torch::kFloat64);
  slots[group->rank()] = static_cast<double>(value);
  slots = slots.to(group->device());  // NCCL reduces CUDA tensors only
  group->all_reduce(slots, distributed::ReduceOp::sum, what);
  slots = slots.cpu();
  std::vector<int64_t> values;
  for (int64_t rank = 0; rank < group->size(); ++rank) values.push_back(static_cast<int64_t>(slots[rank].item<double>()));
  return values;
}

// Ctrl-C as all ranks see it: one rank's signal stops every rank after the same step, so the collective checkpoint
// and exit happen together (a launcher forwards the signal to all, but it may land between two steps).
bool interrupt_agreed() {
  auto* group = distributed::world();
  if (group == nullptr) return interrupt_requested();
  return group->all_reduce(interrupt_requested() ? 1.0 : 0.0, distributed::ReduceOp::max, "Ctrl-C agreement") > 0;
}

// Each rank writes its share of the optimizer state to checkpoints/.optimizer-step-N-rank-R.safetensors, then all
// agree (the largest exit code over ranks) that every share is written; a failure on any rank fails them all, so
// rank 0 never completes a checkpoint that lacks a share. Returns the files with their names in the checkpoint.
std::vector<std::pair<std::filesystem::path, std::string>> save_optimizer_shards(
    const std::filesystem::path& output_dir, int64_t step,
    const std::function<void(const std::filesystem::path&, const std::map<std::string, std::string>&)>& write_share) {
  const int rank = distributed::world_rank(), ranks = distributed::world_size();
  const auto file_of = [&](int r) {
    return io::checkpoints_dir(output_dir) / fmt::format(".optimizer-step-{}-rank-{}.safetensors", step, r);
  };
  int exit_code = 0;
  std::string message;
  try {
    std::filesystem::create_directories(io::checkpoints_dir(output_dir));
    write_share(file_of(rank), optimizer_shard_metadata(rank, ranks, step));
  } catch (const Error& error) {
    exit_code = error.exit_code();
    message = error.what();
  } catch (const std::exception& error) {
    exit_code = 1;
    message = error.what();
  }
  auto* group = distributed::world();
  const int agreed = group == nullptr ? exit_code
                                      : static_cast<int>(group->all_reduce(exit_code, distributed::ReduceOp::max,
                                                                           "agreeing the optimizer shards are saved"));
  if (exit_code != 0) {
    throw Error(fmt::format("step {}: writing this rank's optimizer state failed: {}", step, message), exit_code);
  }
  if (agreed != 0) {
    throw Error(fmt::format("step {}: another rank failed to write its optimizer state (its message says why); no "
                            "checkpoint was completed", step), agreed);
  }
  std::vector<std::pair<std::filesystem::path, std::string>> shards;
  for (int r = 0; r < ranks; ++r) shards.emplace_back(file_of(r), optimizer_shard_file(r, ranks));
  return shards;
}

}  // namespace

StepLoopSettings make_step_loop_settings(const TrainingSettings& training, const std::filesystem::path& output_dir,
                                         const std::string& throughput_unit, bool cuda) {
  StepLoopSettings loop;
  loop.output_dir = output_dir;
  loop.total_steps = training.schedule.total_steps;
  loop.log_every = training.log_every;
  loop.eval_every = training.eval_every;
  loop.save_every = training.save_every;
  loop.keep_last = training.keep_last;
  loop.on_nan = training.on_nan;
  loop.throughput_unit = throughput_unit;
  loop.cuda = cuda;
  loop.tensorboard = training.tensorboard;
  return loop;
}

int run_step_loop(const StepLoopSettings& settings, const StepLoopHooks& hooks, LoopStart start,
                  nlohmann::json memory_plan) {
  const auto& output_dir = settings.output_dir;
  // Rank 0 alone writes the run directory's files (metrics, loss curve, memory report, checkpoints: under ddp every
  // rank holds the same weights and optimizer state) and prints progress; other ranks only compute.
  const bool main_rank = distributed::is_main_rank();
  std::optional<MetricsWriter> metrics;
  std::optional<TensorBoardWriter> tensorboard;
  LossCurves curves;
  if (main_rank) {
    metrics.emplace(output_dir);
    metrics->truncate_after(start.step);
    const std::vector<nlohmann::json> history = read_metrics(metrics->path());
    curves = loss_curves_from_metrics(history, settings.plot_metric);
    // The event files are remade from metrics.jsonl (trimmed to the resume step), so a resumed run's curves go on
    // without a repeated step.
    if (settings.tensorboard) tensorboard.emplace(output_dir / "tensorboard", history, start.elapsed_s);
    write_memory_report(output_dir, memory_plan);
  }

  int64_t step = start.step;
  auto save = [&](double elapsed_s) -> std::filesystem::path {
    // Sharded optimizer state: every rank writes its share beside the checkpoints first (a path every rank can
    // name), and all agree that every share is on disk before rank 0 builds the checkpoint around them.
    std::vector<std::pair<std::filesystem::path, std::string>> shards;  // written file, name in the checkpoint
    if (hooks.before_save) hooks.before_save();
    struct AfterSave {
      const std::function<void()>& action;
      ~AfterSave() {
        if (action) action();
      }
    } after_save{hooks.after_save};
    if (hooks.save_optimizer_shard) shards = save_optimizer_shards(output_dir, step, hooks.save_optimizer_shard);
    if (!main_rank) return io::checkpoint_path(output_dir, step);
    const auto temporary = io::begin_checkpoint(output_dir, step);
    hooks.save(temporary, step, elapsed_s);
    for (const auto& [file, name] : shards) std::filesystem::rename(file, temporary / name);
    const auto committed = io::commit_checkpoint(temporary, step);
    io::prune_checkpoints(output_dir, static_cast<int>(settings.keep_last));
    return committed;
  };

  install_interrupt_handler();
  ProgressOptions progress_options;
  progress_options.total_steps = settings.total_steps;
  progress_options.start_step = start.step;
  progress_options.log_every = settings.log_every;
  progress_options.throughput_unit = settings.throughput_unit == "tokens" ? "tok/s" : settings.throughput_unit + "/s";
  if (!main_rank) progress_options.interactive = false;
  std::FILE* progress_stream = main_rank ? stderr : std::fopen("/dev/null", "w");
  Progress progress(progress_options, progress_stream != nullptr ? progress_stream : stderr);
  const auto run_start = Clock::now();
  auto window_start = Clock::now();
  double window_items = 0.0;
  int64_t window_peak = 0;
  int64_t run_peak = 0;
  int64_t resident = -1;
  double elapsed_s = start.elapsed_s;

  // TUNE_PROFILE=FILE: one step (TUNE_PROFILE_STEP, 1-based; by default the run's second, after the warm-up step)
  // traced by LibTorch's autograd profiler into the Chrome trace FILE, for scripts/bench_profile_summary.py: where a
  // step's time goes op by op, in the run exactly as configured. Only the main rank writes.
  const char* profile_path = std::getenv("TUNE_PROFILE");
  const char* profile_step_env = std::getenv("TUNE_PROFILE_STEP");
  const int64_t profile_step = profile_step_env != nullptr ? std::atoll(profile_step_env) - 1 : start.step + 1;

  while (step < settings.total_steps) {
    memory_tracker::reset_peak(settings.cuda);
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
    if (profile_path != nullptr && main_rank && step == profile_step) {
      log::info("profiling step {} into {}", step + 1, profile_path);
      profile = std::make_unique<torch::autograd::profiler::RecordProfile>(std::string(profile_path));
    }
    const StepResult result = hooks.step(step);
    profile.reset();  // writes the trace
    window_peak = std::max({window_peak, memory_tracker::peak_bytes(settings.cuda), result.unseen_peak_bytes});
    run_peak = std::max(run_peak, window_peak);
    if (result.resident_bytes >= 0) {
      resident = resident < 0 ? result.resident_bytes : std::min(resident, result.resident_bytes);
    }
    window_items += result.items;

    if (!result.applied && result.loss_scale && std::isfinite(result.loss)) {
      progress.print(fmt::format("step {}: inf/NaN gradients at loss scale {}: update skipped, scale now {}", step + 1,
                                 *result.loss_scale, result.next_loss_scale.value_or(0.0)));
    } else if (!result.applied && settings.on_nan == "stop") {
      const auto last = io::newest_complete_checkpoint(output_dir);
      throw Error(fmt::format("step {}: loss is {} (gradient norm {}); stopping. The last complete checkpoint is {}. "
                              "HINT: lower optimizer.lr, or set training.on_nan: skip",
                              step + 1, result.loss, result.grad_norm, last ? last->string() : "none"));
    } else if (!result.applied) {
      log::warn("step {}: non-finite loss {} or gradient norm {}: update skipped", step + 1, result.loss,
                result.grad_norm);
    }
    ++step;

    const double window_seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
    const double throughput = window_seconds > 0 ? window_items / window_seconds : 0.0;
    elapsed_s = start.elapsed_s + std::chrono::duration<double>(Clock::now() - run_start).count();
    progress.update(step, result.loss, throughput, result.progress_note);

    const bool last_step = step == settings.total_steps;
    const bool log_now = step % settings.log_every == 0 || last_step;
    const bool eval_now = (settings.eval_every > 0 && step % settings.eval_every == 0) || last_step;
    if (log_now || eval_now) {
      window_peak = max_over_ranks(window_peak, "peak memory of the logging window");
      run_peak = std::max(run_peak, window_peak);
      nlohmann::json record = {{"step", step},
                               {"loss", result.loss},
                               {"lr", result.lr},
                               {"grad_norm", result.grad_norm},
                               {settings.throughput_unit + "_per_s", throughput},
                               {"peak_mem_bytes", window_peak},
                               {"elapsed_s", elapsed_s}};
      if (result.loss_scale) record["loss_scale"] = *result.loss_scale;
      for (const auto& [name, value] : result.metrics) record[name] = value;
      log_block_cache(step);
      curves.train.push_back({step, result.loss});
      if (record.contains(settings.plot_metric)) {
        curves.secondary.push_back({step, record[settings.plot_metric].get<double>()});
      }
      if (eval_now && hooks.evaluate) {
        if (const auto eval_loss = hooks.evaluate()) {
          record["eval_loss"] = *eval_loss;
          if (hooks.evaluate_metrics) {
            for (const auto& [name, value] : hooks.evaluate_metrics()) record["eval_" + name] = value;
          }
          curves.eval.push_back({step, *eval_loss});
          if (const std::string key = "eval_" + settings.plot_metric; record.contains(key)) {
            curves.secondary_eval.push_back({step, record[key].get<double>()});
          }
          progress.print(fmt::format("step {}: eval loss {:.4f}", step, *eval_loss));
        }
      }
      if (main_rank) {
        metrics->write(record);
        if (tensorboard) tensorboard->write(record);
        LossPlotOptions plot;
        plot.secondary_label = settings.plot_metric_label;
        write_loss_plot(output_dir / "loss.svg", curves, plot);
      }
      window_items = 0.0;
      window_peak = 0;
      window_start = Clock::now();
    }
    const bool save_now = (settings.save_every > 0 && step % settings.save_every == 0) || last_step;
    const bool interrupted = interrupt_agreed();
    if (save_now || interrupted) {
      const auto path = save(elapsed_s);
      progress.print(fmt::format("step {}: checkpoint saved to {}", step, path.string()));
    }
    if (interrupted) {
      progress.finish();
      log::warn("interrupted at step {}: checkpoint saved; continue with `tune train {} --resume`", step,
                (output_dir / "config.yaml").string());
      return kExitInterrupted;
    }
  }
  progress.finish();
  if (progress_stream != nullptr && progress_stream != stderr) std::fclose(progress_stream);
  const std::vector<int64_t> rank_peaks = gather_over_ranks(run_peak, "peak memory of each rank");
  run_peak = *std::max_element(rank_peaks.begin(), rank_peaks.end());
  memory_plan["peak_bytes"] = run_peak;
  if (rank_peaks.size() > 1) memory_plan["peak_bytes_per_rank"] = rank_peaks;
  const std::vector<int64_t> rank_resident = gather_over_ranks(resident, "resident memory of each rank");
  if (resident >= 0) {
    memory_plan["resident_bytes"] = *std::max_element(rank_resident.begin(), rank_resident.end());
    if (rank_resident.size() > 1) memory_plan["resident_bytes_per_rank"] = rank_resident;
  }
  memory_plan["peak_source"] = settings.cuda ? "CUDA caching allocator" : "CPU tensor storage (tracking allocator)";
  if (!main_rank) return 0;
  write_memory_report(output_dir, memory_plan);
  log::info("done: {} steps in {}, peak memory {} ({})", step, format_duration(elapsed_s),
            format_bytes(static_cast<double>(run_peak)), memory_plan["peak_source"].get<std::string>());
  if (rank_peaks.size() > 1) {
    std::string per_rank;
    for (size_t rank = 0; rank < rank_peaks.size(); ++rank) {
      per_rank += fmt::format("{}rank {}: {}", rank == 0 ? "" : ", ", rank, format_bytes(static_cast<double>(rank_peaks[rank])));
    }
    log::info("peak memory per rank: {}", per_rank);
  }
  log::info("outputs: {}", output_dir.string());
  return 0;
}

}  // namespace tune::recipes
