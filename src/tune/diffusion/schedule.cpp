// Beta schedules and respacing; all arithmetic in double, as the reference keeps it in float64.
#include "tune/diffusion/schedule.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace tune::diffusion {

std::vector<double> named_beta_schedule(const std::string& name, int64_t num_steps) {
  if (num_steps < 1) {
    throw UsageError(fmt::format("diffusion: the number of diffusion steps must be at least 1, got {}", num_steps));
  }
  if (name == "linear") {
    const double scale = 1000.0 / static_cast<double>(num_steps);
    const double start = scale * 0.0001;
    const double end = scale * 0.02;
    std::vector<double> betas(num_steps);
    // numpy.linspace: start + i * step, with the last point exactly `end`
    const double step = num_steps > 1 ? (end - start) / static_cast<double>(num_steps - 1) : 0.0;
    for (int64_t i = 0; i < num_steps; ++i) betas[i] = start + static_cast<double>(i) * step;
    if (num_steps > 1) betas.back() = end;
    if (betas.back() > 1.0) {
      throw UsageError(fmt::format("diffusion: the linear schedule with {} steps reaches beta {} > 1; use at least "
                                   "20 steps",
                                   num_steps, betas.back()));
    }
    return betas;
  }
  if (name == "squaredcos_cap_v2") {
    return betas_for_alpha_bar(num_steps, [](double s) {
      const double c = std::cos((s + 0.008) / 1.008 * M_PI / 2.0);
      return c * c;
    });
  }
  throw UsageError(fmt::format("diffusion: unknown noise schedule '{}'; expected 'linear' or 'squaredcos_cap_v2'", name));
}

std::vector<double> betas_for_alpha_bar(int64_t num_steps, const std::function<double(double)>& alpha_bar,
                                        double max_beta) {
  std::vector<double> betas(num_steps);
  const double n = static_cast<double>(num_steps);
  for (int64_t i = 0; i < num_steps; ++i) {
    const double t1 = static_cast<double>(i) / n;
    const double t2 = static_cast<double>(i + 1) / n;
    betas[i] = std::min(1.0 - alpha_bar(t2) / alpha_bar(t1), max_beta);
  }
  return betas;
}

std::vector<int64_t> space_timesteps(int64_t num_timesteps, const std::vector<int64_t>& section_counts) {
  if (num_timesteps < 1 || section_counts.empty()) {
    throw UsageError(fmt::format("diffusion: cannot respace {} timesteps into sections [{}]", num_timesteps,
                                 fmt::join(section_counts, ",")));
  }
  const int64_t sections = static_cast<int64_t>(section_counts.size());
  const int64_t size_per = num_timesteps / sections;
  const int64_t extra = num_timesteps % sections;
  std::set<int64_t> kept;
  int64_t start = 0;
  for (int64_t i = 0; i < sections; ++i) {
    const int64_t size = size_per + (i < extra ? 1 : 0);
    const int64_t count = section_counts[i];
    if (count < 1 || size < count) {
      throw UsageError(fmt::format("diffusion: timestep_respacing: cannot divide a section of {} steps into {} "
                                   "(sections [{}] over {} steps)",
                                   size, count, fmt::join(section_counts, ","), num_timesteps));
    }
    const double stride = count <= 1 ? 1.0 : static_cast<double>(size - 1) / static_cast<double>(count - 1);
    double position = 0.0;  // accumulated, not multiplied, so rounding ties fall where the reference's do
    for (int64_t k = 0; k < count; ++k) {
      kept.insert(start + static_cast<int64_t>(std::nearbyint(position)));  // ties to even, as Python's round()
      position += stride;
    }
    start += size;
  }
  return {kept.begin(), kept.end()};
}

std::vector<int64_t> space_timesteps(int64_t num_timesteps, const std::string& section_counts) {
  if (section_counts.empty()) return space_timesteps(num_timesteps, std::vector<int64_t>{num_timesteps});
  const auto parse = [&](const std::string& text) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      throw UsageError(fmt::format("diffusion: timestep_respacing '{}': '{}' is not an integer; expected \"ddimN\", "
                                   "\"N\" or comma-separated counts such as \"10,15,20\"",
                                   section_counts, text));
    }
    return value;
  };
  if (section_counts.rfind("ddim", 0) == 0) {
    const int64_t desired = parse(section_counts.substr(4));
    for (int64_t stride = 1; stride < num_timesteps; ++stride) {
      if ((num_timesteps + stride - 1) / stride == desired) {
        std::vector<int64_t> kept;
        for (int64_t t = 0; t < num_timesteps; t += stride) kept.push_back(t);
        return kept;
      }
    }
    throw UsageError(fmt::format("diffusion: timestep_respacing '{}': cannot take exactly {} of {} steps with an "
                                 "integer stride; pick a count such as ddim{} or ddim{}",
                                 section_counts, desired, num_timesteps, num_timesteps / 20, num_timesteps / 4));
  }
  std::vector<int64_t> counts;
  size_t begin = 0;
  while (true) {
    const size_t comma = section_counts.find(',', begin);
    counts.push_back(parse(section_counts.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return space_timesteps(num_timesteps, counts);
}

std::vector<double> respaced_betas(const std::vector<double>& base_betas, const std::vector<int64_t>& use_timesteps) {
  std::vector<double> betas;
  betas.reserve(use_timesteps.size());
  double alpha_bar = 1.0;  // running product over the base process
  double last_kept = 1.0;
  size_t next = 0;
  for (size_t i = 0; i < base_betas.size() && next < use_timesteps.size(); ++i) {
    alpha_bar *= 1.0 - base_betas[i];
    if (static_cast<int64_t>(i) == use_timesteps[next]) {
      betas.push_back(1.0 - alpha_bar / last_kept);
      last_kept = alpha_bar;
      ++next;
    }
  }
  if (next != use_timesteps.size()) {
    throw UsageError(fmt::format("diffusion: respacing keeps timesteps that are not ascending or not below {}",
                                 base_betas.size()));
  }
  return betas;
}

}  // namespace tune::diffusion
