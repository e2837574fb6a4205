// The prepared training data of the text-conditioned diffusion recipes (text-to-video Latte, Sana), as `tune prepare`
// writes it into data.latents:
//   latents.json                 the manifest (recipes/diffusion/latent_manifest.h) with its "text" section
//   null_caption.safetensors     the empty prompt's embedding: "text" [L, D], "text_mask" [L] (caption dropout)
//   captions/NNNNNN.safetensors  each video's caption embedding, the same two tensors (once per video, however many
//                                clips are drawn from it)
//   clips/NNNNNN[-cK].safetensors  each clip's VAE latents, "latent" [F, C, h, w] (an image: F = 1), and "label" =
//                                the video's (image's) number
// Training reads clips with their captions and loads neither the VAE nor the text encoder.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tune/recipes/diffusion/clip_batches.h"

namespace tune::recipes::diffusion_common {

std::filesystem::path caption_file(const std::filesystem::path& root, int64_t video);
std::filesystem::path clip_file(const std::filesystem::path& root, int64_t video, int64_t clip, int64_t clips_per_video);
void save_caption(const std::filesystem::path& file, const torch::Tensor& text, const torch::Tensor& mask);

struct CaptionTensors {
  torch::Tensor text;  // [L, D] float32
  torch::Tensor mask;  // [L] int64
};
// Throws InputError naming the file when a tensor is missing or not [L, D] / [L] (`tokens` = L, `channels` = D).
CaptionTensors load_caption(const std::filesystem::path& file, int64_t tokens, int64_t channels);

// The clips under ROOT/clips with their captions; every latent must have one of `shapes` [F, C, h, w] (an InputError
// naming the file otherwise). With several (Sana's aspect-ratio buckets) each file's shape is read from its header
// up front and is the clip's group (the index into `shapes`; the batcher stacks one group at a time).
// `skip_bad`: an unreadable file is skipped (logged, counted) rather than fatal.
std::shared_ptr<const ClipSource> captioned_latent_clips(const std::filesystem::path& root,
                                                        std::vector<std::vector<int64_t>> shapes, int64_t tokens,
                                                        int64_t channels, bool skip_bad);

// Image-video joint training (text-to-video Latte's use_image_num): each clip of `videos` with `count` images of
// `images` (one-frame clips) drawn uniformly at random with replacement, from the clip's own generator (a resumed
// run draws the same), joined after its frames and their captions after its own: frames [F + n, C, h, w], text
// [1 + n, L, D], text_mask [1 + n, L].
std::shared_ptr<const ClipSource> join_images(std::shared_ptr<const ClipSource> videos,
                                              std::shared_ptr<const ClipSource> images, int64_t count);

// Caption dropout as the loop draws it: the rows of `drop` ([B] int64, 1 = dropped; undefined: none) see the empty
// prompt's embedding and mask (`null_text` [L, D], `null_mask` [L], on the device) in place of their caption, as
// classifier-free guidance's unconditional branch will (with joined images, [B, 1 + n, L, D]: all of a dropped row's
// captions). Returns {text, mask}.
std::pair<torch::Tensor, torch::Tensor> drop_captions(const Conditioning& condition, const torch::Tensor& drop,
                                                      const torch::Tensor& null_text, const torch::Tensor& null_mask);

}  // namespace tune::recipes::diffusion_common
