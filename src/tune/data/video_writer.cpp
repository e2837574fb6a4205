// Encoding RGB frames to .mp4 and .gif with libavformat/libavcodec (see video_writer.h).
#include "tune/data/video_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <system_error>

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


#ifdef TUNE_HAVE_FFMPEG
// GIF holds 256 colours per frame; a fixed 6x7x6 colour cube (green gets the extra level: the eye is most
// sensitive to it) keeps every channel within half a step (<= 26 of 255) without per-video palette search.
constexpr int kRedLevels = 6, kGreenLevels = 7, kBlueLevels = 6;

inline int level_of(int value, int levels) { return (value * (levels - 1) + 127) / 255; }
inline int value_of(int level, int levels) { return (level * 255 + (levels - 1) / 2) / (levels - 1); }
#endif

}  // namespace

std::string mp4_encoder_name() {
#ifdef TUNE_HAVE_FFMPEG
  if (api().avcodec_find_encoder_by_name("libx264") != nullptr) return "libx264";
  if (api().avcodec_find_encoder_by_name("mpeg4") != nullptr) return "mpeg4";
#endif
  return "";
}

torch::Tensor frames_to_uint8(const torch::Tensor& frames) {
  if (frames.dim() == 4 && frames.scalar_type() == torch::kUInt8 && frames.size(3) == 3) {
    return frames.to(torch::kCPU).contiguous();
  }
  if (frames.dim() == 4 && frames.is_floating_point() && frames.size(1) == 3) {
    auto scaled = ((frames.detach().to(torch::kCPU, torch::kFloat).clamp(-1, 1) + 1) * 127.5).round();
    return scaled.clamp(0, 255).to(torch::kUInt8).permute({0, 2, 3, 1}).contiguous();
  }
  throw Error(fmt::format("video frames must be uint8 [F, H, W, 3] or float [F, 3, H, W] in [-1, 1]; got {} {}",
                          std::string(c10::toString(frames.scalar_type())), c10::str(frames.sizes())));
}

#ifdef TUNE_HAVE_FFMPEG
struct VideoWriter::State {
  libav::OutputPtr format;
  libav::CodecPtr codec;
  AVStream* stream = nullptr;
  libav::FramePtr frame;
  libav::PacketPtr packet;
  libav::ScalerPtr scaler;  // RGB24 -> encoder pixel format (mp4)
  bool gif = false;
};
#else
struct VideoWriter::State {};
#endif

VideoWriter::VideoWriter(fs::path path, int64_t width, int64_t height, VideoWriterOptions options)
    : path_(std::move(path)), width_(width), height_(height) {
  const std::string extension = lower_extension(path_);
  if (extension != ".mp4" && extension != ".gif") {
    throw UsageError(fmt::format("{}: unknown video extension '{}'; tune writes .mp4 (H.264 or MPEG-4) and .gif",
                                 path_.string(), extension));
  }
  if (width <= 0 || height <= 0) {
    throw Error(fmt::format("{}: cannot write {}x{} frames", path_.string(), width, height));
  }
  if (extension == ".mp4" && (width % 2 != 0 || height % 2 != 0)) {
    throw UsageError(fmt::format("{}: .mp4 (yuv420p) needs even width and height, got {}x{}; HINT: use .gif, or "
                                 "crop or resize the frames",
                                 path_.string(), width, height));
  }
  if (!(options.fps > 0)) throw UsageError(fmt::format("{}: fps must be positive, got {}", path_.string(), options.fps));
#ifdef TUNE_HAVE_FFMPEG
  libav::limit_library_logging();
  temporary_path_ = path_;
  temporary_path_ += ".tmp";
  state_ = std::make_unique<State>();
  State& state = *state_;
  state.gif = extension == ".gif";
  auto fail = [&](const std::string& what, int code) {
    state_.reset();
    std::error_code ignored;
    fs::remove(temporary_path_, ignored);
    throw Error(fmt::format("{}: {}: {}", path_.string(), what, libav::error_string(code)));
  };

  const char* muxer = state.gif ? "gif" : "mp4";
  const std::string encoder_name = state.gif ? "gif" : mp4_encoder_name();
  const AVCodec* encoder = api().avcodec_find_encoder_by_name(encoder_name.c_str());
  if (encoder == nullptr) {
    throw Error(fmt::format("{}: this FFmpeg build has no '{}' encoder", path_.string(), encoder_name));
  }
  AVFormatContext* raw_format = nullptr;
  int result = api().avformat_alloc_output_context2(&raw_format, nullptr, muxer, temporary_path_.string().c_str());
  if (result < 0 || raw_format == nullptr) fail(fmt::format("cannot create the {} muxer", muxer), result);
  state.format.reset(raw_format);
  state.stream = api().avformat_new_stream(raw_format, nullptr);
  state.codec.reset(api().avcodec_alloc_context3(encoder));
  if (state.stream == nullptr || !state.codec) fail("cannot allocate the encoder", AVERROR(ENOMEM));

  AVCodecContext* codec = state.codec.get();
  const AVRational rate = api().av_d2q(options.fps, 100000);
  codec->width = static_cast<int>(width);
  codec->height = static_cast<int>(height);
  codec->time_base = av_inv_q(rate);
  codec->framerate = rate;
  codec->pix_fmt = state.gif ? AV_PIX_FMT_PAL8 : AV_PIX_FMT_YUV420P;
  codec->thread_count = 1;
  if (encoder_name == "libx264") {
    api().av_opt_set(codec->priv_data, "crf", std::to_string(options.mp4_crf).c_str(), 0);
    api().av_opt_set(codec->priv_data, "preset", "medium", 0);
  } else if (encoder_name == "mpeg4") {
    codec->gop_size = 12;
    codec->flags |= AV_CODEC_FLAG_QSCALE;
    codec->global_quality = FF_QP2LAMBDA * std::clamp(options.mp4_crf / 6, 1, 31);
  }
  if (raw_format->oformat->flags & AVFMT_GLOBALHEADER) codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  result = api().avcodec_open2(codec, encoder, nullptr);
  if (result < 0) fail(fmt::format("cannot open the '{}' encoder", encoder_name), result);
  result = api().avcodec_parameters_from_context(state.stream->codecpar, codec);
  if (result < 0) fail("cannot configure the stream", result);
  state.stream->time_base = codec->time_base;
  state.stream->avg_frame_rate = rate;
  result = api().avio_open(&raw_format->pb, temporary_path_.string().c_str(), AVIO_FLAG_WRITE);
  if (result < 0) fail(fmt::format("cannot create {}", temporary_path_.string()), result);
  result = api().avformat_write_header(raw_format, nullptr);
  if (result < 0) fail("cannot write the header", result);

  state.frame.reset(api().av_frame_alloc());
  state.packet.reset(api().av_packet_alloc());
  if (!state.frame || !state.packet) fail("cannot allocate frames", AVERROR(ENOMEM));
  state.frame->format = codec->pix_fmt;
  state.frame->width = codec->width;
  state.frame->height = codec->height;
  result = api().av_frame_get_buffer(state.frame.get(), 0);
  if (result < 0) fail("cannot allocate frames", result);
  if (!state.gif) {
    state.scaler.reset(api().sws_getContext(codec->width, codec->height, AV_PIX_FMT_RGB24, codec->width,
                                            codec->height, codec->pix_fmt, SWS_BICUBIC | SWS_ACCURATE_RND, nullptr,
                                            nullptr, nullptr));
    if (!state.scaler) fail("cannot create the RGB to YUV converter", AVERROR(EINVAL));
  }
#else
  (void)options;
  throw Error(fmt::format("{}: cannot encode video: tune was built without FFmpeg (configure with "
                          "-DTUNE_WITH_FFMPEG=ON and install libavformat-dev libavcodec-dev libswscale-dev "
                          "libavutil-dev)",
                          path_.string()));
#endif
}

VideoWriter::~VideoWriter() {
  if (state_) {
    state_.reset();
    std::error_code ignored;
    fs::remove(temporary_path_, ignored);
  }
}

#ifdef TUNE_HAVE_FFMPEG
namespace {

// Sends one frame (nullptr flushes) and writes every packet the encoder hands back.
void encode(const fs::path& path, AVFormatContext* format, AVCodecContext* codec, AVStream* stream, AVPacket* packet,
            const AVFrame* frame) {
  int result = api().avcodec_send_frame(codec, frame);
  if (result < 0) throw Error(fmt::format("{}: encoding failed: {}", path.string(), libav::error_string(result)));
  while (true) {
    result = api().avcodec_receive_packet(codec, packet);
    if (result == AVERROR(EAGAIN) || result == AVERROR_EOF) return;
    if (result < 0) throw Error(fmt::format("{}: encoding failed: {}", path.string(), libav::error_string(result)));
    // Encoders may leave durations unset; the mp4 muxer then cuts the last frame from its edit list.
    if (packet->duration <= 0) packet->duration = 1;
    api().av_packet_rescale_ts(packet, codec->time_base, stream->time_base);
    packet->stream_index = stream->index;
    result = api().av_interleaved_write_frame(format, packet);  // takes the packet's reference
    if (result < 0) throw Error(fmt::format("{}: writing failed: {}", path.string(), libav::error_string(result)));
  }
}

}  // namespace
#endif

void VideoWriter::write(const torch::Tensor& frames) {
  if (!state_) throw Error(fmt::format("{}: write() after finish()", path_.string()));
  const auto rgb = frames_to_uint8(frames);
  if (rgb.size(1) != height_ || rgb.size(2) != width_) {
    throw Error(fmt::format("{}: frames are {}x{} but the writer was opened for {}x{}", path_.string(), rgb.size(2),
                            rgb.size(1), width_, height_));
  }
#ifdef TUNE_HAVE_FFMPEG
  State& state = *state_;
  AVFrame* frame = state.frame.get();
  const uint8_t* data = rgb.data_ptr<uint8_t>();
  const int64_t row_bytes = width_ * 3;
  for (int64_t f = 0; f < rgb.size(0); ++f) {
    const uint8_t* source = data + f * height_ * row_bytes;
    int result = api().av_frame_make_writable(frame);
    if (result < 0) throw Error(fmt::format("{}: cannot allocate frames: {}", path_.string(), libav::error_string(result)));
    if (state.gif) {
      auto* palette = reinterpret_cast<uint32_t*>(frame->data[1]);
      for (int index = 0; index < 256; ++index) palette[index] = 0xFF000000u;  // opaque black for unused entries
      for (int r = 0; r < kRedLevels; ++r) {
        for (int g = 0; g < kGreenLevels; ++g) {
          for (int b = 0; b < kBlueLevels; ++b) {
            palette[(r * kGreenLevels + g) * kBlueLevels + b] =
                0xFF000000u | uint32_t(value_of(r, kRedLevels)) << 16 | uint32_t(value_of(g, kGreenLevels)) << 8 |
                uint32_t(value_of(b, kBlueLevels));
          }
        }
      }
      for (int64_t y = 0; y < height_; ++y) {
        const uint8_t* pixel = source + y * row_bytes;
        uint8_t* out = frame->data[0] + y * frame->linesize[0];
        for (int64_t x = 0; x < width_; ++x, pixel += 3) {
          out[x] = static_cast<uint8_t>(
              (level_of(pixel[0], kRedLevels) * kGreenLevels + level_of(pixel[1], kGreenLevels)) * kBlueLevels +
              level_of(pixel[2], kBlueLevels));
        }
      }
    } else {
      const uint8_t* sources[4] = {source, nullptr, nullptr, nullptr};
      const int strides[4] = {static_cast<int>(row_bytes), 0, 0, 0};
      api().sws_scale(state.scaler.get(), sources, strides, 0, static_cast<int>(height_), frame->data, frame->linesize);
    }
    frame->pts = frames_written_;
    encode(path_, state.format.get(), state.codec.get(), state.stream, state.packet.get(), frame);
    ++frames_written_;
  }
#endif
}

void VideoWriter::finish() {
  if (!state_) throw Error(fmt::format("{}: finish() called twice", path_.string()));
#ifdef TUNE_HAVE_FFMPEG
  State& state = *state_;
  if (frames_written_ == 0) throw Error(fmt::format("{}: no frames were written", path_.string()));
  encode(path_, state.format.get(), state.codec.get(), state.stream, state.packet.get(), nullptr);
  int result = api().av_write_trailer(state.format.get());
  if (result < 0) throw Error(fmt::format("{}: cannot finish the file: {}", path_.string(), libav::error_string(result)));
  result = api().avio_closep(&state.format->pb);
  if (result < 0) throw Error(fmt::format("{}: cannot close the file: {}", path_.string(), libav::error_string(result)));
  state_.reset();
  std::error_code error;
  fs::rename(temporary_path_, path_, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary_path_, ignored);
    throw Error(fmt::format("{}: cannot rename {} into place: {}", path_.string(), temporary_path_.string(),
                            error.message()));
  }
#endif
}

void write_video(const fs::path& path, const torch::Tensor& frames, double fps) {
  const auto rgb = frames_to_uint8(frames);
  VideoWriterOptions options;
  options.fps = fps;
  VideoWriter writer(path, rgb.size(2), rgb.size(1), options);
  writer.write(rgb);
  writer.finish();
}

}  // namespace tune::data
