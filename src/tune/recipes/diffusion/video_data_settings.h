// The data.* keys every video-diffusion recipe shares: where the videos (or their prepared latents) are and how a
// training clip is cut from a video.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"
#include "tune/data/video_dataset.h"

namespace tune::recipes::diffusion_common {

struct VideoDataSettings {
  std::optional<std::string> path;     // the videos (each recipe says in which layout)
  std::optional<std::string> latents;  // `tune prepare`'s output: when set, training reads these, not the videos
  int64_t num_frames = 16;
  int64_t frame_interval = 3;
  int64_t image_size = 256;
  bool flip = true;
  bool skip_bad_videos = false;        // on_bad_video: skip (logged and counted) or fail
  bool cache_frames = false;           // decode each video once and keep its frames in memory
};

// Declares data.path (with `path_help`), data.latents, data.num_frames, data.frame_interval, data.image_size,
// data.flip (default `flip`), data.cache_frames and data.on_bad_video.
void add_video_data_keys(config::Schema& schema, const std::string& path_help, bool flip);
// Reads them; neither data.path nor data.latents is required here (training and prepare check what they need).
VideoDataSettings read_video_data_settings(const config::Config& config);
// How data::VideoDataset cuts clips for these settings.
data::VideoDatasetOptions video_dataset_options(const VideoDataSettings& settings);

}  // namespace tune::recipes::diffusion_common
