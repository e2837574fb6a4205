// Which CPU kernels a run's bf16/fp16 work takes, chosen by timing the candidates on the run's own shapes at its
// start (core/measured_choice.h: cached per CPU model, thread count and LibTorch version):
//   - matrix products: LibTorch's own low-precision kernels, or tune's fp32-accumulate ones (precision/cpu_gemm.h),
//     timed on every projection's forward product and, when training, its two backward products;
//   - the attention core: LibTorch's fused scaled_dot_product_attention, or tune's core in the form a run takes
//     (nn/attention_core.h: recomputing its probabilities in backward when training, plain for a forward alone),
//     forward and (training) backward, timed after the product choice is in force (tune's core's products take
//     it). Neither keeps [T, S] probabilities until backward, so speed alone decides;
//   - training where tune's core won: its form inside checkpointed blocks' recomputes (nn::attention_core_form),
//     recomputing its probabilities in backward (kept within noise: it keeps none) or keeping them, forward and
//     backward on the run's shapes;
//   - training with causal attention: the fewest query rows in a chunk of tune's recomputing core
//     (nn::recompute_chunk_rows), 512 against 256 and 128, timed forward and backward on the causal shapes;
//   - QLoRA's NF4 products: the weight dequantised whole then multiplied, or dequantised in fp32 slices for sgemm.
// The choices are recorded for the process (core/cpu_gemm_mode.h), so the activation estimates made afterwards
// follow them, and logged with the figures that decided them. Nothing is measured on CUDA, for fp32/fp64 compute,
// or for a kind that TUNE_CPU_GEMM, TUNE_CPU_ATTENTION (the chunk rows with it) or TUNE_ATTENTION_CHUNK_ROWS forces.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/measured_choice.h"

namespace tune::recipes {

// One projection's forward product: input [rows, inner] times the weight [columns, inner] transposed.
struct ProjectionShape {
  int64_t rows = 0, inner = 0, columns = 0;
};

// One attention core: [batch_heads, queries, head_dim] against [batch_heads, keys, head_dim], causal or unmasked.
// The model workloads give one row's heads (model_workloads.h), so every micro-batch split of a run, and tune plan's
// predictions for them, share one choice.
struct AttentionShape {
  int64_t batch_heads = 0, queries = 0, keys = 0, head_dim = 0;
  bool causal = false;
};

struct CpuWorkload {
  c10::ScalarType dtype = c10::kFloat;  // the compute dtype (autocast's)
  bool training = true;                 // backward's products are part of the work
  std::vector<ProjectionShape> projections;
  std::vector<AttentionShape> attentions;  // every kind of attention core (Latte: spatial and temporal), timed together
  // QLoRA: the products with NF4 weights [columns, inner] (forward and, training, the input gradient), timed
  // dequantise-then-multiply (the default) against the fp32-slice product (precision/nf4_cpu_product.h), after the
  // matrix-product choice is in force. Empty: nothing to choose.
  std::vector<ProjectionShape> nf4_projections;
  bool announce = true;                    // the choices as info lines (false: debug, for tune plan's many probes)
};

// What the measurement runs on: shapes larger than about a GFLOP per product are measured smaller (rows first, then
// every dimension capped at 2048), so a first run on a large model spends about a second, not minutes; the key and
// the log name the measured shapes.
std::vector<ProjectionShape> measured_projections(const std::vector<ProjectionShape>& shapes);
AttentionShape measured_attention(const AttentionShape& shape);

// Measures or reads the choices for `workload` on `device`, records them and installs the fp32-accumulate kernels
// if chosen. `cache`/`clock`: injected by tests; by default the user's cache file and the steady clock.
void choose_cpu_kernels(const CpuWorkload& workload, c10::Device device);
void choose_cpu_kernels(const CpuWorkload& workload, c10::Device device, const ChoiceCache& cache,
                        const SecondsClock& clock);

}  // namespace tune::recipes
