// The predicted peak memory of one SFT training process for a candidate setting: what lives across steps
// (parameters, gradients, AdamW state), the activation estimate of recipes/sft/memory_report for the policy (it
// includes the logits and loss at the head, the largest transient at large vocabularies), the batch tensors and,
// under ddp, the gradient buckets. Compared with what the run measures (RUN/memory.json peak_bytes) by
// tests/cli/plan_tests.sh.
#pragma once

#include <cstdint>

#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/models/llama_config.h"
#include "tune/recipes/plan/budget_plan.h"

namespace tune::recipes::sft {

// What the prediction depends on besides the candidate setting.
struct SftPlanInputs {
  models::LlamaConfig model;
  models::LlamaLoraOptions lora;
  int64_t sequence = 512;       // data.max_length (packed rows are full)
  bool low_precision = true;    // mixed_precision bf16 or fp16: matmul outputs in 2 bytes
  bool fp16 = false;            // that low precision is fp16 (which attention core runs depends on it)
  bool cuda = false;            // fused attention kernels, CUDA allocator
  int64_t bucket_bytes = 25 * 1024 * 1024;  // distributed.bucket_mb
  bool reduce_bf16 = false;     // distributed.reduce_dtype
  bool optimizer_state_bf16 = false;  // optimizer.state_dtype
  bool shard_optimizer_state = false;  // distributed.strategy shard_grad_op: each process keeps a share of it
  bool full_shard = false;             // distributed.strategy full_shard: parameters, gradients and state 1/N
  // recipe dpo: a batch item is a preference pair, its chosen and rejected sequences two rows of one forward, scored
  // by the chunked per-sequence log-probs (no whole logits); and the reference.
  struct Pairs {
    bool enabled = false;
    bool reference_forward = false;  // a reference forward (without gradients) per batch: not precomputed or free
    int64_t reference_copy_bytes_per_parameter = 0;  // full fine-tuning's frozen copy: 2 (bf16) or 4; 0: none
  } pairs;
};

memory::CheckpointOptions checkpoint_options(const PlanSetting& setting);

PeakBreakdown predict_peak(const SftPlanInputs& inputs, const PlanSetting& setting);

// The FLOP model's step time relative to no checkpointing (step_flops.h).
double predict_relative_time(const SftPlanInputs& inputs, const PlanSetting& setting);

}  // namespace tune::recipes::sft
