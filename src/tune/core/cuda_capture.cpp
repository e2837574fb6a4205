#include "tune/core/cuda_capture.h"

#if defined(TUNE_WITH_CUDA)
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace tune {

#if defined(TUNE_WITH_CUDA)
bool cuda_stream_capturing() {
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
}
#else
bool cuda_stream_capturing() { return false; }
#endif

}  // namespace tune
