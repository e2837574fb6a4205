// Encoding one RGB image to .png or .jpg with libavcodec and the image2 muxer (see image_writer.h).
#include "tune/data/image_writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <system_error>

#include "tune/core/error.h"
#include "tune/data/file_extension.h"
#include "tune/data/video_writer.h"

#ifdef TUNE_HAVE_FFMPEG
#include "tune/data/video_libav.h"
#endif

namespace tune::data {

#ifdef TUNE_HAVE_FFMPEG
using libav::api;  // FFmpeg's functions, loaded on first use (libav_api.h)
#endif

namespace fs = std::filesystem;

const std::vector<std::string>& image_writer_extensions() {
  static const std::vector<std::string> extensions = {".png", ".jpg", ".jpeg"};
  return extensions;
}

torch::Tensor image_to_uint8(const torch::Tensor& image) {
  // One rule for frames and images: a sample saved as an image and as a one-frame video has the same pixels.
  const bool rgb = image.dim() == 3 && image.scalar_type() == torch::kUInt8 && image.size(2) == 3;
  const bool model_layout = image.dim() == 3 && image.is_floating_point() && image.size(0) == 3;
  if (rgb || model_layout) return frames_to_uint8(image.unsqueeze(0))[0];
  throw Error(fmt::format("an image must be uint8 [H, W, 3] or float [3, H, W] in [-1, 1]; got {} {}",
                          std::string(c10::toString(image.scalar_type())), c10::str(image.sizes())));
}

#ifdef TUNE_HAVE_FFMPEG
namespace {

// Removes the temporary file unless the image reached its final name.
struct TemporaryFile {
  fs::path path;
  bool keep = false;
  ~TemporaryFile() {
    if (keep) return;
    std::error_code ignored;
    fs::remove(path, ignored);
  }
};

// Encodes `rgb` (uint8 [H, W, 3], contiguous) into `temporary` through the image2 muxer.
void encode_image(const fs::path& path, const fs::path& temporary, const torch::Tensor& rgb, bool png,
                  const ImageWriterOptions& options) {
  auto fail = [&](const std::string& what, int code) {
    throw Error(fmt::format("{}: {}: {}", path.string(), what, libav::error_string(code)));
  };
  const AVCodecID codec_id = png ? AV_CODEC_ID_PNG : AV_CODEC_ID_MJPEG;
  const AVCodec* encoder = api().avcodec_find_encoder(codec_id);
  if (encoder == nullptr) {
    throw Error(fmt::format("{}: this FFmpeg build has no '{}' encoder", path.string(),
                            api().avcodec_get_name(codec_id)));
  }
  AVFormatContext* raw_format = nullptr;
  int result = api().avformat_alloc_output_context2(&raw_format, nullptr, "image2", temporary.string().c_str());
  if (result < 0 || raw_format == nullptr) fail("cannot create the image2 muxer", result);
  libav::OutputPtr format(raw_format);
  // image2 reads its file name as a pattern (img%03d.png); "update" makes it write exactly the name given, so a '%'
  // in a user's path is just a character and a single frame needs no number.
  api().av_opt_set(raw_format->priv_data, "update", "1", 0);
  AVStream* stream = api().avformat_new_stream(raw_format, nullptr);
  libav::CodecPtr codec(api().avcodec_alloc_context3(encoder));
  if (stream == nullptr || !codec) fail("cannot allocate the encoder", AVERROR(ENOMEM));

  const int height = static_cast<int>(rgb.size(0)), width = static_cast<int>(rgb.size(1));
  codec->width = width;
  codec->height = height;
  codec->time_base = AVRational{1, 1};
  codec->thread_count = 1;
  if (png) {
    codec->pix_fmt = AV_PIX_FMT_RGB24;
  } else {
    // 4:4:4 keeps colour edges sharp (samples are small; 4:2:0 would halve their chroma), full range keeps all 256
    // levels; yuvj444p is how this FFmpeg's mjpeg encoder spells full-range 4:4:4 (JFIF's YCbCr).
    codec->pix_fmt = AV_PIX_FMT_YUVJ444P;
    codec->color_range = AVCOL_RANGE_JPEG;
    codec->colorspace = AVCOL_SPC_BT470BG;  // JFIF's matrix is BT.601
    const int quality = std::clamp(options.jpeg_quality, 1, 31);
    codec->flags |= AV_CODEC_FLAG_QSCALE;
    codec->global_quality = FF_QP2LAMBDA * quality;
    codec->qmin = std::min(codec->qmin, quality);  // the default floor (2) would override a requested 1
  }
  result = api().avcodec_open2(codec.get(), encoder, nullptr);
  if (result < 0) fail(fmt::format("cannot open the '{}' encoder", encoder->name), result);
  result = api().avcodec_parameters_from_context(stream->codecpar, codec.get());
  if (result < 0) fail("cannot configure the stream", result);
  stream->time_base = codec->time_base;
  // image2 opens the output file itself (AVFMT_NOFILE), so there is no avio_open here.
  result = api().avformat_write_header(raw_format, nullptr);
  if (result < 0) fail(fmt::format("cannot create {}", temporary.string()), result);

  libav::FramePtr frame(api().av_frame_alloc());
  libav::PacketPtr packet(api().av_packet_alloc());
  if (!frame || !packet) fail("cannot allocate frames", AVERROR(ENOMEM));
  frame->format = codec->pix_fmt;
  frame->width = width;
  frame->height = height;
  frame->color_range = codec->color_range;
  frame->colorspace = codec->colorspace;
  result = api().av_frame_get_buffer(frame.get(), 0);
  if (result < 0) fail("cannot allocate frames", result);
  const uint8_t* source = rgb.data_ptr<uint8_t>();
  const int row_bytes = width * 3;
  if (png) {
    for (int y = 0; y < height; ++y) {
      std::copy(source + int64_t(y) * row_bytes, source + int64_t(y + 1) * row_bytes,
                frame->data[0] + int64_t(y) * frame->linesize[0]);
    }
  } else {
    // Full chroma on input: swscale otherwise averages RGB pixel pairs before computing chroma, a 4:2:2 step that
    // 4:4:4 output does not need.
    constexpr int kFlags = SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP | SWS_FULL_CHR_H_INT;
    libav::ScalerPtr scaler(api().sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height,
                                                 AV_PIX_FMT_YUVJ444P, kFlags, nullptr, nullptr, nullptr));
    if (!scaler) fail("cannot create the RGB to YCbCr converter", AVERROR(EINVAL));
    const int* bt601 = api().sws_getCoefficients(SWS_CS_ITU601);
    api().sws_setColorspaceDetails(scaler.get(), bt601, 1, bt601, 1, 0, 1 << 16, 1 << 16);
    const uint8_t* sources[4] = {source, nullptr, nullptr, nullptr};
    const int strides[4] = {row_bytes, 0, 0, 0};
    api().sws_scale(scaler.get(), sources, strides, 0, height, frame->data, frame->linesize);
  }
  frame->pts = 0;

  // One frame, then the flush; every packet goes to the muxer (png and mjpeg give exactly one).
  for (const AVFrame* input : {static_cast<const AVFrame*>(frame.get()), static_cast<const AVFrame*>(nullptr)}) {
    result = api().avcodec_send_frame(codec.get(), input);
    if (result < 0) fail("encoding failed", result);
    while ((result = api().avcodec_receive_packet(codec.get(), packet.get())) >= 0) {
      packet->stream_index = stream->index;
      result = api().av_write_frame(raw_format, packet.get());
      api().av_packet_unref(packet.get());
      if (result < 0) fail(fmt::format("cannot write {}", temporary.string()), result);
    }
    if (result != AVERROR(EAGAIN) && result != AVERROR_EOF) fail("encoding failed", result);
  }
  result = api().av_write_trailer(raw_format);
  if (result < 0) fail("cannot finish the file", result);
}

}  // namespace
#endif

void write_image(const fs::path& path, const torch::Tensor& image, ImageWriterOptions options) {
  const std::string extension = lower_extension(path);
  const auto& accepted = image_writer_extensions();
  if (std::find(accepted.begin(), accepted.end(), extension) == accepted.end()) {
    throw UsageError(fmt::format("{}: unknown image extension '{}'; tune writes {} (PNG lossless, JPEG high quality)",
                                 path.string(), extension, fmt::join(accepted, " ")));
  }
  const auto rgb = image_to_uint8(image);
  if (rgb.size(0) <= 0 || rgb.size(1) <= 0) {
    throw Error(fmt::format("{}: cannot write a {}x{} image", path.string(), rgb.size(1), rgb.size(0)));
  }
#ifdef TUNE_HAVE_FFMPEG
  libav::limit_library_logging();
  TemporaryFile temporary{fs::path(path) += ".tmp"};
  encode_image(path, temporary.path, rgb, extension == ".png", options);
  std::error_code error;
  fs::rename(temporary.path, path, error);
  if (error) {
    throw Error(fmt::format("{}: cannot rename {} into place: {}", path.string(), temporary.path.string(),
                            error.message()));
  }
  temporary.keep = true;
#else
  (void)options;
  throw Error(fmt::format("{}: cannot encode images: tune was built without FFmpeg (configure with "
                          "-DTUNE_WITH_FFMPEG=ON and install libavformat-dev libavcodec-dev libswscale-dev "
                          "libavutil-dev)",
                          path.string()));
#endif
}

}  // namespace tune::data
