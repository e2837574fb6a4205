// FFmpeg's libav* functions that tune calls, resolved from the shared libraries at first use rather than linked.
// Internal to the video and image sources (included through video_libav.h, only with TUNE_HAVE_FFMPEG).
//
// Why not link them: libavcodec and libavformat bring about 130 shared libraries with them on Debian 12 (every
// codec, TLS, SVG, fonts), which the dynamic loader maps and initialises at every start: ~25 MiB of resident memory
// and startup time for each tune process, including every LLM run and every diffusion run on prepared latents,
// which never touch a video. Resolved on first use, they cost nothing until a video or image is read or written.
// The libraries are the ones the headers were compiled against (their major version in the file name), found by the
// dynamic loader as a linked library would be.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace tune::data::libav {

// Every non-inline libav* function the sources call. A call missing here fails to link (nothing links FFmpeg).
#define TUNE_LIBAV_FUNCTIONS(X)                                                                                     \
  X(av_d2q) X(av_dict_free) X(av_dict_set) X(av_find_best_stream) X(av_frame_alloc) X(av_frame_free)                \
  X(av_frame_get_buffer) X(av_frame_make_writable) X(av_get_pix_fmt_name) X(av_interleaved_write_frame)             \
  X(av_log_set_level) X(av_opt_set) X(av_packet_alloc) X(av_packet_free) X(av_packet_rescale_ts) X(av_packet_unref) \
  X(av_pix_fmt_desc_get) X(av_read_frame) X(av_strerror) X(av_write_frame) X(av_write_trailer)                      \
  X(avcodec_alloc_context3) X(avcodec_find_decoder) X(avcodec_find_encoder) X(avcodec_find_encoder_by_name)         \
  X(avcodec_free_context) X(avcodec_get_name) X(avcodec_open2) X(avcodec_parameters_from_context)                   \
  X(avcodec_parameters_to_context) X(avcodec_receive_frame) X(avcodec_receive_packet) X(avcodec_send_frame)         \
  X(avcodec_send_packet) X(avformat_alloc_output_context2) X(avformat_close_input) X(avformat_find_stream_info)     \
  X(avformat_free_context) X(avformat_new_stream) X(avformat_open_input) X(avformat_write_header) X(avio_closep)    \
  X(avio_open) X(sws_freeContext) X(sws_getCachedContext) X(sws_getCoefficients) X(sws_getContext) X(sws_scale)     \
  X(sws_setColorspaceDetails)

struct Api {
#define TUNE_LIBAV_POINTER(name) decltype(&::name) name = nullptr;
  TUNE_LIBAV_FUNCTIONS(TUNE_LIBAV_POINTER)
#undef TUNE_LIBAV_POINTER
};

// The functions, the libraries loaded on the first call (thread-safe). Throws tune::Error naming the library and
// the package to install when one cannot be loaded; a later call tries again.
const Api& api();

// Whether api() has loaded the libraries in this process (for tests and the debug log).
bool loaded();

}  // namespace tune::data::libav
