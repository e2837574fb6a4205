// Decoding video files and frame folders to RGB tensors (see video_reader.h).
#include "tune/data/video_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "tune/core/error.h"

#ifdef TUNE_HAVE_FFMPEG
#include "tune/data/video_libav.h"
#endif

#include "tune/data/file_extension.h"

namespace tune::data {

#ifdef TUNE_HAVE_FFMPEG
using libav::api;  // FFmpeg's functions, loaded on first use (libav_api.h)
#endif

namespace fs = std::filesystem;

namespace {


[[noreturn]] void throw_without_ffmpeg(const fs::path& path) {
  throw Error(fmt::format("{}: cannot decode video: tune was built without FFmpeg (configure with "
                          "-DTUNE_WITH_FFMPEG=ON and install libavformat-dev libavcodec-dev libswscale-dev "
                          "libavutil-dev)",
                          path.string()));
}

void check_indices(const fs::path& path, const std::vector<int64_t>& indices) {
  for (const int64_t index : indices) {
    if (index < 0) throw Error(fmt::format("{}: frame index {} is negative", path.string(), index));
  }
}

#ifdef TUNE_HAVE_FFMPEG

struct StreamInfo {
  int64_t header_frame_count = 0;
  double fps = 0;
  int64_t width = 0;
  int64_t height = 0;
  std::string codec_name;
};

// One pass over a file's best video stream: demuxer and decoder opened at the start, frames pulled in order.
class DecodePass {
 public:
  DecodePass(const fs::path& path, int threads, StreamInfo* info = nullptr) : path_(path) {
    libav::limit_library_logging();
    AVFormatContext* raw_format = nullptr;
    // The image demuxer (image files, frames) reads a name as a pattern (frame%05d.png); a '%' in a real file's
    // name must stay a character. Other demuxers leave the option unused.
    AVDictionary* options = nullptr;
    api().av_dict_set(&options, "pattern_type", "none", 0);
    int result = api().avformat_open_input(&raw_format, path.string().c_str(), nullptr, &options);
    api().av_dict_free(&options);
    if (result < 0) fail("not a video (libavformat cannot open it: {})", libav::error_string(result));
    format_.reset(raw_format);
    result = api().avformat_find_stream_info(format_.get(), nullptr);
    if (result < 0) fail("not a video (cannot read stream information: {})", libav::error_string(result));
    const AVCodec* decoder = nullptr;
    stream_index_ = api().av_find_best_stream(format_.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
    if (stream_index_ == AVERROR_STREAM_NOT_FOUND) fail("no video stream (the file has {} streams, none video)",
                                                        format_->nb_streams);
    const AVStream* stream = stream_index_ >= 0 ? format_->streams[stream_index_] : nullptr;
    if (stream_index_ < 0 || decoder == nullptr) {
      const char* name = stream != nullptr ? api().avcodec_get_name(stream->codecpar->codec_id) : "unknown";
      fail("no decoder for its video codec '{}' in this FFmpeg build", name);
    }
    codec_.reset(api().avcodec_alloc_context3(decoder));
    if (!codec_) fail("cannot allocate a decoder");
    result = api().avcodec_parameters_to_context(codec_.get(), stream->codecpar);
    if (result < 0) fail("cannot configure the decoder: {}", libav::error_string(result));
    codec_->thread_count = threads;
    result = api().avcodec_open2(codec_.get(), decoder, nullptr);
    if (result < 0) fail("cannot open the '{}' decoder: {}", decoder->name, libav::error_string(result));
    if (stream->codecpar->width <= 0 || stream->codecpar->height <= 0) {
      fail("no video stream (stream {} has no frame size)", stream_index_);
    }
    frame_.reset(api().av_frame_alloc());
    packet_.reset(api().av_packet_alloc());
    if (!frame_ || !packet_) fail("cannot allocate decoding buffers");
    if (info != nullptr) {
      info->header_frame_count = std::max<int64_t>(stream->nb_frames, 0);
      AVRational rate = stream->avg_frame_rate;
      if (rate.num <= 0 || rate.den <= 0) rate = stream->r_frame_rate;
      info->fps = (rate.num > 0 && rate.den > 0) ? av_q2d(rate) : 0.0;
      info->width = stream->codecpar->width;
      info->height = stream->codecpar->height;
      info->codec_name = decoder->name;
    }
  }

  // The next decoded frame (owned by the pass, valid until the next call), or nullptr at the end of the stream.
  const AVFrame* next() {
    while (true) {
      int result = api().avcodec_receive_frame(codec_.get(), frame_.get());
      if (result == 0) return frame_.get();
      if (result == AVERROR_EOF) return nullptr;
      if (result != AVERROR(EAGAIN)) corrupt(result);
      if (flushing_) return nullptr;
      result = api().av_read_frame(format_.get(), packet_.get());
      if (result == AVERROR_EOF) {
        flushing_ = true;
        result = api().avcodec_send_packet(codec_.get(), nullptr);
        if (result < 0 && result != AVERROR_EOF) corrupt(result);
        continue;
      }
      if (result < 0) corrupt(result);
      if (packet_->stream_index == stream_index_) {
        result = api().avcodec_send_packet(codec_.get(), packet_.get());
        api().av_packet_unref(packet_.get());
        if (result < 0 && result != AVERROR(EAGAIN)) corrupt(result);
      } else {
        api().av_packet_unref(packet_.get());
      }
    }
  }

  [[noreturn]] void corrupt(int code) {
    throw InputError(fmt::format("{}: corrupt data at frame {}: {}", path_.string(), frames_seen_,
                                 libav::error_string(code)));
  }
  void count_frame() { ++frames_seen_; }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw InputError(fmt::format("{}: {}", path_.string(), fmt::format(format, std::forward<Args>(args)...)));
  }

  const fs::path& path_;
  libav::InputPtr format_;
  libav::CodecPtr codec_;
  libav::FramePtr frame_;
  libav::PacketPtr packet_;
  int stream_index_ = -1;
  bool flushing_ = false;
  int64_t frames_seen_ = 0;
};

void convert_frame(const fs::path& path, libav::RgbConverter& converter, const AVFrame* frame, int64_t frame_index,
                   int64_t width, int64_t height, uint8_t* destination) {
  if (frame->width != width || frame->height != height) {
    throw InputError(fmt::format("{}: frame {} is {}x{} but the video is {}x{} (frame size changes are not supported)",
                                 path.string(), frame_index, frame->width, frame->height, width, height));
  }
  if (!converter.convert(frame, destination)) {
    throw InputError(fmt::format("{}: cannot convert frame {} from pixel format '{}' to RGB", path.string(),
                                 frame_index, api().av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format))));
  }
}

#endif  // TUNE_HAVE_FFMPEG

}  // namespace

bool video_support_available() {
#ifdef TUNE_HAVE_FFMPEG
  return true;
#else
  return false;
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// VideoReader

VideoReader::VideoReader(fs::path path, VideoReaderOptions options) : path_(std::move(path)), options_(options) {
#ifdef TUNE_HAVE_FFMPEG
  if (!fs::is_regular_file(path_)) throw InputError(fmt::format("{}: no such video file", path_.string()));
  StreamInfo info;
  DecodePass pass(path_, options_.decoder_threads, &info);
  header_frame_count_ = info.header_frame_count;
  fps_ = info.fps;
  width_ = info.width;
  height_ = info.height;
  codec_name_ = info.codec_name;
#else
  throw_without_ffmpeg(path_);
#endif
}

int64_t VideoReader::frame_count() {
  if (header_frame_count_ > 0) return header_frame_count_;
  return count_frames_by_decoding();
}

int64_t VideoReader::count_frames_by_decoding() {
#ifdef TUNE_HAVE_FFMPEG
  if (counted_frames_ >= 0) return counted_frames_;
  DecodePass pass(path_, options_.decoder_threads);
  int64_t count = 0;
  while (pass.next() != nullptr) {
    pass.count_frame();
    ++count;
  }
  counted_frames_ = count;
  return count;
#else
  throw_without_ffmpeg(path_);
#endif
}

torch::Tensor VideoReader::read_frames(const std::vector<int64_t>& indices) {
  check_indices(path_, indices);
  auto frames = torch::empty({static_cast<int64_t>(indices.size()), height_, width_, 3}, torch::kUInt8);
  if (indices.empty()) return frames;
#ifdef TUNE_HAVE_FFMPEG
  // Each source frame goes to every output slot that asked for it.
  std::map<int64_t, std::vector<int64_t>> slots_of_frame;
  for (size_t slot = 0; slot < indices.size(); ++slot) slots_of_frame[indices[slot]].push_back(int64_t(slot));
  const int64_t last_wanted = slots_of_frame.rbegin()->first;
  const int64_t frame_bytes = height_ * width_ * 3;
  uint8_t* data = frames.data_ptr<uint8_t>();

  DecodePass pass(path_, options_.decoder_threads);
  libav::RgbConverter converter;
  int64_t frame_index = 0;
  auto wanted = slots_of_frame.begin();
  for (; frame_index <= last_wanted; ++frame_index) {
    const AVFrame* frame = pass.next();
    if (frame == nullptr) break;
    pass.count_frame();
    if (wanted->first != frame_index) continue;
    const std::vector<int64_t>& slots = wanted->second;
    uint8_t* first = data + slots.front() * frame_bytes;
    convert_frame(path_, converter, frame, frame_index, width_, height_, first);
    for (size_t i = 1; i < slots.size(); ++i) std::copy(first, first + frame_bytes, data + slots[i] * frame_bytes);
    ++wanted;
  }
  if (frame_index <= last_wanted) {
    throw InputError(fmt::format("{}: frame {} was requested but the video ended after {} frames{}", path_.string(),
                                 last_wanted, frame_index,
                                 header_frame_count_ > 0 ? fmt::format(" (its header says {})", header_frame_count_)
                                                         : std::string()));
  }
  return frames;
#else
  throw_without_ffmpeg(path_);
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Frame folders and single images

torch::Tensor read_image(const fs::path& path) {
#ifdef TUNE_HAVE_FFMPEG
  if (!fs::is_regular_file(path)) throw InputError(fmt::format("{}: no such image file", path.string()));
  StreamInfo info;
  DecodePass pass(path, 1, &info);
  const AVFrame* frame = pass.next();
  if (frame == nullptr) throw InputError(fmt::format("{}: corrupt data at frame 0: the image decodes to nothing",
                                                     path.string()));
  auto image = torch::empty({frame->height, frame->width, 3}, torch::kUInt8);
  libav::RgbConverter converter;
  convert_frame(path, converter, frame, 0, frame->width, frame->height,
                image.data_ptr<uint8_t>());
  return image;
#else
  throw_without_ffmpeg(path);
#endif
}

const std::vector<std::string>& image_file_extensions() {
  static const std::vector<std::string> extensions = [] {
    std::vector<std::string> found = {".png", ".jpg", ".jpeg", ".bmp"};
#ifdef TUNE_HAVE_FFMPEG
    if (api().avcodec_find_decoder(AV_CODEC_ID_WEBP) != nullptr) found.push_back(".webp");
#endif
    return found;
  }();
  return extensions;
}

bool FrameFolderReader::is_frame_file(const fs::path& file) {
  const std::string extension = lower_extension(file);
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg" || extension == ".bmp";
}

bool FrameFolderReader::looks_like_frame_folder(const fs::path& folder) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    if (entry.is_regular_file() && is_frame_file(entry.path())) return true;
  }
  return false;
}

FrameFolderReader::FrameFolderReader(fs::path folder, double fps) : folder_(std::move(folder)), fps_(fps) {
#ifdef TUNE_HAVE_FFMPEG
  if (!fs::is_directory(folder_)) throw InputError(fmt::format("{}: no such frame folder", folder_.string()));
  for (const auto& entry : fs::directory_iterator(folder_)) {
    if (entry.is_regular_file() && is_frame_file(entry.path())) frames_.push_back(entry.path());
  }
  std::sort(frames_.begin(), frames_.end());
  if (frames_.empty()) {
    throw InputError(fmt::format("{}: no video stream (the folder holds no .png/.jpg/.jpeg/.bmp frames)",
                                 folder_.string()));
  }
  StreamInfo info;
  DecodePass pass(frames_.front(), 1, &info);
  width_ = info.width;
  height_ = info.height;
#else
  throw_without_ffmpeg(folder_);
#endif
}

torch::Tensor FrameFolderReader::read_frames(const std::vector<int64_t>& indices) {
  check_indices(folder_, indices);
  auto frames = torch::empty({static_cast<int64_t>(indices.size()), height_, width_, 3}, torch::kUInt8);
  for (size_t slot = 0; slot < indices.size(); ++slot) {
    const int64_t index = indices[slot];
    if (index >= frame_count()) {
      throw InputError(fmt::format("{}: frame {} was requested but the folder holds {} frames", folder_.string(),
                                   index, frame_count()));
    }
    const fs::path& file = frames_[static_cast<size_t>(index)];
    auto image = read_image(file);
    if (image.size(0) != height_ || image.size(1) != width_) {
      throw InputError(fmt::format("{}: corrupt data at frame {}: {} is {}x{} but the first frame is {}x{}",
                                   folder_.string(), index, file.filename().string(), image.size(1), image.size(0),
                                   width_, height_));
    }
    frames[static_cast<int64_t>(slot)].copy_(image);
  }
  return frames;
}

std::unique_ptr<VideoSource> open_video(const fs::path& path) {
  if (fs::is_directory(path)) return std::make_unique<FrameFolderReader>(path);
  return std::make_unique<VideoReader>(path);
}

}  // namespace tune::data
