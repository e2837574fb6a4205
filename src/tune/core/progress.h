// Training (and sampling) progress on stderr: one redrawn bar line on a terminal, plain log lines every N steps
// otherwise (CI logs and redirected output would fill with carriage returns), plus the number formatters both use.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace tune {

// "45s", "3m12s", "1h02m", "2d03h"; "?" for a negative or non-finite duration (no ETA yet).
std::string format_duration(double seconds);
// Decimal suffixes for rates and sizes of datasets: "950", "12.5", "1.2k", "3.4M", "5.6G", "7.8T".
std::string format_count(double value);
// Binary units for memory: "512 B", "1.5 KiB", "12.3 MiB", "1.0 GiB".
std::string format_bytes(double bytes);

// What one progress line shows; the formatters below are pure so tests need no terminal and no clock.
struct ProgressSnapshot {
  int64_t step = 0;
  int64_t total_steps = 0;        // <= 0: unknown, so no bar, percentage or ETA
  double loss = 0.0;              // NaN prints as "nan"
  std::optional<std::string> status;  // set: printed in place of the loss, for steps that have none (sampling:
                                      // "timestep 979"); unset (training): the loss
  std::string note;               // non-empty: shown after the loss ("reward acc 0.75": DPO)
  double throughput = 0.0;        // omitted when not finite or <= 0
  std::string throughput_unit = "tok/s";
  double elapsed_seconds = 0.0;
  double eta_seconds = -1.0;      // negative: unknown
};

// "step 120/2000 [=====>    ] loss 1.234 | 5.1k tok/s | ETA 3m12s", the bar `bar_width` characters inside [].
std::string format_progress_bar_line(const ProgressSnapshot& snapshot, int bar_width = 30);
// "step 120/2000 (6.0%) | loss 1.234 | 5.1k tok/s | elapsed 1m02s | ETA 3m12s"
// With a status instead of a loss: "step 3/50 (6.0%) | timestep 938 | elapsed 2s | ETA 31s"
std::string format_progress_log_line(const ProgressSnapshot& snapshot);

struct ProgressOptions {
  int64_t total_steps = 0;                // <= 0: unknown
  int64_t start_step = 0;                 // the step a resumed run starts from; the ETA counts only steps run now
  int64_t log_every = 10;                 // non-terminal output: a line every this many steps, and at the last
  std::string throughput_unit = "tok/s";  // "samples/s" for diffusion recipes
  std::optional<bool> interactive;        // unset: redraw iff the stream is a terminal (isatty)
};

// Not thread-safe: the training loop owns it. Other output during training should go through print() so the
// redrawn line is not torn.
class Progress {
 public:
  explicit Progress(ProgressOptions options, std::FILE* stream = stderr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Reports that `step` (1-based count of finished steps) completed with this loss and throughput.
  void update(int64_t step, double loss, double throughput, const std::string& note = "");
  // The same for steps without a loss (sampling): `status` is shown where the loss goes.
  void update_status(int64_t step, const std::string& status, double throughput = 0.0);
  // Prints a whole line (eval result, "checkpoint saved") above the bar, then redraws the bar.
  void print(const std::string& line);
  // Ends the redrawn line with a newline; idempotent, also run by the destructor.
  void finish();

  bool interactive() const { return interactive_; }

 private:
  ProgressSnapshot snapshot(int64_t step, double loss, double throughput) const;
  void show(ProgressSnapshot current);  // redraws or logs it, per the options
  void redraw();

  ProgressOptions options_;
  std::FILE* stream_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_redraw_{};
  std::optional<ProgressSnapshot> last_;
  bool line_open_ = false;  // a bar is on screen without its newline
};

}  // namespace tune
