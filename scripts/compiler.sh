# Sourced by the build scripts: the C++ compiler tune is built with.
#
# clang++ (Debian's clang 14, which scripts/setup.sh installs), unless CXX names another. Every translation unit
# includes LibTorch's headers through one precompiled header; clang's (CMake passes -fpch-instantiate-templates)
# holds the templates those headers instantiate, while GCC instantiates them again in every file. Measured on 2 cores
# (AMD EPYC): src/tune/models/llama_config.cpp at -O3 with the precompiled header, g++ 12 30.4 s, clang++ 14 10.9 s;
# an empty file 8.8 s and 3.1 s. A clean build of everything took about 70 minutes with g++, more than CI's 90
# minutes once the CUDA compile check ran beside it.
#
#   tune_cxx_compiler BUILD_DIR: prints the compiler to configure BUILD_DIR with. A build directory configured with
#   another compiler is reset first (its CMake cache removed): CMake cannot switch compilers in place.
tune_cxx_compiler() {
  local build_dir=$1 compiler=${CXX:-}
  if [ -z "$compiler" ]; then
    compiler=$(command -v clang++ || command -v c++)
  fi
  compiler=$(command -v "$compiler")
  local cache=$build_dir/CMakeCache.txt
  if [ -f "$cache" ]; then
    local configured
    configured=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
    if [ -n "$configured" ] && [ "$configured" != "$compiler" ]; then
      echo "build: $build_dir was configured with $configured; reconfiguring it with $compiler" >&2
      rm -rf "$cache" "$build_dir/CMakeFiles"
    fi
  fi
  echo "$compiler"
}
