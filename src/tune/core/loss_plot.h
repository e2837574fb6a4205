// loss.svg: the run's loss curve (train as a line, eval as markers joined by a line), a self-contained SVG that
// any browser opens, redrawn as the run goes and replaced atomically so a viewer never sees half a file.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tune {

struct LossPoint {
  int64_t step = 0;
  double loss = 0.0;
};

struct LossPlotOptions {
  std::string title = "Loss";  // escaped for XML
  int width = 800;             // pixels
  int height = 450;            // pixels
  // Above this many finite train points the curve is thinned to each bucket's first, lowest, highest and last
  // point (spikes survive), so redrawing a long run stays cheap and the file small.
  size_t max_points = 2000;
  // A second curve on a right-hand axis (DPO: the reward margin), drawn when LossCurves::secondary has points.
  std::string secondary_label = "";  // its axis title and legend entry, e.g. "reward margin"
};

// Train and eval curves pulled from metrics records: "loss" and "eval_loss" against "step". Records without the
// key, or with null (a NaN written to JSON), contribute nothing.
// With `secondary_metric` set, that key and "eval_" + it fill `secondary` and `secondary_eval`.
struct LossCurves {
  std::vector<LossPoint> train;
  std::vector<LossPoint> eval;
  std::vector<LossPoint> secondary, secondary_eval;  // "loss" here is the secondary metric's value
};
LossCurves loss_curves_from_metrics(const std::vector<nlohmann::json>& records,
                                    const std::string& secondary_metric = "");

// The SVG document. NaN and inf losses are skipped; with no finite point the axes are drawn with "no data yet".
std::string render_loss_svg(const std::vector<LossPoint>& train, const std::vector<LossPoint>& eval,
                            const LossPlotOptions& options = {});
// The same with the secondary curves on a right-hand axis (when `curves.secondary` has finite points).
std::string render_loss_plot(const LossCurves& curves, const LossPlotOptions& options = {});

// Writes render_loss_svg(...) to `path` via a temporary file and rename. Throws tune::Error on I/O failure.
void write_loss_svg(const std::filesystem::path& path, const std::vector<LossPoint>& train,
                    const std::vector<LossPoint>& eval, const LossPlotOptions& options = {});
void write_loss_plot(const std::filesystem::path& path, const LossCurves& curves, const LossPlotOptions& options = {});

}  // namespace tune
