// Progress display and number formatting for the training log.
#include "tune/core/progress.h"

#include "tune/core/log.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace tune {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  const int64_t days = total / 86400, hours = total % 86400 / 3600, minutes = total % 3600 / 60, rest = total % 60;
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02}s", minutes, rest);
  if (total < 86400) return fmt::format("{}h{:02}m", hours, minutes);
  return fmt::format("{}d{:02}h", days, hours);
}

std::string format_count(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  const double magnitude = std::abs(value);
  if (magnitude < 100) return fmt::format("{:.3g}", value);
  if (magnitude < 999.5) return fmt::format("{:.0f}", value);
  static const char* const suffixes[] = {"k", "M", "G", "T", "P"};
  double scaled = value / 1000.0;
  size_t unit = 0;
  // Move up while rounding to one decimal would print 1000.0k instead of 1.0M.
  while (std::abs(scaled) >= 999.95 && unit + 1 < std::size(suffixes)) {
    scaled /= 1000.0;
    ++unit;
  }
  return fmt::format("{:.1f}{}", scaled, suffixes[unit]);
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return fmt::format("{} B", bytes);
  if (std::abs(bytes) < 1024) return fmt::format("{:.0f} B", bytes);
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double scaled = bytes / 1024.0;
  size_t unit = 0;
  while (std::abs(scaled) >= 1023.95 && unit + 1 < std::size(units)) {
    scaled /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", scaled, units[unit]);
}

namespace {

std::string format_loss(double loss) { return std::isfinite(loss) ? fmt::format("{:.4g}", loss) : fmt::format("{}", loss); }

// " | loss 1.234 | 5.1k tok/s" (or the status in place of the loss): the parts both line styles share.
std::string loss_and_throughput(const ProgressSnapshot& snapshot, const char* separator) {
  std::string text = snapshot.status ? fmt::format("{}{}", separator, *snapshot.status)
                                     : fmt::format("{}loss {}", separator, format_loss(snapshot.loss));
  if (!snapshot.note.empty()) text += " | " + snapshot.note;
  if (std::isfinite(snapshot.throughput) && snapshot.throughput > 0) {
    text += fmt::format(" | {} {}", format_count(snapshot.throughput), snapshot.throughput_unit);
  }
  return text;
}

std::string step_text(const ProgressSnapshot& snapshot) {
  return snapshot.total_steps > 0 ? fmt::format("step {}/{}", snapshot.step, snapshot.total_steps)
                                  : fmt::format("step {}", snapshot.step);
}

int terminal_columns(std::FILE* stream) {
  winsize size{};
  if (::ioctl(::fileno(stream), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

}  // namespace

std::string format_progress_bar_line(const ProgressSnapshot& snapshot, int bar_width) {
  std::string line = step_text(snapshot);
  if (snapshot.total_steps > 0 && bar_width > 0) {
    const double fraction = std::clamp(static_cast<double>(snapshot.step) / snapshot.total_steps, 0.0, 1.0);
    const int filled = static_cast<int>(fraction * bar_width);
    std::string bar(static_cast<size_t>(bar_width), ' ');
    std::fill_n(bar.begin(), filled, '=');
    if (filled < bar_width && filled > 0) bar[static_cast<size_t>(filled - 1)] = '>';
    if (filled < bar_width && filled == 0) bar[0] = '>';
    line += fmt::format(" [{}]", bar);
  }
  line += loss_and_throughput(snapshot, " ");
  if (snapshot.total_steps > 0) line += fmt::format(" | ETA {}", format_duration(snapshot.eta_seconds));
  return line;
}

std::string format_progress_log_line(const ProgressSnapshot& snapshot) {
  std::string line = step_text(snapshot);
  if (snapshot.total_steps > 0) {
    line += fmt::format(" ({:.1f}%)", 100.0 * static_cast<double>(snapshot.step) / snapshot.total_steps);
  }
  line += loss_and_throughput(snapshot, " | ");
  line += fmt::format(" | elapsed {}", format_duration(snapshot.elapsed_seconds));
  if (snapshot.total_steps > 0) line += fmt::format(" | ETA {}", format_duration(snapshot.eta_seconds));
  return line;
}

Progress::Progress(ProgressOptions options, std::FILE* stream)
    : options_(std::move(options)),
      stream_(stream),
      interactive_(options_.interactive.value_or(::isatty(::fileno(stream)) != 0)),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

ProgressSnapshot Progress::snapshot(int64_t step, double loss, double throughput) const {
  ProgressSnapshot snapshot;
  snapshot.step = step;
  snapshot.total_steps = options_.total_steps;
  snapshot.loss = loss;
  snapshot.throughput = throughput;
  snapshot.throughput_unit = options_.throughput_unit;
  snapshot.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - options_.start_step;
  if (options_.total_steps > 0 && done > 0) {
    snapshot.eta_seconds =
        snapshot.elapsed_seconds / static_cast<double>(done) * static_cast<double>(std::max<int64_t>(0, options_.total_steps - step));
  }
  return snapshot;
}

void Progress::update(int64_t step, double loss, double throughput, const std::string& note) {
  auto line = snapshot(step, loss, throughput);
  line.note = note;
  show(std::move(line));
}

void Progress::update_status(int64_t step, const std::string& status, double throughput) {
  auto line = snapshot(step, 0.0, throughput);
  line.status = status;
  show(std::move(line));
}

void Progress::show(ProgressSnapshot current) {
  const int64_t step = current.step;
  last_ = std::move(current);
  if (!log::enabled(log::Level::info)) return;  // tune -q: warnings and errors only
  const bool last_step = options_.total_steps > 0 && step >= options_.total_steps;
  if (interactive_) {
    // Redrawing faster than the eye reads only costs terminal bandwidth on fast tiny models.
    const auto now = std::chrono::steady_clock::now();
    if (!last_step && line_open_ && now - last_redraw_ < std::chrono::milliseconds(100)) return;
    last_redraw_ = now;
    redraw();
    return;
  }
  const int64_t every = std::max<int64_t>(1, options_.log_every);
  if (step % every == 0 || last_step) {
    std::fprintf(stream_, "%s\n", format_progress_log_line(*last_).c_str());
    std::fflush(stream_);
  }
}

void Progress::redraw() {
  if (!last_) return;
  int bar_width = 30;
  if (const int columns = terminal_columns(stream_); columns > 0) {
    // Shrink the bar so the line never wraps: a wrapped line cannot be redrawn with \r.
    const int rest = static_cast<int>(format_progress_bar_line(*last_, 0).size()) + 3;
    bar_width = std::clamp(columns - 1 - rest, 0, 30);
  }
  // \033[K clears what a longer previous line left to the right.
  std::fprintf(stream_, "\r%s\033[K", format_progress_bar_line(*last_, bar_width).c_str());
  std::fflush(stream_);
  line_open_ = true;
}

void Progress::print(const std::string& line) {
  if (!log::enabled(log::Level::info)) return;
  if (interactive_ && line_open_) std::fprintf(stream_, "\r\033[K");
  std::fprintf(stream_, "%s\n", line.c_str());
  line_open_ = false;
  if (interactive_) redraw();
  std::fflush(stream_);
}

void Progress::finish() {
  if (interactive_ && line_open_) {
    std::fprintf(stream_, "\n");
    std::fflush(stream_);
  }
  line_open_ = false;
}

}  // namespace tune
