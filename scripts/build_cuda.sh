#!/usr/bin/env bash
# Configures and builds tune with CUDA on the GPU machine, against the LibTorch inside that machine's PyTorch wheel
# (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'), in build-cuda/.
#
# The Debian packages tune needs come from .deps/debs (made on the development machine by
# scripts/gpu/pack_deps.sh and carried along): they are unpacked into a private prefix, never over /.
#   bash scripts/build_cuda.sh [extra cmake args...]
# Prints "build_cuda: OK ..." and exits 0 when every target built; the environment it used is written to
# build-cuda/env.sh (source it before running the binaries or ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build-cuda
prefix=${TUNE_DEPS_PREFIX:-/tmp/tune-prefix}
python=${PYTHON:-python3}

if [[ -d .deps/debs ]]; then
  mkdir -p "$prefix"
  for deb in .deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
fi
multiarch=$prefix/usr/lib/x86_64-linux-gnu
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_version=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)')
mkdir -p "$build"
# pkg-config: the .pc files say prefix=/usr; the sysroot maps their -I/-L into the private prefix.
cat >"$build/env.sh" <<ENV
export LD_LIBRARY_PATH=$multiarch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=$prefix/usr/bin:\$PATH
export PKG_CONFIG_PATH=$multiarch/pkgconfig:$prefix/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$prefix
ENV
# shellcheck disable=SC1091
source "$build/env.sh"
command -v pkg-config >/dev/null || ln -sf pkgconf "$prefix/usr/bin/pkg-config"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}

echo "build_cuda: LibTorch $torch_version from $torch_prefix"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr;$multiarch/cmake" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DTUNE_PYTHON="$(command -v "$python")" -DTUNE_WITH_FFMPEG=OFF "$@" >"$build/configure.log" 2>&1 ||
  { tail -n 60 "$build/configure.log"; echo "build_cuda: configure FAILED"; exit 1; }
grep -q 'tune: LibTorch with CUDA' "$build/configure.log" ||
  { tail -n 40 "$build/configure.log"; echo "build_cuda: LibTorch has no CUDA (TUNE_WITH_CUDA not set)"; exit 1; }
start=$SECONDS
# TUNE_BUILD_TARGETS="tune tune-bench" builds only those (a short device session); default: everything.
if ! cmake --build "$build" -j"$(nproc)" ${TUNE_BUILD_TARGETS:+--target $TUNE_BUILD_TARGETS} -- -k 0 \
    >"$build/build.log" 2>&1; then
  grep -E '^FAILED:|error:|undefined reference' "$build/build.log" | head -n 60
  echo "build_cuda: build FAILED (log: $build/build.log)"
  exit 1
fi
echo "build_cuda: OK: built against LibTorch $torch_version in $((SECONDS - start)) s"
