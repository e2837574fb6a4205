// loss.svg: well-formed SVG, one polyline vertex per finite point, NaN/inf/empty input handled, atomic write.
#include "tune/core/loss_plot.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <regex>
#include <sstream>

#include "scratch_dir.h"
#include "tune/core/error.h"

using tune::LossPoint;
using tune::render_loss_svg;
using tune::test::read_text;
using tune::test::ScratchDir;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Minimal well-formedness: every element is closed in order, with one root element named svg.
bool tags_balanced(const std::string& svg) {
  std::vector<std::string> open;
  size_t roots = 0;
  for (size_t position = svg.find('<'); position != std::string::npos; position = svg.find('<', position + 1)) {
    const size_t end = svg.find('>', position);
    if (end == std::string::npos) return false;
    const std::string tag = svg.substr(position + 1, end - position - 1);
    if (tag.empty()) return false;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /\n"));
    if (open.empty()) {
      ++roots;
      if (name != "svg") return false;
    }
    if (tag.back() != '/') open.push_back(name);
  }
  return open.empty() && roots == 1;
}

struct Vertex {
  double x, y;
};

// Vertices of <polyline class="NAME" ... points="...">; empty when there is no such polyline.
std::vector<Vertex> polyline_points(const std::string& svg, const std::string& name) {
  const std::regex pattern("<polyline class=\"" + name + "\"[^>]*points=\"([^\"]*)\"");
  std::smatch match;
  std::vector<Vertex> vertices;
  if (!std::regex_search(svg, match, pattern)) return vertices;
  std::istringstream in(match[1].str());
  for (std::string pair; in >> pair;) {
    const size_t comma = pair.find(',');
    vertices.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return vertices;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t found = 0;
  for (size_t position = text.find(needle); position != std::string::npos; position = text.find(needle, position + 1)) {
    ++found;
  }
  return found;
}

}  // namespace

TEST_CASE("Loss SVG has a train polyline per point, eval markers and line, legend, title and ticks", "[run][plot]") {
  const std::vector<LossPoint> train = {{0, 3.0}, {25, 2.2}, {50, 1.8}, {75, 1.3}, {100, 1.0}};
  const std::vector<LossPoint> eval = {{50, 2.0}, {100, 1.4}};
  tune::LossPlotOptions options;
  options.title = "sft-tiny <loss> & more";
  const std::string svg = render_loss_svg(train, eval, options);

  REQUIRE(svg.rfind("<svg", 0) == 0);
  CHECK(tags_balanced(svg));
  const auto train_vertices = polyline_points(svg, "train");
  REQUIRE(train_vertices.size() == 5);
  REQUIRE(polyline_points(svg, "eval").size() == 2);
  CHECK(count(svg, "<circle class=\"eval\"") == 2);
  CHECK_THAT(svg, Catch::Contains("train loss") && Catch::Contains("eval loss"));
  CHECK_THAT(svg, Catch::Contains("sft-tiny &lt;loss&gt; &amp; more"));
  // Nice ticks over steps 0..100 and losses 1..3.
  CHECK_THAT(svg, Catch::Contains(">0<") && Catch::Contains(">100<") && Catch::Contains(">1.5<") &&
                      Catch::Contains(">3<"));
  // Steps go right, falling loss goes down (larger SVG y), and everything stays on the canvas.
  for (size_t i = 1; i < train_vertices.size(); ++i) {
    CHECK(train_vertices[i].x > train_vertices[i - 1].x);
    CHECK(train_vertices[i].y > train_vertices[i - 1].y);
  }
  for (const Vertex& vertex : train_vertices) {
    CHECK(vertex.x >= 0);
    CHECK(vertex.x <= options.width);
    CHECK(vertex.y >= 0);
    CHECK(vertex.y <= options.height);
  }
}

TEST_CASE("Loss SVG skips NaN and inf losses", "[run][plot]") {
  const std::vector<LossPoint> train = {{1, 2.0}, {2, kNaN}, {3, 1.5}, {4, kInf}, {5, -kInf}, {6, 1.0}};
  const std::vector<LossPoint> eval = {{3, kNaN}, {6, 1.2}};
  const std::string svg = render_loss_svg(train, eval);
  CHECK(tags_balanced(svg));
  CHECK(polyline_points(svg, "train").size() == 3);
  CHECK(polyline_points(svg, "eval").size() == 1);
  CHECK_THAT(svg, !Catch::Contains("nan") && !Catch::Contains("inf"));
}

TEST_CASE("Loss SVG with no points or one point is still a valid drawing", "[run][plot]") {
  const std::string empty = render_loss_svg({}, {});
  CHECK(empty.rfind("<svg", 0) == 0);
  CHECK(tags_balanced(empty));
  CHECK(count(empty, "<polyline") == 0);
  CHECK_THAT(empty, Catch::Contains("no data yet"));

  const std::string only_nan = render_loss_svg({{1, kNaN}}, {{1, kNaN}});
  CHECK(tags_balanced(only_nan));
  CHECK(count(only_nan, "<polyline") == 0);

  const std::string single = render_loss_svg({{7, 2.5}}, {});
  CHECK(tags_balanced(single));
  const auto vertices = polyline_points(single, "train");
  REQUIRE(vertices.size() == 1);
  CHECK(std::isfinite(vertices[0].x));
  CHECK(std::isfinite(vertices[0].y));
  CHECK(count(single, "<circle class=\"train\"") == 1);  // a lone vertex draws no line
  CHECK_THAT(single, !Catch::Contains("nan") && !Catch::Contains("inf"));
}

TEST_CASE("A long loss curve is thinned but keeps its spikes", "[run][plot]") {
  std::vector<LossPoint> train;
  for (int step = 1; step <= 20000; ++step) train.push_back({step, 2.0 + 0.1 * std::sin(step * 0.01)});
  train[12345].loss = 50.0;  // a spike that a naive stride would drop
  tune::LossPlotOptions options;
  options.max_points = 400;
  const std::string svg = render_loss_svg(train, {}, options);
  const auto vertices = polyline_points(svg, "train");
  CHECK(vertices.size() <= 400);
  CHECK(vertices.size() >= 200);
  double top = 1e9;
  for (const Vertex& vertex : vertices) top = std::min(top, vertex.y);
  // The spike is the highest loss, so it sits at the top of the y axis range: it must be the smallest y.
  const auto spike_only = polyline_points(render_loss_svg({{1, 2.0}, {12346, 50.0}, {20000, 2.0}}, {}, options), "train");
  CHECK(top == Approx(spike_only[1].y).margin(0.11));
}

TEST_CASE("Loss SVG draws a secondary metric on its own right-hand axis", "[run][plot]") {
  tune::LossCurves curves;
  curves.train = {{1, 0.69}, {2, 0.60}, {3, 0.50}};
  curves.secondary = {{1, 0.0}, {2, 4.0}, {3, 8.0}};  // a reward margin, on a scale the loss never reaches
  curves.secondary_eval = {{3, 6.0}};
  tune::LossPlotOptions options;
  options.secondary_label = "reward margin";
  const std::string svg = render_loss_plot(curves, options);
  CHECK(tags_balanced(svg));
  const auto loss = polyline_points(svg, "train");
  const auto margin = polyline_points(svg, "secondary");
  REQUIRE(loss.size() == 3);
  REQUIRE(margin.size() == 3);
  // Each curve spans its own axis: the rising margin goes up the plot while the falling loss goes down, and both
  // reach near the plot's top and bottom edges (the axes are scaled separately).
  CHECK(margin[2].y < margin[0].y);
  CHECK(loss[2].y > loss[0].y);
  CHECK(std::abs((margin[0].y - margin[2].y) - (loss[2].y - loss[0].y)) < 0.5 * (loss[2].y - loss[0].y));
  CHECK(count(svg, "<circle class=\"secondary-eval\"") == 1);
  CHECK_THAT(svg, Catch::Contains("reward margin (right)") && Catch::Contains("eval reward margin (right)") &&
                      Catch::Contains(">8<"));
  // Without secondary points the plot is the plain loss plot.
  CHECK(tune::render_loss_plot(tune::LossCurves{curves.train, {}, {}, {}}, options) == render_loss_svg(curves.train, {}));
}

TEST_CASE("loss_curves_from_metrics pulls loss and eval_loss and skips nulls", "[run][plot]") {
  const std::vector<nlohmann::json> records = {
      {{"step", 1}, {"loss", 2.0}},
      {{"step", 2}, {"loss", nullptr}},
      {{"step", 3}, {"loss", 1.5}, {"eval_loss", 1.7}},
      {{"loss", 9.0}},  // no step: ignored
  };
  const auto curves = tune::loss_curves_from_metrics(records);
  REQUIRE(curves.train.size() == 2);
  CHECK(curves.train[1].step == 3);
  CHECK(curves.train[1].loss == 1.5);
  REQUIRE(curves.eval.size() == 1);
  CHECK(curves.eval[0].step == 3);
  CHECK(curves.eval[0].loss == 1.7);
  CHECK(curves.secondary.empty());
  const std::vector<nlohmann::json> dpo = {{{"step", 1}, {"loss", 0.69}, {"rewards/margins", 0.0}},
                                           {{"step", 2}, {"loss", 0.5}, {"rewards/margins", 0.4},
                                            {"eval_loss", 0.6}, {"eval_rewards/margins", 0.3}}};
  const auto with_margin = tune::loss_curves_from_metrics(dpo, "rewards/margins");
  REQUIRE(with_margin.secondary.size() == 2);
  CHECK(with_margin.secondary[1].loss == 0.4);
  REQUIRE(with_margin.secondary_eval.size() == 1);
  CHECK(with_margin.secondary_eval[0].loss == 0.3);
}

TEST_CASE("write_loss_svg replaces the file atomically and leaves no temporary behind", "[run][plot]") {
  ScratchDir dir;
  const auto path = dir.path() / "loss.svg";
  tune::write_loss_svg(path, {{1, 2.0}, {2, 1.0}}, {});
  CHECK(polyline_points(read_text(path), "train").size() == 2);
  tune::write_loss_svg(path, {{1, 2.0}, {2, 1.0}, {3, 0.5}}, {{3, 0.7}});
  const std::string svg = read_text(path);
  CHECK(tags_balanced(svg));
  CHECK(polyline_points(svg, "train").size() == 3);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
  CHECK_THROWS_AS(tune::write_loss_svg(dir.path() / "missing" / "loss.svg", {}, {}), tune::Error);
}
