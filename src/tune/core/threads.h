// Intra-op thread count. LibTorch starts with one thread on some builds; we set it from the machine.
#pragma once

namespace tune {

// requested <= 0 means every core of the machine. Returns the number now in use. Also flushes denormal floats
// to zero (see threads.cpp).
int configure_threads(int requested);

}  // namespace tune
