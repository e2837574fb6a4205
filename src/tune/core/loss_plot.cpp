// Renders the loss curve as SVG by hand: the file is small and a plotting dependency would outweigh it.
#include "tune/core/loss_plot.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace tune {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTrainColour = "#1f77b4";
constexpr const char* kEvalColour = "#d62728";
constexpr const char* kSecondaryColour = "#2ca02c";

std::vector<LossPoint> finite_points(const std::vector<LossPoint>& points) {
  std::vector<LossPoint> finite;
  finite.reserve(points.size());
  for (const LossPoint& point : points) {
    if (std::isfinite(point.loss)) finite.push_back(point);
  }
  std::stable_sort(finite.begin(), finite.end(), [](const LossPoint& a, const LossPoint& b) { return a.step < b.step; });
  return finite;
}

// Keeps first, min, max and last of each bucket (in step order), so a thinned curve still shows every spike.
std::vector<LossPoint> thin(const std::vector<LossPoint>& points, size_t max_points) {
  if (max_points < 4 || points.size() <= max_points) return points;
  const size_t buckets = max_points / 4;
  const size_t bucket_size = (points.size() + buckets - 1) / buckets;
  std::vector<LossPoint> thinned;
  for (size_t begin = 0; begin < points.size(); begin += bucket_size) {
    const size_t end = std::min(points.size(), begin + bucket_size);
    size_t low = begin, high = begin;
    for (size_t i = begin; i < end; ++i) {
      if (points[i].loss < points[low].loss) low = i;
      if (points[i].loss > points[high].loss) high = i;
    }
    size_t picks[] = {begin, low, high, end - 1};
    std::sort(std::begin(picks), std::end(picks));
    for (size_t i = 0; i < 4; ++i) {
      if (i == 0 || picks[i] != picks[i - 1]) thinned.push_back(points[picks[i]]);
    }
  }
  return thinned;
}

// 1, 2, 5 times a power of ten: tick spacing a reader can add up in their head.
double nice_step(double span, int target_ticks) {
  const double raw = span / std::max(1, target_ticks - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  const double nice = fraction <= 1.0 ? 1.0 : fraction <= 2.0 ? 2.0 : fraction <= 5.0 ? 5.0 : 10.0;
  return nice * magnitude;
}

struct Axis {
  double low = 0.0;
  double high = 1.0;
  double step = 0.2;
};

// Widens [low, high] to whole ticks; a degenerate range (one point, flat curve) is padded so it has width.
Axis make_axis(double low, double high, double min_step) {
  if (!(high > low)) {
    const double pad = std::max(std::abs(low) * 0.05, min_step > 0 ? min_step : 1e-3);
    low -= pad;
    high += pad;
  }
  Axis axis;
  axis.step = std::max(nice_step(high - low, 6), min_step);
  axis.low = std::floor(low / axis.step) * axis.step;
  axis.high = std::ceil(high / axis.step) * axis.step;
  if (axis.high <= axis.low) axis.high = axis.low + axis.step;
  return axis;
}

std::string tick_label(double value, bool integer) {
  if (std::abs(value) < 1e-12) value = 0.0;  // no "-0" or "1e-17" from accumulated rounding
  if (integer && std::abs(value) < 1e7) return fmt::format("{:.0f}", value);
  return fmt::format("{:.4g}", value);
}

std::string escape_xml(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '&': escaped += "&amp;"; break;
      case '<': escaped += "&lt;"; break;
      case '>': escaped += "&gt;"; break;
      case '"': escaped += "&quot;"; break;
      case '\'': escaped += "&apos;"; break;
      default: escaped += c;
    }
  }
  return escaped;
}

}  // namespace

LossCurves loss_curves_from_metrics(const std::vector<nlohmann::json>& records, const std::string& secondary_metric) {
  LossCurves curves;
  for (const nlohmann::json& record : records) {
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    const int64_t step = record["step"].get<int64_t>();
    auto take = [&](const std::string& key, std::vector<LossPoint>& into) {
      if (auto it = record.find(key); it != record.end() && it->is_number()) into.push_back({step, it->get<double>()});
    };
    take("loss", curves.train);
    take("eval_loss", curves.eval);
    if (!secondary_metric.empty()) {
      take(secondary_metric, curves.secondary);
      take("eval_" + secondary_metric, curves.secondary_eval);
    }
  }
  return curves;
}

std::string render_loss_svg(const std::vector<LossPoint>& train_points, const std::vector<LossPoint>& eval_points,
                            const LossPlotOptions& options) {
  return render_loss_plot(LossCurves{train_points, eval_points, {}, {}}, options);
}

std::string render_loss_plot(const LossCurves& curves, const LossPlotOptions& options) {
  const std::vector<LossPoint> train = thin(finite_points(curves.train), options.max_points);
  const std::vector<LossPoint> eval = finite_points(curves.eval);
  const std::vector<LossPoint> secondary = thin(finite_points(curves.secondary), options.max_points);
  const std::vector<LossPoint> secondary_eval = finite_points(curves.secondary_eval);
  const bool has_secondary = !secondary.empty() || !secondary_eval.empty();

  const double width = std::max(options.width, 200);
  const double height = std::max(options.height, 150);
  const double left = 70, right = has_secondary ? 70 : 20, top = 40, bottom = 50;
  const double plot_width = width - left - right, plot_height = height - top - bottom;

  double min_step = 0, max_step = 1, min_loss = 0, max_loss = 1;
  bool any = false;
  for (const auto* curve : {&train, &eval, &secondary, &secondary_eval}) {
    for (const LossPoint& point : *curve) {
      const double step = static_cast<double>(point.step);
      min_step = any ? std::min(min_step, step) : step;
      max_step = any ? std::max(max_step, step) : step;
      any = true;
    }
  }
  bool any_loss = false;
  for (const auto* curve : {&train, &eval}) {
    for (const LossPoint& point : *curve) {
      min_loss = any_loss ? std::min(min_loss, point.loss) : point.loss;
      max_loss = any_loss ? std::max(max_loss, point.loss) : point.loss;
      any_loss = true;
    }
  }
  double min_value = 0, max_value = 1;
  bool any_value = false;
  for (const auto* curve : {&secondary, &secondary_eval}) {
    for (const LossPoint& point : *curve) {
      min_value = any_value ? std::min(min_value, point.loss) : point.loss;
      max_value = any_value ? std::max(max_value, point.loss) : point.loss;
      any_value = true;
    }
  }
  const Axis x_axis = make_axis(min_step, max_step, /*min_step=*/1.0);
  const Axis y_axis = make_axis(min_loss, max_loss, /*min_step=*/0.0);
  const Axis y2_axis = make_axis(min_value, max_value, /*min_step=*/0.0);
  auto x_of = [&](double step) { return left + (step - x_axis.low) / (x_axis.high - x_axis.low) * plot_width; };
  auto y_of = [&](double loss) { return top + (y_axis.high - loss) / (y_axis.high - y_axis.low) * plot_height; };
  auto y2_of = [&](double value) { return top + (y2_axis.high - value) / (y2_axis.high - y2_axis.low) * plot_height; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2:.1f}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{3}</text>\n",
      width, height, width / 2, escape_xml(options.title));

  // Grid and tick labels; the tick count is bounded because the steps come from nice_step over the span.
  for (double tick = x_axis.low; tick <= x_axis.high + x_axis.step * 1e-6; tick += x_axis.step) {
    const double x = x_of(tick);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        x, top, top + plot_height, top + plot_height + 16, tick_label(tick, true));
  }
  for (double tick = y_axis.low; tick <= y_axis.high + y_axis.step * 1e-6; tick += y_axis.step) {
    const double y = y_of(tick);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e0e0e0\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        left, y, left + plot_width, left - 6, y + 4, tick_label(tick, false));
  }
  if (has_secondary) {  // the right-hand axis: ticks and title only (the grid follows the loss axis)
    for (double tick = y2_axis.low; tick <= y2_axis.high + y2_axis.step * 1e-6; tick += y2_axis.step) {
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"start\" fill=\"{}\">{}</text>\n",
                         left + plot_width + 6, y2_of(tick) + 4, kSecondaryColour, tick_label(tick, false));
    }
    const double x = width - 12, y = top + plot_height / 2;
    svg += fmt::format("<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" fill=\"{2}\" "
                       "transform=\"rotate(90 {0:.1f} {1:.1f})\">{3}</text>\n",
                       x, y, kSecondaryColour, escape_xml(options.secondary_label));
  }
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"black\"/>\n"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step</text>\n"
      "<text x=\"16\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1f})\">loss</text>\n",
      left, top, plot_width, plot_height, left + plot_width / 2, height - 10, top + plot_height / 2,
      top + plot_height / 2);

  if (!any) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#808080\">no data yet</text>\n",
                       left + plot_width / 2, top + plot_height / 2);
  }

  auto polyline = [&](const std::vector<LossPoint>& points, const char* name, const char* colour,
                      bool right_axis = false, const char* dash = "") {
    std::string coordinates;
    for (const LossPoint& point : points) {
      if (!coordinates.empty()) coordinates += ' ';
      coordinates += fmt::format("{:.1f},{:.1f}", x_of(static_cast<double>(point.step)),
                                 right_axis ? y2_of(point.loss) : y_of(point.loss));
    }
    return fmt::format(
        "<polyline class=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-linejoin=\"round\"{} "
        "points=\"{}\"/>\n",
        name, colour, *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "", coordinates);
  };
  if (!secondary.empty()) svg += polyline(secondary, "secondary", kSecondaryColour, true);
  if (!secondary_eval.empty()) {
    svg += polyline(secondary_eval, "secondary-eval", kSecondaryColour, true, "4 3");
    for (const LossPoint& point : secondary_eval) {
      svg += fmt::format("<circle class=\"secondary-eval\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                         x_of(static_cast<double>(point.step)), y2_of(point.loss), kSecondaryColour);
    }
  }
  if (!train.empty()) svg += polyline(train, "train", kTrainColour);
  // A lone train point draws no line; a dot keeps it visible.
  if (train.size() == 1) {
    svg += fmt::format("<circle class=\"train\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                       x_of(static_cast<double>(train[0].step)), y_of(train[0].loss), kTrainColour);
  }
  if (!eval.empty()) {
    svg += polyline(eval, "eval", kEvalColour);
    for (const LossPoint& point : eval) {
      svg += fmt::format("<circle class=\"eval\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n",
                         x_of(static_cast<double>(point.step)), y_of(point.loss), kEvalColour);
    }
  }

  // Legend, top right inside the plot.
  const double legend_width = has_secondary ? 190 : 104;
  const double legend_x = left + plot_width - legend_width - 6;
  double legend_y = top + 16;
  auto legend_entry = [&](const char* label, const char* colour, bool marker) {
    std::string entry = fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>",
        legend_x, legend_y, legend_x + 24, colour);
    if (marker) {
      entry += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>", legend_x + 12, legend_y,
                           colour);
    }
    entry += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", legend_x + 30, legend_y + 4, label);
    legend_y += 18;
    return entry;
  };
  const int entries = 1 + (eval.empty() ? 0 : 1) + (secondary.empty() ? 0 : 1) + (secondary_eval.empty() ? 0 : 1);
  svg += fmt::format("<g class=\"legend\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.0f}\" height=\"{}\" "
                     "fill=\"white\" stroke=\"#c0c0c0\"/>\n",
                     legend_x - 6, top + 5, legend_width, 4 + 18 * entries);
  svg += legend_entry("train loss", kTrainColour, false);
  if (!eval.empty()) svg += legend_entry("eval loss", kEvalColour, true);
  const std::string label = escape_xml(options.secondary_label.empty() ? "secondary" : options.secondary_label);
  if (!secondary.empty()) svg += legend_entry((label + " (right)").c_str(), kSecondaryColour, false);
  if (!secondary_eval.empty()) svg += legend_entry(("eval " + label + " (right)").c_str(), kSecondaryColour, true);
  svg += "</g>\n</svg>\n";
  return svg;
}

void write_loss_svg(const fs::path& path, const std::vector<LossPoint>& train, const std::vector<LossPoint>& eval,
                    const LossPlotOptions& options) {
  write_loss_plot(path, LossCurves{train, eval, {}, {}}, options);
}

void write_loss_plot(const fs::path& path, const LossCurves& curves, const LossPlotOptions& options) {
  const std::string svg = render_loss_plot(curves, options);
  const fs::path temporary = path.string() + fmt::format(".tmp-{}", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << svg;
    out.flush();
    if (!out) throw Error(fmt::format("cannot write '{}': {}", temporary.string(), std::strerror(errno)));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    const std::string reason = error.message();
    fs::remove(temporary, error);
    throw Error(fmt::format("cannot replace '{}': {}", path.string(), reason));
  }
}

}  // namespace tune
