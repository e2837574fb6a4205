// Reading and writing text-to-video Latte's prepared clips and caption embeddings.
#include "tune/recipes/diffusion/captioned_latents.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/data/video_dataset.h"
#include "tune/io/safetensors.h"

namespace tune::recipes::diffusion_common {

std::filesystem::path caption_file(const std::filesystem::path& root, int64_t video) {
  return root / "captions" / fmt::format("{:06d}.safetensors", video);
}

std::filesystem::path clip_file(const std::filesystem::path& root, int64_t video, int64_t clip, int64_t clips_per_video) {
  return root / "clips" /
         (clips_per_video > 1 ? fmt::format("{:06d}-c{}.safetensors", video, clip) : fmt::format("{:06d}.safetensors", video));
}

void save_caption(const std::filesystem::path& file, const torch::Tensor& text, const torch::Tensor& mask) {
  io::save_safetensors(file, {{"text", text}, {"text_mask", mask.to(torch::kLong)}});
}

CaptionTensors load_caption(const std::filesystem::path& file, int64_t tokens, int64_t channels) {
  if (!std::filesystem::exists(file)) {
    throw InputError(fmt::format("{}: missing; the prepared captions are incomplete (run `tune prepare` again)",
                                 file.string()));
  }
  const auto tensors = io::SafetensorsFile::open(file);
  for (const char* name : {"text", "text_mask"}) {
    if (tensors.entries().count(name) == 0) {
      throw InputError(fmt::format("{}: no tensor '{}' (a caption file written by `tune prepare` has text and "
                                   "text_mask)", file.string(), name));
    }
  }
  CaptionTensors caption{tensors.load("text").to(torch::kFloat), tensors.load("text_mask").to(torch::kLong)};
  if (caption.text.sizes() != c10::IntArrayRef{tokens, channels} || caption.mask.sizes() != c10::IntArrayRef{tokens}) {
    throw InputError(fmt::format("{}: text {} and text_mask {}, expected [{}, {}] and [{}] (latents.json's text "
                                 "section)", file.string(), c10::str(caption.text.sizes()),
                                 c10::str(caption.mask.sizes()), tokens, channels, tokens));
  }
  return caption;
}

namespace {

class CaptionedLatentClips final : public ClipSource {
 public:
  CaptionedLatentClips(const std::filesystem::path& root, std::vector<int64_t> shape, int64_t tokens, int64_t channels,
                       bool skip_bad)
      : root_(root),
        latents_(root / "clips", skip_bad ? data::OnBadVideo::skip : data::OnBadVideo::fail),
        shape_(std::move(shape)),
        tokens_(tokens),
        channels_(channels) {}

  int64_t size() const override { return latents_.size(); }

  Clip get(int64_t index, std::mt19937_64& /*crop and flip were drawn when prepared*/) const override {
    const auto example = latents_.get(index);
    if (example.latent.sizes() != c10::IntArrayRef(shape_)) {
      throw InputError(fmt::format("{}: tensor 'latent' has shape {}, but the model takes {} (frames, channels, "
                                   "height, width)", latents_.item_path(example.index).string(),
                                   c10::str(example.latent.sizes()), c10::str(c10::IntArrayRef(shape_))));
    }
    const auto caption = load_caption(caption_file(root_, example.label), tokens_, channels_);
    Clip clip;
    clip.frames = example.latent.to(torch::kFloat);
    clip.text = caption.text;
    clip.text_mask = caption.mask;
    return clip;
  }

 private:
  std::filesystem::path root_;
  data::LatentDataset latents_;
  std::vector<int64_t> shape_;
  int64_t tokens_, channels_;
};

class ImageJoinedClips final : public ClipSource {
 public:
  ImageJoinedClips(std::shared_ptr<const ClipSource> videos, std::shared_ptr<const ClipSource> images, int64_t count)
      : videos_(std::move(videos)), images_(std::move(images)), count_(count) {}

  int64_t size() const override { return videos_->size(); }

  Clip get(int64_t index, std::mt19937_64& generator) const override {
    Clip clip = videos_->get(index, generator);
    std::vector<torch::Tensor> frames{clip.frames}, texts{clip.text.unsqueeze(0)}, masks{clip.text_mask.unsqueeze(0)};
    std::uniform_int_distribution<int64_t> pick(0, images_->size() - 1);
    for (int64_t k = 0; k < count_; ++k) {
      const Clip image = images_->get(pick(generator), generator);
      frames.push_back(image.frames);
      texts.push_back(image.text.unsqueeze(0));
      masks.push_back(image.text_mask.unsqueeze(0));
    }
    clip.frames = torch::cat(frames);
    clip.text = torch::cat(texts);
    clip.text_mask = torch::cat(masks);
    return clip;
  }

 private:
  std::shared_ptr<const ClipSource> videos_, images_;
  int64_t count_;
};

}  // namespace

std::shared_ptr<const ClipSource> join_images(std::shared_ptr<const ClipSource> videos,
                                              std::shared_ptr<const ClipSource> images, int64_t count) {
  return std::make_shared<ImageJoinedClips>(std::move(videos), std::move(images), count);
}

std::shared_ptr<const ClipSource> captioned_latent_clips(const std::filesystem::path& root,
                                                                          std::vector<int64_t> shape, int64_t tokens,
                                                                          int64_t channels, bool skip_bad) {
  return std::make_shared<CaptionedLatentClips>(root, std::move(shape), tokens, channels, skip_bad);
}

std::pair<torch::Tensor, torch::Tensor> drop_captions(const Conditioning& condition, const torch::Tensor& drop,
                                                      const torch::Tensor& null_text, const torch::Tensor& null_mask) {
  if (!drop.defined()) return {condition.text, condition.text_mask};
  const auto dropped = drop.to(torch::kBool);
  // [B] -> [B, 1, ...]: the empty prompt broadcast over every caption of a dropped row.
  auto per_row = [&](const torch::Tensor& like) {
    std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
    shape[0] = -1;
    return dropped.view(shape);
  };
  return {torch::where(per_row(condition.text), null_text, condition.text),
          torch::where(per_row(condition.text_mask), null_mask, condition.text_mask)};
}

}  // namespace tune::recipes::diffusion_common
