// The timesteps Latte's official sample.py samples at: create_diffusion(str(N)) for DDPM and DDIM alike, i.e.
// guided-diffusion's space_timesteps(1000, [N]): one section strided by (1000 - 1) / (N - 1), each position
// accumulated in float64 and rounded half-to-even by Python's round(). The literal sequences below were printed by
// this transcription of guided-diffusion/respace.py, run in Python (not derived from tune's C++):
//
//   def space(n, counts):
//       size_per, extra, start, out = n // len(counts), n % len(counts), 0, []
//       for i, c in enumerate(counts):
//           size = size_per + (1 if i < extra else 0)
//           frac, cur = (1 if c <= 1 else (size - 1) / (c - 1)), 0.0
//           for _ in range(c):
//               out.append(start + round(cur)); cur += frac
//           start += size
//       return sorted(set(out))
#include "tune/diffusion/sampler.h"
#include "tune/diffusion/schedule.h"

#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include <numeric>

using namespace tune::diffusion;

namespace {

const std::vector<int64_t> kSpaced50 = {0,   20,  41,  61,  82,  102, 122, 143, 163, 183, 204, 224, 245,
                                        265, 285, 306, 326, 347, 367, 387, 408, 428, 449, 469, 489, 510,
                                        530, 550, 571, 591, 612, 632, 652, 673, 693, 714, 734, 754, 775,
                                        795, 816, 836, 856, 877, 897, 917, 938, 958, 979, 999};
// 166.5 and 832.5 round to even (166, 832); 499.5 rounds up to even (500).
const std::vector<int64_t> kSpaced7 = {0, 166, 333, 500, 666, 832, 999};
const std::vector<int64_t> kSpaced250 = {
    0,   4,   8,   12,  16,  20,  24,  28,  32,  36,  40,  44,  48,  52,  56,  60,  64,  68,  72,  76,  80,  84,
    88,  92,  96,  100, 104, 108, 112, 116, 120, 124, 128, 132, 136, 140, 144, 148, 152, 156, 160, 164, 169, 173,
    177, 181, 185, 189, 193, 197, 201, 205, 209, 213, 217, 221, 225, 229, 233, 237, 241, 245, 249, 253, 257, 261,
    265, 269, 273, 277, 281, 285, 289, 293, 297, 301, 305, 309, 313, 317, 321, 325, 329, 333, 337, 341, 345, 349,
    353, 357, 361, 365, 369, 373, 377, 381, 385, 389, 393, 397, 401, 405, 409, 413, 417, 421, 425, 429, 433, 437,
    441, 445, 449, 453, 457, 461, 465, 469, 473, 477, 481, 485, 489, 493, 497, 502, 506, 510, 514, 518, 522, 526,
    530, 534, 538, 542, 546, 550, 554, 558, 562, 566, 570, 574, 578, 582, 586, 590, 594, 598, 602, 606, 610, 614,
    618, 622, 626, 630, 634, 638, 642, 646, 650, 654, 658, 662, 666, 670, 674, 678, 682, 686, 690, 694, 698, 702,
    706, 710, 714, 718, 722, 726, 730, 734, 738, 742, 746, 750, 754, 758, 762, 766, 770, 774, 778, 782, 786, 790,
    794, 798, 802, 806, 810, 814, 818, 822, 826, 830, 835, 839, 843, 847, 851, 855, 859, 863, 867, 871, 875, 879,
    883, 887, 891, 895, 899, 903, 907, 911, 915, 919, 923, 927, 931, 935, 939, 943, 947, 951, 955, 959, 963, 967,
    971, 975, 979, 983, 987, 991, 995, 999};

GaussianDiffusion official(int64_t steps) {
  DiffusionOptions options;
  options.timestep_respacing = std::to_string(steps);  // what Latte's sample.py passes to create_diffusion
  return create_diffusion(options);
}

}  // namespace

TEST_CASE("official spacing: space_timesteps(1000, N) matches guided-diffusion for N = 50, 7, 250, 1000") {
  CHECK(space_timesteps(1000, "50") == kSpaced50);
  CHECK(space_timesteps(1000, "7") == kSpaced7);
  CHECK(space_timesteps(1000, "250") == kSpaced250);
  std::vector<int64_t> every(1000);
  std::iota(every.begin(), every.end(), int64_t{0});
  CHECK(space_timesteps(1000, "1000") == every);
  CHECK(space_timesteps(1000, "1") == std::vector<int64_t>{0});
  CHECK(space_timesteps(1000, "3") == std::vector<int64_t>{0, 500, 999});
  // Unlike "ddimN", every N up to the process length is possible: 7 and 999 have no integer stride.
  CHECK(space_timesteps(1000, "999").size() == 999);
}

TEST_CASE("official spacing: DDPM and DDIM loops ask the model at the official timesteps, last to first") {
  const auto diffusion = official(7);
  CHECK(diffusion.timestep_map() == kSpaced7);
  std::vector<int64_t> expected(kSpaced7.rbegin(), kSpaced7.rend());
  for (const std::string kind : {"ddpm", "ddim"}) {
    INFO(kind);
    std::vector<int64_t> model_saw, progress_saw, done_seen;
    const ModelFn model = [&](const torch::Tensor& x, const torch::Tensor& t) {
      model_saw.push_back(t[0].item<int64_t>());
      return torch::cat({0.1 * x, torch::zeros_like(x)}, 2);  // eps and (learned-range) variance values
    };
    SamplerOptions options;
    options.on_step = [&](int64_t done, int64_t total, int64_t timestep) {
      CHECK(total == 7);
      done_seen.push_back(done);
      progress_saw.push_back(timestep);
    };
    auto generator = at::detail::createCPUGenerator(7);
    const auto x_T = torch::randn({1, 2, 1, 2, 2}, torch::kDouble);
    const auto sample = kind == "ddpm" ? p_sample_loop(diffusion, model, x_T, generator, options)
                                       : ddim_sample_loop(diffusion, model, x_T, generator, options);
    CHECK(torch::isfinite(sample).all().item<bool>());
    CHECK(model_saw == expected);
    CHECK(progress_saw == expected);
    CHECK(done_seen == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7});
  }
}
