// Measured choice of the CPU kernels for a run's low-precision work (see cpu_kernel_choice.h).
#include "tune/recipes/cpu_kernel_choice.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tune/core/cpu_gemm_mode.h"
#include "tune/core/log.h"
#include "tune/nn/attention_core.h"
#include "tune/nn/attention_mask.h"
#include "tune/precision/cpu_gemm.h"
#include "tune/precision/nf4.h"
#include "tune/precision/nf4_cpu_product.h"

namespace tune::recipes {
namespace {

constexpr int64_t kMaxDimension = 2048;
constexpr double kMaxProductFlops = double(int64_t{1} << 30);
constexpr int64_t kMinRows = 128;  // tune's kernels convert the weight once from 64 rows up: keep that path

constexpr const char* kNative = "libtorch";
constexpr const char* kFp32Accumulate = "fp32-accumulate";
constexpr const char* kFused = "fused";
constexpr const char* kPlain = "plain";
constexpr const char* kRecomputing = "recomputing";
// The recomputing core's chunk minimums timed, the default first (core/cpu_gemm_mode.h).
constexpr int64_t kChunkMinimums[] = {512, 256, 128};

const char* dtype_name(c10::ScalarType dtype) { return dtype == c10::kHalf ? "fp16" : "bf16"; }

std::string shapes_text(const std::vector<ProjectionShape>& shapes) {
  std::string text;
  for (const ProjectionShape& s : shapes) {
    text += fmt::format("{}{}x{}x{}", text.empty() ? "" : " ", s.rows, s.inner, s.columns);
  }
  return text;
}

double product_flops(const ProjectionShape& s) { return 2.0 * double(s.rows) * double(s.inner) * double(s.columns); }

// The operands of one projection: input x [rows, inner], weight w [columns, inner], output gradient g [rows,
// columns], laid out as linear's forward and backward hand them to mm.
struct ProjectionOperands {
  torch::Tensor x, w, g;
};

// Every product of the workload's projections with one kernel: forward x w^T, and for training the input gradient
// g w and the weight gradient g^T x.
TimedCandidate projection_candidate(const std::string& name, std::vector<ProjectionOperands> operands, bool training,
                                    torch::Tensor (*mm)(const at::Tensor&, const at::Tensor&)) {
  return {name, [operands = std::move(operands), training, mm] {
            for (const ProjectionOperands& o : operands) {
              mm(o.x, o.w.t());
              if (!training) continue;
              mm(o.g, o.w);
              mm(o.g.t(), o.x);
            }
          }};
}

double total_flops(const std::vector<ProjectionShape>& shapes, bool training) {
  double flops = 0.0;
  for (const ProjectionShape& s : shapes) flops += product_flops(s) * (training ? 3.0 : 1.0);
  return flops;
}

std::string seconds_of(const MeasuredChoice& choice, const std::string& name, double flops) {
  for (const CandidateTiming& t : choice.timings) {
    if (t.name != name) continue;
    if (flops > 0.0) return fmt::format("{:.0f} GFLOP/s", flops / t.seconds / 1e9);
    return fmt::format("{:.2f} ms", t.seconds * 1e3);
  }
  return "?";
}

std::string origin(const MeasuredChoice& choice, const ChoiceCache& cache) {
  if (choice.from_cache) return fmt::format("measured by an earlier run: {}", cache.file().string());
  if (cache.file().empty()) return "measured now";
  return fmt::format("measured now, saved in {}", cache.file().string());
}

void choose_products(const CpuWorkload& workload, const ChoiceCache& cache, const SecondsClock& clock) {
  const std::vector<ProjectionShape> shapes = measured_projections(workload.projections);
  if (shapes.empty()) return;
  const std::string key = fmt::format("{} | matmul {} {} | {}", cpu_kernel_context(), dtype_name(workload.dtype),
                                      workload.training ? "forward+backward" : "forward", shapes_text(shapes));
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(workload.dtype);
  std::vector<ProjectionOperands> operands;
  for (const ProjectionShape& s : shapes) {
    operands.push_back({torch::randn({s.rows, s.inner}, options), torch::randn({s.columns, s.inner}, options) * 0.05,
                        torch::randn({s.rows, s.columns}, options)});
  }
  const std::vector<TimedCandidate> candidates = {
      projection_candidate(kNative, operands, workload.training, precision::libtorch_mm),
      projection_candidate(kFp32Accumulate, operands, workload.training, precision::fp32_accumulate_mm)};
  const MeasuredChoice choice = choose_fastest(key, candidates, cache, clock);
  const bool native = choice.chosen == kNative;
  set_measured_cpu_gemm_mode(workload.dtype, native ? CpuGemmMode::native : CpuGemmMode::fp32_accumulate);
  precision::install_cpu_gemm();
  const double flops = total_flops(shapes, workload.training);
  const log::Level level = workload.announce ? log::Level::info : log::Level::debug;
  const std::string chosen = native ? "LibTorch's" : "tune's fp32-accumulate";
  const std::string other = native ? "fp32-accumulate" : "LibTorch";
  log::write(level, fmt::format("CPU kernels: {} matmuls through {} kernels, {} against {}'s {} ({})",
                                dtype_name(workload.dtype), chosen, seconds_of(choice, choice.chosen, flops), other,
                                seconds_of(choice, native ? kFp32Accumulate : kNative, flops), origin(choice, cache)));
  log::debug("CPU kernels: matmul shapes timed [rows x inner x columns]{}: {}",
             workload.training ? " (forward, input and weight gradients)" : "", shapes_text(shapes));
}

// QLoRA's NF4 products (nn::nf4_linear's two CPU paths): each candidate runs every shape's forward and, training,
// its input gradient, exactly as the layer would (the weight dequantised to its own dtype, then cast).
void choose_nf4_products(const CpuWorkload& workload, const ChoiceCache& cache, const SecondsClock& clock) {
  const std::vector<ProjectionShape> shapes = measured_projections(workload.nf4_projections);
  if (shapes.empty()) return;
  const bool native = cpu_gemm_mode_for(workload.dtype) == CpuGemmMode::native;
  const std::string key =
      fmt::format("{} | nf4 product {} {} | matmul {} | {}", cpu_kernel_context(), dtype_name(workload.dtype),
                  workload.training ? "forward+input-gradient" : "forward", native ? kNative : kFp32Accumulate,
                  shapes_text(shapes));
  torch::NoGradGuard no_grad;
  struct Operands {
    torch::Tensor x, g;
    precision::Nf4Tensor w;
  };
  std::vector<Operands> operands;
  const auto options = torch::TensorOptions().dtype(workload.dtype);
  for (const ProjectionShape& s : shapes) {
    operands.push_back({torch::randn({s.rows, s.inner}, options), torch::randn({s.rows, s.columns}, options),
                        precision::quantize_nf4((torch::randn({s.columns, s.inner}) * 0.05).to(torch::kBFloat16))});
  }
  const bool training = workload.training;
  const auto dtype = workload.dtype;
  const std::vector<TimedCandidate> candidates = {
      {"dequantize",
       [operands, training, dtype] {
         for (const Operands& o : operands) {
           const torch::Tensor w = precision::dequantize_nf4_on_device(o.w, dtype);
           torch::linear(o.x, w);
           if (training) torch::matmul(o.g, w);
         }
       }},
      {"fused", [operands, training] {
         for (const Operands& o : operands) {
           precision::nf4_cpu_linear(o.x, o.w);
           if (training) precision::nf4_cpu_linear_input_grad(o.g, o.w);
         }
       }}};
  const MeasuredChoice choice = choose_fastest(key, candidates, cache, clock);
  const bool fused = choice.chosen == "fused";
  set_measured_nf4_cpu_fused_product(fused);
  const double flops = total_flops(shapes, false) * (training ? 2.0 : 1.0);
  const log::Level level = workload.announce ? log::Level::info : log::Level::debug;
  log::write(level, fmt::format("CPU kernels: NF4 products {}, {} against {}'s {} ({})",
                                fused ? "dequantised in fp32 slices for sgemm" : "dequantised whole, then multiplied",
                                seconds_of(choice, choice.chosen, flops), fused ? "dequantise-then-multiply" : "the fp32 slices",
                                seconds_of(choice, fused ? "dequantize" : "fused", flops), origin(choice, cache)));
}

// Inputs of one attention core; the candidate runs forward (and backward when training) on fresh leaves each time.
// Laid out [batch_heads, 1, T, D]: each (sequence, head) pair an entry of the batch, so that the recomputing core
// splits them into chunks as it splits a run's sequences (nn::recompute_chunk_batch).
struct AttentionInputs {
  AttentionShape shape;
  torch::Tensor q, k, v, mask;
};

TimedCandidate attention_candidate(const std::string& name, std::vector<AttentionInputs> inputs, bool training,
                                   nn::AttentionCoreForm form) {
  return {name, [inputs = std::move(inputs), training, form] {
            torch::AutoGradMode grad(training);
            for (const AttentionInputs& in : inputs) {
              const torch::Tensor q = training ? in.q.detach().requires_grad_() : in.q;
              const torch::Tensor k = training ? in.k.detach().requires_grad_() : in.k;
              const torch::Tensor v = training ? in.v.detach().requires_grad_() : in.v;
              const double scale = 1.0 / std::sqrt(double(in.shape.head_dim));
              const torch::Tensor out =
                  form == nn::AttentionCoreForm::fused
                      ? nn::attention_core_fused(q, k, v, in.mask, scale, in.shape.causal)
                  : form == nn::AttentionCoreForm::recomputing
                      ? nn::attention_core_recomputing_probabilities(q, k, v, in.mask, scale)
                      : nn::attention_core(q, k, v, in.mask, scale);
              if (training) out.backward(torch::ones_like(out));
            }
          }};
}

// tune's core in the form a run takes in its plainly run blocks (nn::attention_core_form): recomputing its
// probabilities in backward when training, plain for a forward alone.
nn::AttentionCoreForm tune_core_form(bool training) {
  return training ? nn::AttentionCoreForm::recomputing : nn::AttentionCoreForm::plain;
}

std::string attention_text(const std::vector<AttentionShape>& shapes) {
  std::string text;
  for (const AttentionShape& s : shapes) {
    text += fmt::format("{}{}x{}x{}x{}{}", text.empty() ? "" : " ", s.batch_heads, s.queries, s.keys, s.head_dim,
                        s.causal ? " causal" : "");
  }
  return text;
}

// The workload's attention cores as measured (measured_attention), with random inputs for each; `causal_only`: the
// causal ones alone.
struct AttentionWork {
  std::vector<AttentionShape> shapes;
  std::vector<AttentionInputs> inputs;
};

AttentionWork attention_work(const CpuWorkload& workload, bool causal_only) {
  AttentionWork work;
  const auto options = torch::TensorOptions().dtype(workload.dtype);
  for (const AttentionShape& requested : workload.attentions) {
    if (causal_only && !requested.causal) continue;
    const AttentionShape s = measured_attention(requested);
    work.shapes.push_back(s);
    work.inputs.push_back({s, torch::randn({s.batch_heads, 1, s.queries, s.head_dim}, options),
                           torch::randn({s.batch_heads, 1, s.keys, s.head_dim}, options),
                           torch::randn({s.batch_heads, 1, s.keys, s.head_dim}, options),
                           s.causal ? nn::make_causal_mask(s.queries, 0, {}, torch::kCPU) : torch::Tensor()});
  }
  return work;
}

void choose_attention(const CpuWorkload& workload, const ChoiceCache& cache, const SecondsClock& clock) {
  const auto [shapes, inputs] = attention_work(workload, /*causal_only=*/false);
  // tune's core's products take the product choice just made, so it is part of the key.
  const bool native_products = cpu_gemm_mode_for(workload.dtype) == CpuGemmMode::native;
  // Training times tune's recomputing core (the candidate's name says so, and so does the key: answers cached for
  // the plain core, which kept its probabilities and had to win by 25%, are not this question's). Neither candidate
  // keeps [T, S] probabilities then, so plain speed decides.
  const std::string tune_core = workload.training ? kRecomputing : kPlain;
  const std::string key = fmt::format("{} | attention {} {} | {} | matmul {} | {}", cpu_kernel_context(),
                                      dtype_name(workload.dtype), workload.training ? "forward+backward" : "forward",
                                      attention_text(shapes), native_products ? kNative : kFp32Accumulate, tune_core);
  const std::vector<TimedCandidate> candidates = {
      attention_candidate(kFused, inputs, workload.training, nn::AttentionCoreForm::fused),
      attention_candidate(tune_core, inputs, workload.training, tune_core_form(workload.training))};
  const MeasuredChoice choice = choose_fastest(key, candidates, cache, clock);
  const bool fused = choice.chosen == kFused;
  set_measured_cpu_fused_attention(workload.dtype, fused);
  const log::Level level = workload.announce ? log::Level::info : log::Level::debug;
  const std::string tune_core_text = workload.training ? "tune's core (recomputing its probabilities)" : "tune's core";
  log::write(level, fmt::format("CPU kernels: {} attention core {}, {} against {} ({})", dtype_name(workload.dtype),
                                fused ? "LibTorch's fused kernel" : tune_core_text, seconds_of(choice, choice.chosen, 0.0),
                                seconds_of(choice, fused ? tune_core : kFused, 0.0), origin(choice, cache)));
  log::debug("CPU kernels: attention shapes timed [batch x heads, queries, keys, head dim]: {}",
             attention_text(shapes));
}

// Inside a checkpointed block's recompute (nn::attention_core_form's `in_block_recompute`): tune's core recomputing
// its probabilities in backward (the default) against the plain core keeping them, forward and backward on the
// run's shapes. The plain core keeps 6 bytes a score more through the block's backward, so it must win by more than
// 20%: timed alone it came out 5% ahead of the recomputing core on Latte-S/2's shapes on the AVX-512 EPYC, yet in
// the step (where its fp32 probabilities are fresh pages and cache misses) the recomputing core made the step 5%
// faster; on the AMX Xeon six fresh two-thread runs timed it 9-24% ahead (a 10% margin flipped the choice run to
// run, and with it 31 MiB of Latte `full`'s peak: 0.62x the official code's RSS instead of 0.60x); on the 8-layer
// Llama benchmark's causal 512-token shapes the plain core is 20-25% faster, a real difference.
void choose_recompute_core(const CpuWorkload& workload, const ChoiceCache& cache, const SecondsClock& clock) {
  const auto [shapes, inputs] = attention_work(workload, /*causal_only=*/false);
  const bool native_products = cpu_gemm_mode_for(workload.dtype) == CpuGemmMode::native;
  const std::string key = fmt::format("{} | attention {} in a block recompute forward+backward | {} | matmul {} | within 20%",
                                      cpu_kernel_context(), dtype_name(workload.dtype), attention_text(shapes),
                                      native_products ? kNative : kFp32Accumulate);
  const std::vector<TimedCandidate> candidates = {
      attention_candidate(kRecomputing, inputs, /*training=*/true, nn::AttentionCoreForm::recomputing),
      attention_candidate(kPlain, inputs, /*training=*/true, nn::AttentionCoreForm::plain)};
  MeasureOptions within_fifth;
  within_fifth.keep_default_within = 0.20;
  const MeasuredChoice choice = choose_fastest(key, candidates, cache, clock, within_fifth);
  const bool recomputes = choice.chosen == kRecomputing;
  set_measured_recompute_core_recomputes(workload.dtype, recomputes);
  const log::Level level = workload.announce ? log::Level::info : log::Level::debug;
  log::write(level, fmt::format("CPU kernels: {} attention core in checkpointed blocks' recomputes {}, {} against {} ({})",
                                dtype_name(workload.dtype),
                                recomputes ? "recomputing its probabilities" : "keeping its probabilities",
                                seconds_of(choice, choice.chosen, 0.0),
                                seconds_of(choice, recomputes ? kPlain : kRecomputing, 0.0), origin(choice, cache)));
}

// The recomputing core's chunk minimum (nn::recompute_chunk_rows) on the run's causal shapes, forward and backward:
// 512 rows (the default, kept within noise) against smaller chunks, which skip more of the hidden half of [T, T]
// but multiply smaller matrices. Only candidates that change some shape's chunking are timed.
void choose_chunk_rows(const CpuWorkload& workload, const ChoiceCache& cache, const SecondsClock& clock) {
  const auto [shapes, inputs] = attention_work(workload, /*causal_only=*/true);
  int64_t longest = 0;
  for (const AttentionShape& s : shapes) longest = std::max(longest, s.queries);
  std::vector<int64_t> minimums;
  for (const int64_t rows : kChunkMinimums) {
    if (minimums.empty() || rows < longest) minimums.push_back(rows);
  }
  if (minimums.size() < 2) return;
  std::vector<TimedCandidate> candidates;
  for (const int64_t rows : minimums) {
    const TimedCandidate core =
        attention_candidate(kRecomputing, inputs, /*training=*/true, nn::AttentionCoreForm::recomputing);
    candidates.push_back({fmt::format("{}", rows), [rows, run = core.run] {
                            set_measured_attention_chunk_min_rows(rows);
                            run();
                          }});
  }
  const bool native_products = cpu_gemm_mode_for(workload.dtype) == CpuGemmMode::native;
  const std::string key =
      fmt::format("{} | attention chunk rows {} forward+backward | {} | matmul {}", cpu_kernel_context(),
                  dtype_name(workload.dtype), attention_text(shapes), native_products ? kNative : kFp32Accumulate);
  const MeasuredChoice choice = choose_fastest(key, candidates, cache, clock);
  set_measured_attention_chunk_min_rows(std::stoll(choice.chosen));
  std::string others;
  for (const CandidateTiming& t : choice.timings) {
    if (t.name == choice.chosen) continue;
    others += fmt::format("{}{} rows' {:.2f} ms", others.empty() ? "" : ", ", t.name, t.seconds * 1e3);
  }
  const log::Level level = workload.announce ? log::Level::info : log::Level::debug;
  log::write(level, fmt::format("CPU kernels: tune's recomputing attention core in chunks of at least {} query rows, "
                                "{} against {} ({})",
                                choice.chosen, seconds_of(choice, choice.chosen, 0.0), others, origin(choice, cache)));
}

}  // namespace

std::vector<ProjectionShape> measured_projections(const std::vector<ProjectionShape>& shapes) {
  std::vector<ProjectionShape> measured;
  for (ProjectionShape s : shapes) {
    if (s.rows <= 0 || s.inner <= 0 || s.columns <= 0) continue;
    s.inner = std::min(s.inner, kMaxDimension);
    s.columns = std::min(s.columns, kMaxDimension);
    const auto affordable = static_cast<int64_t>(kMaxProductFlops / (2.0 * double(s.inner) * double(s.columns)));
    s.rows = std::min({s.rows, kMaxDimension, std::max(kMinRows, affordable)});
    const bool seen = std::any_of(measured.begin(), measured.end(), [&](const ProjectionShape& m) {
      return m.rows == s.rows && m.inner == s.inner && m.columns == s.columns;
    });
    if (!seen) measured.push_back(s);
  }
  return measured;
}

AttentionShape measured_attention(const AttentionShape& shape) {
  AttentionShape s = shape;
  s.queries = std::clamp<int64_t>(s.queries, 1, kMaxDimension);
  s.keys = std::clamp<int64_t>(s.keys, 1, kMaxDimension);
  if (s.causal) s.keys = s.queries;
  const double per_head = 4.0 * double(s.queries) * double(s.keys) * double(std::max<int64_t>(s.head_dim, 1));
  s.batch_heads = std::clamp<int64_t>(static_cast<int64_t>(kMaxProductFlops / per_head), 1,
                                      std::max<int64_t>(s.batch_heads, 1));
  return s;
}

void choose_cpu_kernels(const CpuWorkload& workload, c10::Device device, const ChoiceCache& cache,
                        const SecondsClock& clock) {
  // Nothing to choose: the replacement kernels as before any measurement (core/cpu_gemm_mode.h's guess), for the
  // odd low-precision product of an fp32 run (a bf16 frozen base).
  if (device.type() != c10::DeviceType::CPU || (workload.dtype != c10::kBFloat16 && workload.dtype != c10::kHalf)) {
    precision::install_cpu_gemm();
    return;
  }
  if (cpu_gemm_mode_forced()) {
    precision::install_cpu_gemm();
    log::info("CPU kernels: {} matrix products as TUNE_CPU_GEMM says ({})", dtype_name(workload.dtype),
              cpu_gemm_mode_for(workload.dtype) == CpuGemmMode::native ? "LibTorch's" : "fp32-accumulate");
  } else {
    choose_products(workload, cache, clock);
  }
  if (!workload.nf4_projections.empty()) {
    if (nf4_cpu_product_forced()) {
      log::info("CPU kernels: NF4 products as TUNE_NF4_CPU says ({})",
                nf4_cpu_fused_product() ? "fp32 slices" : "dequantise-then-multiply");
    } else {
      choose_nf4_products(workload, cache, clock);
    }
  }
  if (workload.attentions.empty()) return;
  if (std::getenv("TUNE_CPU_ATTENTION") != nullptr) {
    log::info("CPU kernels: attention core as TUNE_CPU_ATTENTION says");
    return;
  }
  choose_attention(workload, cache, clock);
  // Training runs tune's recomputing core wherever the fused kernel lost, and in selective's blocks always.
  if (workload.training && !attention_chunk_min_rows_forced()) choose_chunk_rows(workload, cache, clock);
  // And, where the fused kernel lost, tune's core in checkpointed blocks' recomputes in whichever form was faster.
  if (workload.training && !measured_cpu_fused_attention(workload.dtype).value_or(false)) {
    choose_recompute_core(workload, cache, clock);
  }
}

void choose_cpu_kernels(const CpuWorkload& workload, c10::Device device) {
  choose_cpu_kernels(workload, device, ChoiceCache(default_kernel_cache_file()), steady_seconds);
}

}  // namespace tune::recipes
