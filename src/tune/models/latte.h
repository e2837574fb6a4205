// Latte (Vchitect/Latte, models/latte.py): a video diffusion transformer over latent frames. Patch tokens of each
// frame pass through blocks that alternate between spatial attention (over the patches of one frame, even block
// index) and temporal attention (over the frames at one patch position, odd index), each conditioned by adaLN-Zero
// on the timestep embedding (+ the class embedding when class-conditional). Parameter names equal the official
// checkpoints': x_embedder.proj.*, t_embedder.mlp.{0,2}.*, y_embedder.embedding_table.weight, pos_embed,
// temp_embed, blocks.N.{attn.qkv,attn.proj,mlp.fc1,mlp.fc2,adaLN_modulation.1}.*, final_layer.{linear,
// adaLN_modulation.1}.*.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "tune/models/latte_config.h"
#include "tune/models/latte_layers.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/patch_embed.h"
#include "tune/nn/timestep_embedder.h"

namespace tune::models {

enum class LatteBlockKind { spatial, temporal };

class LatteImpl : public torch::nn::Module {
 public:
  // Validates the config (UsageError) and initialises as the official initialize_weights: xavier-uniform Linear
  // weights with zero biases, patch embedding xavier-uniform on its [D, C*p*p] view, timestep MLP weights and the
  // label table normal(0, 0.02), adaLN modulations and the final linear zero, fixed sin-cos pos_embed/temp_embed.
  explicit LatteImpl(const LatteConfig& config);
  void reset_parameters();

  // x [B, F, C, H, W] (F = num_frames, H = W = input_size), t [B] (diffusion timesteps, may be fractional),
  // y [B] int64 class labels (required iff extras = 2, ignored otherwise), force_drop_ids [B] (1 = replace the
  // label by the null class; classifier-free guidance). While training (is_training()), labels are also dropped
  // at random with probability class_dropout_prob. Returns [B, F, out_channels, H, W]: with learn_sigma the
  // first in_channels channels are the noise prediction and the rest the variance output; the diffusion code
  // splits them. The output dtype is at least float32 (an autocast bf16 result is cast to float32).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& y = {},
                        const torch::Tensor& force_drop_ids = {});

  // The conditioning vector c [B, D] = t_embedder(t) (+ y_embedder(y)); exposed for tests and guidance code.
  torch::Tensor condition(const torch::Tensor& t, const torch::Tensor& y, const torch::Tensor& force_drop_ids = {});

  // Blocks for the memory machinery and distributed wrapping; the runner decides how each block executes.
  // The blocks run as one run_stack() over a uniform state [B*F, num_patches, D], the hidden states in the spatial
  // layout (b f) t d, so a sqrt-policy runner can cut segments anywhere. The conditioning c [B, D] is captured by
  // the block function and listed with every block's parameters (when it needs a gradient), so a recomputing runner
  // returns its gradient (the timestep and label embedders train under checkpointing); each block repeats its
  // modulation over a sample's frames. A temporal block (odd index) attends over the frames at each token without
  // rearranging the state (adding temp_embed first when it is block 1); norms, attention cores and GELUs are runner
  // regions.
  int64_t num_blocks() const { return config_.depth; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const;
  static LatteBlockKind block_kind(int64_t block_index) {
    return block_index % 2 == 0 ? LatteBlockKind::spatial : LatteBlockKind::temporal;
  }
  // Block `block_index`'s type name (distributed.shard_blocks).
  static const char* block_type(int64_t block_index) {
    return block_kind(block_index) == LatteBlockKind::spatial ? "LatteSpatialBlock" : "LatteTemporalBlock";
  }
  void set_block_runner(std::shared_ptr<nn::BlockRunner> runner) { runner_ = std::move(runner); }

  // [N, T, p*p*out] -> [N, out, H, W] (the official unpatchify).
  torch::Tensor unpatchify(const torch::Tensor& tokens) const;

  const LatteConfig& config() const { return config_; }

  // Submodules and fixed tables under their official names. pos_embed [1, num_patches, D] and temp_embed
  // [1, num_frames, D] are parameters with requires_grad false, as in the official model, so checkpoints carry them.
  nn::PatchEmbed x_embedder{nullptr};
  nn::TimestepEmbedder t_embedder{nullptr};
  LabelEmbedder y_embedder{nullptr};  // null unless extras = 2
  torch::Tensor pos_embed, temp_embed;
  torch::nn::ModuleList blocks_{nullptr};  // registered as "blocks"
  LatteFinalLayer final_layer{nullptr};

 private:
  LatteConfig config_;
  std::shared_ptr<nn::BlockRunner> runner_;
};
TORCH_MODULE(Latte);

}  // namespace tune::models
