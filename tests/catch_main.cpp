// The Catch2 entry point shared by all unit-test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "tune/precision/cpu_gemm.h"

// The tests run the matrix-product kernels that the tune binary runs (precision/cpu_gemm.h), installed before
// any test case.
static const bool cpu_gemm_installed = (tune::precision::install_cpu_gemm(), true);
