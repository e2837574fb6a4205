// Internal to the video sources: FFmpeg's functions (libav_api.h), owning pointers for libav objects, and the
// conversion of decoded frames to packed RGB24. Included only by video_*.cpp, and only when built with FFmpeg (TUNE_HAVE_FFMPEG).
#pragma once

#include "tune/data/libav_api.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tune::data::libav {

inline std::string error_string(int code) {
  char buffer[AV_ERROR_MAX_STRING_SIZE] = {0};
  api().av_strerror(code, buffer, sizeof(buffer));
  return buffer;
}

// libav prints its own diagnostics to stderr; ours carry the file name, so only its errors stay visible.
inline void limit_library_logging() {
  static const bool once = [] {
    api().av_log_set_level(AV_LOG_ERROR);
    return true;
  }();
  (void)once;
}

struct InputDeleter {
  void operator()(AVFormatContext* context) const { api().avformat_close_input(&context); }
};
struct OutputDeleter {
  void operator()(AVFormatContext* context) const {
    if (context->pb != nullptr && !(context->oformat->flags & AVFMT_NOFILE)) api().avio_closep(&context->pb);
    api().avformat_free_context(context);
  }
};
struct CodecDeleter {
  void operator()(AVCodecContext* context) const { api().avcodec_free_context(&context); }
};
struct FrameDeleter {
  void operator()(AVFrame* frame) const { api().av_frame_free(&frame); }
};
struct PacketDeleter {
  void operator()(AVPacket* packet) const { api().av_packet_free(&packet); }
};
struct ScalerDeleter {
  void operator()(SwsContext* context) const { api().sws_freeContext(context); }
};
using InputPtr = std::unique_ptr<AVFormatContext, InputDeleter>;
using OutputPtr = std::unique_ptr<AVFormatContext, OutputDeleter>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using ScalerPtr = std::unique_ptr<SwsContext, ScalerDeleter>;

inline bool is_full_range_yuv_format(AVPixelFormat format) {
  return format == AV_PIX_FMT_YUVJ420P || format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P ||
         format == AV_PIX_FMT_YUVJ440P || format == AV_PIX_FMT_YUVJ411P;
}

// Converts decoded frames of any pixel format to packed RGB24, honouring the frame's YUV matrix and range
// (swscale alone assumes BT.601 limited range).
class RgbConverter {
 public:
  // Writes height rows of width*3 bytes to `destination`.
  bool convert(const AVFrame* frame, uint8_t* destination) {
    const auto format = static_cast<AVPixelFormat>(frame->format);
    SwsContext* context = api().sws_getCachedContext(scaler_.release(), frame->width, frame->height, format,
                                                     frame->width, frame->height, AV_PIX_FMT_RGB24,
                                                     SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr,
                                                     nullptr, nullptr);
    scaler_.reset(context);
    if (context == nullptr) return false;
    const AVPixFmtDescriptor* descriptor = api().av_pix_fmt_desc_get(format);
    const bool yuv = descriptor != nullptr && !(descriptor->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL)) &&
                     descriptor->nb_components >= 3;
    if (yuv) {
      const int full_range = (frame->color_range == AVCOL_RANGE_JPEG || is_full_range_yuv_format(format)) ? 1 : 0;
      const int matrix = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : int(frame->colorspace);
      api().sws_setColorspaceDetails(context, api().sws_getCoefficients(matrix), full_range,
                                     api().sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    }
    uint8_t* destinations[4] = {destination, nullptr, nullptr, nullptr};
    int strides[4] = {frame->width * 3, 0, 0, 0};
    return api().sws_scale(context, frame->data, frame->linesize, 0, frame->height, destinations, strides) ==
           frame->height;
  }

 private:
  ScalerPtr scaler_;
};

}  // namespace tune::data::libav
