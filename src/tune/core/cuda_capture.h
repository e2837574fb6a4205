// Whether the calling thread's current CUDA stream is being captured into a CUDA graph: some work (reading a CUDA
// generator's state, a synchronising copy) is illegal then, and code that would do it has to know.
#pragma once

namespace tune {

// False on a LibTorch without CUDA, and where the current stream is not capturing. Call only where CUDA is in use
// already (it asks the driver about the current stream).
bool cuda_stream_capturing();

}  // namespace tune
