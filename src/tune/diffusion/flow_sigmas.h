// The float64 arithmetic of flow-matching sigmas that both the samplers' schedules (diffusers' set_timesteps) and
// the training objective (Sana's trainer) take from numpy: numpy.linspace and the flow shift, in numpy's order of
// operations, so that values truncated to integer timesteps (trunc(sigma * T)) truncate as they do there.
#pragma once

#include <cstdint>
#include <vector>

namespace tune::diffusion {

// numpy.linspace(start, stop, num) in float64: i * step + start with step = (stop - start) / (num - 1), the last
// exactly `stop`; [start] for num 1.
inline std::vector<double> numpy_linspace(double start, double stop, int64_t num) {
  if (num == 1) return {start};
  const double step = (stop - start) / static_cast<double>(num - 1);
  std::vector<double> values;
  values.reserve(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) {
    const double scaled = static_cast<double>(i) * step;  // two roundings, as numpy's y *= step; y += start
    values.push_back(scaled + start);
  }
  values.back() = stop;
  return values;
}

// The flow shift sigma' = (s sigma) / (1 + (s - 1) sigma): s > 1 moves sigmas toward 1 (noise), fixing 0 and 1.
inline double shift_flow_sigma(double sigma, double shift) { return shift * sigma / (1.0 + (shift - 1.0) * sigma); }

}  // namespace tune::diffusion
