// Reading and writing text-to-video Latte's prepared clips and caption embeddings.
#include "tune/recipes/diffusion/captioned_latents.h"

#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/core/log.h"
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
  CaptionedLatentClips(const std::filesystem::path& root, std::vector<std::vector<int64_t>> shapes, int64_t tokens,
                       int64_t channels, bool skip_bad)
      : root_(root),
        latents_(root / "clips", skip_bad ? data::OnBadVideo::skip : data::OnBadVideo::fail),
        shapes_(std::move(shapes)),
        tokens_(tokens),
        channels_(channels) {
    if (shapes_.size() > 1) group_by_shape(skip_bad);
  }

  int64_t size() const override { return files_.empty() ? latents_.size() : static_cast<int64_t>(files_.size()); }
  int64_t group(int64_t index) const override { return groups_.empty() ? 0 : groups_[static_cast<size_t>(index)]; }

  Clip get(int64_t index, std::mt19937_64& /*crop and flip were drawn when prepared*/) const override {
    const auto example = files_.empty() ? latents_.get(index) : same_group_example(index);
    const auto& shape = shapes_[static_cast<size_t>(group(index))];
    if (example.latent.sizes() != c10::IntArrayRef(shape)) {
      throw InputError(fmt::format("{}: tensor 'latent' has shape {}, but {} (frames, channels, height, width)",
                                   latents_.item_path(example.index).string(), c10::str(example.latent.sizes()),
                                   shapes_.size() == 1 ? "the model takes " + c10::str(c10::IntArrayRef(shape))
                                                       : "this clip's bucket is " + c10::str(c10::IntArrayRef(shape))));
    }
    const auto caption = load_caption(caption_file(root_, example.label), tokens_, channels_);
    Clip clip;
    clip.frames = example.latent.to(torch::kFloat);
    clip.text = caption.text;
    clip.text_mask = caption.mask;
    return clip;
  }

 private:
  // Several allowed shapes (aspect-ratio buckets): every file's latent shape from its header alone, so that the
  // batcher can group them before any is read. A shape outside the set is an error naming the file; an unreadable
  // header is skipped (logged) under skip_bad.
  void group_by_shape(bool skip_bad) {
    for (int64_t file = 0; file < latents_.size(); ++file) {
      const auto& path = latents_.item_path(file);
      std::vector<int64_t> shape;
      try {
        const auto tensors = io::SafetensorsFile::open(path);
        if (!tensors.contains("latent")) {
          throw InputError(fmt::format("{}: no tensor 'latent' (a latent file written by `tune prepare` has one)",
                                       path.string()));
        }
        shape = tensors.entries().at("latent").shape;
      } catch (const InputError& error) {
        if (!skip_bad) throw;
        log::warn("skipping an unreadable latent file: {}", error.what());
        continue;
      }
      const auto found = std::find(shapes_.begin(), shapes_.end(), shape);
      if (found == shapes_.end()) {
        throw InputError(fmt::format("{}: tensor 'latent' has shape {}, which is none of the {} bucket shapes the "
                                     "model takes here (frames, channels, height, width; latents.json's settings)",
                                     path.string(), c10::str(c10::IntArrayRef(shape)), shapes_.size()));
      }
      files_.push_back(file);
      groups_.push_back(found - shapes_.begin());
    }
    if (files_.empty()) {
      throw InputError(fmt::format("{}: every latent file was skipped as unreadable", (root_ / "clips").string()));
    }
  }

  // Clip `index` of a multi-shape source. LatentDataset stands in the next readable file for an unreadable one
  // (data.on_bad_image: skip), which may hold another shape: the stand-in is taken from the clip's own group.
  data::LatentExample same_group_example(int64_t index) const {
    const auto count = static_cast<int64_t>(files_.size());
    for (int64_t step = 0; step < count; ++step) {
      const int64_t candidate = (index + step) % count;
      if (groups_[static_cast<size_t>(candidate)] != groups_[static_cast<size_t>(index)]) continue;
      auto example = latents_.get(files_[static_cast<size_t>(candidate)]);
      if (example.index == files_[static_cast<size_t>(candidate)]) return example;
    }
    const auto& shape = shapes_[static_cast<size_t>(groups_[static_cast<size_t>(index)])];
    throw InputError(fmt::format("{}: every latent file of the shape {} was skipped as unreadable",
                                 (root_ / "clips").string(), c10::str(c10::IntArrayRef(shape))));
  }

  std::filesystem::path root_;
  data::LatentDataset latents_;
  std::vector<std::vector<int64_t>> shapes_;
  int64_t tokens_, channels_;
  std::vector<int64_t> files_, groups_;  // with several shapes: the readable files and each one's shape
};

class ImageJoinedClips final : public ClipSource {
 public:
  ImageJoinedClips(std::shared_ptr<const ClipSource> videos, std::shared_ptr<const ClipSource> images, int64_t count)
      : videos_(std::move(videos)), images_(std::move(images)), count_(count) {}

  int64_t size() const override { return videos_->size(); }
  int64_t group(int64_t index) const override { return videos_->group(index); }

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
                                                        std::vector<std::vector<int64_t>> shapes, int64_t tokens,
                                                        int64_t channels, bool skip_bad) {
  if (shapes.empty()) throw Error("captioned_latent_clips: no shape allowed");
  return std::make_shared<CaptionedLatentClips>(root, std::move(shapes), tokens, channels, skip_bad);
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
