// A parallel loop over LibTorch's intra-op threads, for tune's own CPU kernels.
//
// Why not at::parallel_for: it is a header template whose parallel branch exists only where the including file is
// compiled with OpenMP (`#ifdef _OPENMP`), against the runtime LibTorch's CPU wheel ships (GNU libgomp). tune is built
// with clang, whose OpenMP code generation targets LLVM's runtime instead, so in tune's sources at::parallel_for ran
// its body serially: the GELU and softmax kernels and the NF4 dequantisation took one core whatever `threads` said
// (found when Latte's step scaled 1.66x from one thread to two against the official code's 1.89x). This goes through
// TensorIteratorBase::for_each, compiled inside LibTorch with its OpenMP, which splits a small tensor of work-chunk
// indices over the intra-op threads as at::parallel_for would.
#pragma once

#include <cstdint>
#include <functional>

namespace tune {

// Calls f(chunk_begin, chunk_end) over [begin, end) split into at most at::get_num_threads() contiguous chunks of
// nearly equal size, none under `grain` items, in parallel; one call f(begin, end) when there is one thread, fewer
// than two grains of work, or when called inside a parallel region. An exception thrown by f reaches the caller.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

}  // namespace tune
