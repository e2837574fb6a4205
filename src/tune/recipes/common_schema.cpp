// The shared part of every recipe's schema and its translation into plain structs.
#include "tune/recipes/common_schema.h"

#include <cmath>

#include <torch/cuda.h>

#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"
#include "tune/distributed/launch_environment.h"
#include "tune/recipes/gradient_storage.h"

namespace tune::recipes {

config::Schema common_schema(const std::string& recipe_name) {
  config::Schema schema;
  schema.choice("recipe", {recipe_name}, recipe_name, "which recipe family this config is for");
  schema.string("output_dir", "runs/" + recipe_name, "run directory: config.yaml, metrics.jsonl, loss.svg, checkpoints/");
  schema.integer("seed", 0, "seed for initialisation, data order, dropout");
  schema.integer("threads", 0, "intra-op CPU threads; 0 = all cores");
  schema.choice("device", {"auto", "cpu", "cuda"}, "auto", "auto = cuda when available, else cpu");

  schema.boolean("gradient_checkpointing", true, "recompute block activations in backward instead of storing them");
  schema.choice("checkpointing.policy", {"full", "every_k", "sqrt", "selective", "offload"}, "full",
                "full: every block; every_k: blocks 0, k, 2k...; sqrt: ~sqrt(L) segments; selective: recompute norms, "
                "attention core and activations only; offload (CUDA): full, with block inputs in pinned CPU memory");
  schema.integer("checkpointing.k", 2, "every_k: checkpoint blocks 0, k, 2k, ...");
  schema.choice("mixed_precision", {"bf16", "fp16", "no"}, "bf16",
                "autocast compute dtype; weights and optimizer state stay fp32");
  schema.real("loss_scale.initial", 65536.0, "fp16: the loss scale to start from (halved on inf/NaN gradients)");
  schema.integer("loss_scale.growth_interval", 2000, "fp16: clean steps before the loss scale doubles");
  schema.choice("param_dtype", {"fp32", "bf16"}, "fp32",
                "storage dtype of frozen weights (the LoRA base; every weight in tune infer and tune chat); trainable "
                "weights stay fp32 masters");
  schema.boolean("grad_inference", true, "tune infer keeps autograd on (per-token attribution) unless --no-grad");

  schema.integer("training.batch_size", 8, "rows per micro-batch");
  schema.integer("training.gradient_accumulation_steps", 1, "micro-batches per optimizer step");
  schema.integer("training.max_steps", 0, "optimizer steps; 0 = training.epochs passes over the data");
  schema.integer("training.epochs", 1, "passes over the training data when max_steps is 0");
  schema.real("training.clip_grad_norm", 1.0, "max global gradient norm; 0 disables clipping");
  schema.choice("training.compact_gradients", {"auto", "true", "false"}, "auto",
                "keep each parameter gradient in bf16 where that is exact (under bf16 autocast most are bf16 "
                "products widened to fp32), halving their memory with the same update bit for bit; auto = on for a "
                "single-process CPU run under bf16 autocast with gradient checkpointing on and no gradient "
                "accumulation");
  schema.choice("training.on_nan", {"stop", "skip"}, "stop",
                "non-finite loss: stop (earlier checkpoints stay intact) or skip the step");

  schema.real("optimizer.lr", 3e-4, "peak learning rate (AdamW)");
  schema.real("optimizer.weight_decay", 0.0, "decoupled weight decay; never applied to norms and biases");
  schema.real("optimizer.beta1", 0.9, "AdamW beta1");
  schema.real("optimizer.beta2", 0.999, "AdamW beta2");
  schema.real("optimizer.eps", 1e-8, "AdamW epsilon");
  schema.choice("optimizer.state_dtype", {"fp32", "bf16"}, "fp32",
                "AdamW moments: fp32 (as torch.optim), or bf16 to halve their memory (an approximation: the update "
                "computes in fp32, the stored moments keep 8 significant bits)");
  schema.choice("optimizer.fused", {"auto", "true", "false"}, "auto",
                "AdamW kernel: auto = LibTorch's fused multi-tensor kernel on CUDA (torch.optim.AdamW(fused=True)) "
                "for fp32 moments, the op-by-op update elsewhere; true = the fused kernel on the CPU too; false = "
                "always op by op");

  schema.choice("scheduler.kind", {"cosine", "linear", "constant", "wsd"}, "cosine",
                "learning-rate decay after warmup (wsd: warmup, constant, then a cosine decay over decay_steps)");
  schema.integer("scheduler.warmup_steps", 0, "linear warmup from 0 over this many steps");
  schema.real("scheduler.min_lr_ratio", 0.0, "final learning rate as a fraction of the peak (cosine, linear, wsd)");
  schema.integer("scheduler.decay_steps", 0, "wsd: the final decay's length in steps (required for wsd)");

  schema.integer("logging.every", 10, "log (and write metrics.jsonl) every N optimizer steps");
  schema.boolean("logging.tensorboard", true, "also write metrics.jsonl's scalars as TensorBoard event files in "
                 "RUN/tensorboard/ (tensorboard --logdir runs/)");
  schema.integer("checkpoint.every", 0, "save every N steps; 0 = only at the end");
  schema.integer("checkpoint.keep_last", 2, "complete checkpoints kept; 0 = all");

  // Read only when a launcher (tune train --nproc N, torchrun, srun) starts several processes; validated always.
  schema.choice("distributed.backend", {"auto", "gloo", "nccl"}, "auto",
                "c10d backend; auto = nccl on CUDA where tune is built with it (a CUDA LibTorch), else gloo");
  schema.choice("distributed.strategy", {"ddp", "full_shard", "shard_grad_op"}, "ddp",
                "ddp: replicated parameters, gradients all-reduced in buckets during backward; shard_grad_op "
                "(ZeRO-2): as ddp, but each process keeps the gradients and optimizer state of its share of the "
                "parameters only; full_shard (ZeRO-3, FSDP): each process keeps 1/N of the parameters too, "
                "gathering a block's just before its forward and its backward");
  schema.string_list("distributed.shard_blocks", {}, "full_shard: the block types wrapped (gathered one at a time); "
                     "empty = the model's blocks (LlamaDecoderLayer; LatteSpatialBlock, LatteTemporalBlock); "
                     "the parameters of other blocks join the rest of the model, one more unit");
  schema.boolean("distributed.prefetch", false, "full_shard: start gathering a block's parameters one block early "
                 "(while the block before it runs forward, or the one after it finishes backward) so the gather "
                 "can overlap compute, at the cost of up to one more block's parameters in memory; off by default: "
                 "on a CPU with Gloo it measured no gain (scripts/bench_distributed.py)");
  schema.real("distributed.bucket_mb", 25.0, "ddp: gradient bucket size in MiB (one all-reduce per bucket)");
  schema.choice("distributed.reduce_dtype", {"fp32", "bf16"}, "fp32", "dtype gradients are summed in across ranks");
  schema.integer("distributed.timeout_s", 300, "a collective (or the rendezvous) failing to complete in this time "
                                               "stops the run: another rank died");
  return schema;
}

int64_t get_int_at_least(const config::Config& config, const std::string& key, int64_t minimum) {
  const long long value = config.get_int(key);
  if (value < minimum) config.fail(key, fmt::format("must be >= {}, got {}", minimum, value));
  return static_cast<int64_t>(value);
}

RunSettings read_run_settings(const config::Config& config) {
  RunSettings settings;
  settings.seed = static_cast<uint64_t>(config.get_int("seed"));
  settings.threads = static_cast<int>(get_int_at_least(config, "threads", 0));
  const std::string device = config.get_string("device");
  const bool cuda_available = torch::cuda::is_available();
  if (device == "cuda" && !cuda_available) {
    config.fail("device", "is 'cuda' but no CUDA device is available to this LibTorch build; use 'cpu' or 'auto'");
  }
  settings.device = device == "auto" ? (cuda_available ? "cuda" : "cpu") : device;

  settings.gradient_checkpointing = config.get_bool("gradient_checkpointing");
  if (config.get_string("checkpointing.policy") == "offload" && settings.device != "cuda") {
    config.fail("checkpointing.policy", "is 'offload', which moves saved block inputs from the GPU to pinned CPU "
                                        "memory and needs device cuda; use 'full' on CPU");
  }
  // Several processes on a machine: each takes the GPU of its local rank (torchrun's and Slurm's convention).
  if (settings.device == "cuda") {
    if (const auto env = distributed::read_launch_environment(); env && env->world_size > 1) {
      if (env->local_rank >= static_cast<int>(torch::cuda::device_count())) {
        config.fail("device", fmt::format("is cuda, but this process's LOCAL_RANK {} has no GPU of its own ({} visible)",
                                          env->local_rank, torch::cuda::device_count()));
      }
      settings.device = fmt::format("cuda:{}", env->local_rank);
    }
  }
  settings.checkpointing.policy = settings.gradient_checkpointing
                                      ? memory::parse_policy(config.get_string("checkpointing.policy"))
                                      : memory::Policy::off;
  settings.checkpointing.k = get_int_at_least(config, "checkpointing.k", 1);
  settings.mixed_precision = precision::parse_mixed_precision(config.get_string("mixed_precision"));
  if (settings.mixed_precision == precision::MixedPrecision::fp16 && settings.device == "cpu" &&
      !compat::cpu_autocast_supports_fp16()) {
    config.fail("mixed_precision", "is 'fp16', which needs CUDA on this LibTorch (its CPU autocast computes in bf16 "
                                   "only); use 'bf16' or 'no' on CPU");
  }
  settings.loss_scale.initial_scale = config.get_real("loss_scale.initial");
  if (!(settings.loss_scale.initial_scale >= 1.0)) {
    config.fail("loss_scale.initial", fmt::format("must be >= 1, got {}", settings.loss_scale.initial_scale));
  }
  settings.loss_scale.growth_interval = get_int_at_least(config, "loss_scale.growth_interval", 1);
  settings.grad_inference = config.get_bool("grad_inference");
  settings.frozen_weights_bf16 = config.get_string("param_dtype") == "bf16";
  if (settings.frozen_weights_bf16 && settings.mixed_precision == precision::MixedPrecision::no) {
    config.fail("param_dtype", "is 'bf16', which needs mixed_precision bf16 (or fp16) so matmuls run in that dtype; "
                               "set mixed_precision: bf16 or param_dtype: fp32");
  }
  return settings;
}

TrainingSettings read_training_settings(const config::Config& config) {
  TrainingSettings settings;
  auto positive = [&](const std::string& key) { return get_int_at_least(config, key, 1); };
  auto non_negative = [&](const std::string& key) { return get_int_at_least(config, key, 0); };
  settings.batch_size = positive("training.batch_size");
  settings.gradient_accumulation_steps = positive("training.gradient_accumulation_steps");
  settings.max_steps = non_negative("training.max_steps");
  settings.epochs = positive("training.epochs");
  settings.clip_grad_norm = config.get_real("training.clip_grad_norm");
  if (!(settings.clip_grad_norm >= 0) || !std::isfinite(settings.clip_grad_norm)) {
    config.fail("training.clip_grad_norm",
                fmt::format("must be >= 0 (0 turns clipping off), got {}", settings.clip_grad_norm));
  }
  settings.on_nan = config.get_string("training.on_nan");
  settings.compact_gradients = config.get_string("training.compact_gradients");
  if (settings.compact_gradients == "true") {
    const auto launch = distributed::read_launch_environment();
    const std::string reason =
        compact_gradients_unsupported(read_run_settings(config), launch && launch->world_size > 1);
    if (!reason.empty()) config.fail("training.compact_gradients", "is true, but " + reason + "; use auto or false");
  }

  settings.schedule.peak_lr = config.get_real("optimizer.lr");
  if (settings.schedule.peak_lr <= 0) config.fail("optimizer.lr", "must be > 0");
  settings.weight_decay = config.get_real("optimizer.weight_decay");
  settings.adamw.beta1 = config.get_real("optimizer.beta1");
  settings.adamw.beta2 = config.get_real("optimizer.beta2");
  settings.adamw.eps = config.get_real("optimizer.eps");
  settings.adamw.state_dtype = config.get_string("optimizer.state_dtype") == "bf16" ? torch::kBFloat16 : torch::kFloat;
  const std::string fused = config.get_string("optimizer.fused");
  settings.adamw.kernel = fused == "true"    ? train::AdamWKernel::fused
                          : fused == "false" ? train::AdamWKernel::sliced
                                             : train::AdamWKernel::automatic;
  if (settings.adamw.kernel == train::AdamWKernel::fused && settings.adamw.state_dtype != torch::kFloat) {
    config.fail("optimizer.fused", "true needs fp32 moments (the fused kernel keeps them in the parameter's dtype); "
                "set optimizer.state_dtype=fp32 or optimizer.fused=auto");
  }
  for (const char* key : {"optimizer.beta1", "optimizer.beta2"}) {
    const double beta = config.get_real(key);
    if (beta < 0 || beta >= 1) config.fail(key, fmt::format("must be in [0, 1), got {}", beta));
  }
  settings.schedule.kind = config.get_string("scheduler.kind");
  settings.schedule.warmup_steps = non_negative("scheduler.warmup_steps");
  settings.schedule.min_lr_ratio = config.get_real("scheduler.min_lr_ratio");
  settings.schedule.decay_steps = non_negative("scheduler.decay_steps");
  if (settings.schedule.kind == "wsd" && settings.schedule.decay_steps == 0) {
    config.fail("scheduler.decay_steps",
                "is required for scheduler.kind: wsd (the length of its final decay, a positive number of steps)");
  }
  if (settings.schedule.kind != "wsd" && settings.schedule.decay_steps != 0) {
    config.fail("scheduler.decay_steps",
                fmt::format("applies to scheduler.kind: wsd only (kind is {})", settings.schedule.kind));
  }
  if (settings.schedule.min_lr_ratio < 0 || settings.schedule.min_lr_ratio > 1) {
    config.fail("scheduler.min_lr_ratio", "must be in [0, 1]");
  }
  settings.log_every = positive("logging.every");
  settings.tensorboard = config.get_bool("logging.tensorboard");
  // Only recipes that evaluate declare eval.every (a key must never be accepted and then ignored).
  if (config.schema.find("eval.every") != nullptr) settings.eval_every = non_negative("eval.every");
  settings.save_every = non_negative("checkpoint.every");
  settings.keep_last = non_negative("checkpoint.keep_last");
  return settings;
}

int64_t TrainingSettings::total_steps(int64_t batches_per_epoch) const {
  if (max_steps > 0) return max_steps;
  const int64_t micro_batches = epochs * std::max<int64_t>(1, batches_per_epoch);
  return (micro_batches + gradient_accumulation_steps - 1) / gradient_accumulation_steps;
}

}  // namespace tune::recipes
