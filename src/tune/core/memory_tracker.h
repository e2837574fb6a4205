// Measured memory: a tracking CPU allocator (installed with c10::SetCPUAllocator) counting live and peak bytes of
// tensor storage, and the CUDA caching allocator's statistics when running on CUDA.
#pragma once

#include <cstdint>

namespace tune::memory_tracker {

// Installs the tracking CPU allocator (idempotent) and tells glibc's malloc to keep freed memory for reuse (see
// memory_tracker.cpp). Must run before large tensors are allocated; storage allocated earlier is freed through its
// original deleter and never counted negative.
void install();
bool installed();

int64_t cpu_live_bytes();
int64_t cpu_peak_bytes();
void reset_cpu_peak();  // peak := live

// Live and peak bytes on the device in use: the CUDA caching allocator's counters (torch.cuda.memory_allocated /
// max_memory_allocated) when `cuda` is true, else the CPU tracker's.
int64_t live_bytes(bool cuda);
int64_t peak_bytes(bool cuda);
void reset_peak(bool cuda);

}  // namespace tune::memory_tracker
