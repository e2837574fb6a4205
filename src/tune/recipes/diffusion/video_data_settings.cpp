// The shared data.* keys of the video recipes.
#include "tune/recipes/diffusion/video_data_settings.h"

#include "tune/recipes/common_schema.h"

namespace tune::recipes::diffusion_common {

void add_video_data_keys(config::Schema& schema, const std::string& path_help, bool flip) {
  schema.path("data.path", path_help);
  schema.path("data.latents", "latents written by `tune prepare`; when set, training reads them (no encoder in memory)");
  schema.integer("data.num_frames", 16, "frames per clip");
  schema.integer("data.frame_interval", 3, "stride between sampled frames");
  schema.integer("data.image_size", 256, "resize (short side) + center crop size");
  schema.boolean("data.flip", flip, "random horizontal flip");
  schema.boolean("data.cache_frames", false, "decode each video once and keep its frames in memory (small datasets)");
  schema.choice("data.on_bad_video", {"fail", "skip"}, "fail", "a corrupt or too-short video stops the run or is skipped");
}

VideoDataSettings read_video_data_settings(const config::Config& config) {
  VideoDataSettings data;
  if (config.has("data.path")) data.path = config.get_string("data.path");
  if (config.has("data.latents")) data.latents = config.get_string("data.latents");
  data.num_frames = get_int_at_least(config, "data.num_frames", 1);
  data.frame_interval = get_int_at_least(config, "data.frame_interval", 1);
  data.image_size = get_int_at_least(config, "data.image_size", 8);
  data.flip = config.get_bool("data.flip");
  data.skip_bad_videos = config.get_string("data.on_bad_video") == "skip";
  data.cache_frames = config.get_bool("data.cache_frames");
  return data;
}

data::VideoDatasetOptions video_dataset_options(const VideoDataSettings& settings) {
  data::VideoDatasetOptions options;
  options.clip = {settings.num_frames, settings.frame_interval, settings.image_size, settings.flip};
  options.on_bad_video = settings.skip_bad_videos ? data::OnBadVideo::skip : data::OnBadVideo::fail;
  options.cache_frames = settings.cache_frames;
  return options;
}

}  // namespace tune::recipes::diffusion_common
