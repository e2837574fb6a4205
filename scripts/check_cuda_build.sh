#!/usr/bin/env bash
# CUDA compile-and-link check, on a machine without a GPU or a system CUDA toolkit.
#
# tune's CUDA-only code (#if defined(TUNE_WITH_CUDA): the caching allocator's statistics, ...) is compiled only
# against a CUDA LibTorch, which the CPU build never sees. This script builds every library and app, and the test
# executables with CUDA cases or CUDA-only code paths (CUDA_TESTS below), against the CUDA 13 build of torch from
# PyPI, with the CUDA toolkit assembled from NVIDIA's pip wheels, and links them. The other test executables are
# host code that the CPU build compiles (they differ from it only in LibTorch's headers): --all builds them too,
# as this script did before CI's time had to fit 60 minutes (issue 28). It runs nothing: no GPU is needed.
#
#   bash scripts/check_cuda_build.sh [--configure-only | --all] [extra cmake args...]
#
# Steps:
#   1. .venv-cuda/: torch (CUDA build) and the nvcc/header wheels that its CMake config needs (skipped when present).
#   2. build-cuda/cuda-toolkit/: a symlink tree that looks like /usr/local/cuda, made from the wheels.
#   3. configure build-cuda/ against that torch's LibTorch; require "tune: LibTorch with CUDA" (TUNE_WITH_CUDA=1).
#   4. build all targets (nice'd: it is a long build on a small machine).
# Exit 0 with a one-line summary on success; non-zero with the failing step's output otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/.venv-cuda
build=$root/build-cuda
toolkit=$build/cuda-toolkit

# torch 2.14.1 on PyPI is built against CUDA 13.0 and depends on cuda-toolkit[cudart,cublas,...]==13.0.3 (runtime
# libraries and headers, cuda.h included). torch's CMake config also needs a CUDA compiler: it enables the CUDA
# language, and CMake identifies nvcc by compiling and linking a test program. Asking for the same cuda-toolkit
# release with the nvcc extra brings nvcc, its crt/ headers and nvvm (cicc, libdevice) of exactly the toolkit torch
# was built with: a plain `pip install nvidia-cuda-nvcc` takes the newest (13.5), and Caffe2's cuda.cmake rejects an
# nvcc whose version differs from the runtime headers'. The cccl extra (libcu++'s headers, nv/target) is needed by
# c10d's ProcessGroupNCCL.hpp, which includes cuda_fp16.h (tune compiles no .cu file).
torch_version=2.14.1
cuda_toolkit_version=13.0.3
packages=("torch==$torch_version" "cuda-toolkit[nvcc,cccl]==$cuda_toolkit_version")

configure_only=0
all_targets=0
if [[ ${1:-} == --configure-only ]]; then
  configure_only=1
  shift
elif [[ ${1:-} == --all ]]; then
  all_targets=1
  shift
fi
# Test executables whose sources have CUDA cases ("[cuda]") or CUDA-only code paths: keep in step with
# `grep -rli cuda tests --include=*.cpp`.
CUDA_TESTS=(test_core test_memory test_nn test_precision test_train)

log() { echo "check_cuda_build: $*" >&2; }
fail() {
  log "FAILED: $1"
  [[ -n ${2:-} && -f $2 ]] && tail -n "${3:-60}" "$2" >&2
  exit 1
}

# ---- 1. virtual environment -------------------------------------------------------------------------------------
# The torch wheel is cp311: make the venv with Python 3.11.
if [[ ! -x $venv/bin/python ]]; then
  python=$(command -v python3.11 || command -v python3)
  log "creating $venv with $python"
  "$python" -m venv "$venv"
fi
# Installed: torch and cuda-toolkit at the pinned versions, and the compiler wheels of the same CUDA major.minor
# (an nvcc from a later `pip install -U` would not match the runtime headers).
installed() {
  "$venv/bin/python" - "$torch_version" "$cuda_toolkit_version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
torch_version, toolkit_version = sys.argv[1:]
assert version("torch") == torch_version
assert version("cuda-toolkit").split(".")[:3] == toolkit_version.split(".")  # installed as 13.0.3.0
cuda = ".".join(toolkit_version.split(".")[:2]) + "."
for name in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-cccl"):
    assert version(name).startswith(cuda), name
PY
}
if ! installed; then
  log "installing ${packages[*]} into $venv (several GB)"
  "$venv/bin/pip" install --quiet "${packages[@]}" || fail "pip install ${packages[*]}"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# (stderr dropped: importing torch warns that NumPy is missing, which does not matter here)
torch_prefix=$("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)

# ---- 2. toolkit root from the wheels ----------------------------------------------------------------------------
# The CUDA 13 wheels install into one directory, nvidia/cu13/{bin,include,lib,nvvm}, which is nearly a toolkit root.
# What CMake's FindCUDAToolkit / torch's FindCUDA need and the wheels lack:
#   - lib64/: FindCUDAToolkit looks for libraries under lib64 (torch's copy), FindCUDA under lib64 or lib;
#   - unversioned libX.so names: the wheels ship only the runtime names (libcudart.so.13, libnvrtc.so.13, ...),
#     and find_library(cudart) looks for libcudart.so.
# The driver library (libcuda.so) is in no wheel, stubs included: it comes with the GPU driver. No stub is needed:
# TorchConfig links libtorch, libtorch_cpu, libtorch_cuda, libc10(_cuda), libcudart and libnvrtc, none of which has
# libcuda.so.1 as a DT_NEEDED (libcudart loads the driver with dlopen; only libcaffe2_nvrtc.so needs it, and torch
# dlopens that one). FindCUDAToolkit then just leaves CUDA::cuda_driver undefined, which nothing here links.
# The libraries' own dependencies (cuBLAS, cuDNN, NCCL, ...) are found by the linker through libtorch_cuda.so's
# RPATH ($ORIGIN/../../nvidia/...), so they need no -rpath-link either.
# nvcc.profile finds everything relative to nvcc as called ($TOP = <dir of nvcc>/..): include/, nvvm/ (cicc), and
# lib64/ (libcudart_static.a, libcudadevrt.a). bin/ is therefore a real directory of per-file links: a link to the
# wheel's bin/ directory would make bin/.. resolve to the wheel's directory, which has lib/ but no lib64/.
cu13=$site/nvidia/cu13
[[ -x $cu13/bin/nvcc ]] || fail "no nvcc in $cu13/bin (nvidia-cuda-nvcc wheel missing?)"
rm -rf "$toolkit"
mkdir -p "$toolkit/bin" "$toolkit/lib64"
ln -s "$cu13"/bin/* "$toolkit/bin/"
ln -s "$cu13/nvvm" "$toolkit/nvvm"
ln -s "$cu13/include" "$toolkit/include"
ln -s lib64 "$toolkit/lib"
for file in "$cu13"/lib/lib*; do
  name=$(basename "$file")
  ln -s "$file" "$toolkit/lib64/$name"
  # libfoo.so.13 -> also libfoo.so (the link-time name).
  if [[ $name =~ ^(lib.+\.so)\.[0-9]+$ && ! -e $toolkit/lib64/${BASH_REMATCH[1]} ]]; then
    ln -s "$name" "$toolkit/lib64/${BASH_REMATCH[1]}"
  fi
done
nvcc_version=$("$toolkit/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')

# ---- 3. configure -------------------------------------------------------------------------------------------------
# TORCH_CUDA_ARCH_LIST: torch's cuda.cmake otherwise queries the GPU to choose architectures. The environment
# variable is what torch_cuda_get_nvcc_gencode_flag reads. tune compiles no .cu file, so the choice only matters
# for CMake's checks.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export CUDA_HOME=$toolkit PATH=$toolkit/bin:$PATH
mkdir -p "$build"
configure_log=$build/configure.log
log "configuring $build (LibTorch $torch_version from $torch_prefix, nvcc $nvcc_version)"
# clang++, as scripts/build.sh. Nothing built here runs, so nothing is optimised: -O0 halves clang's time per file
# (src/tune/recipes/sana/sana_infer.cpp: 12.1 s against 22.6 s at -O3, measured side by side), and whether a file
# compiles and the programs link does not depend on the optimisation level.
source scripts/compiler.sh
cxx=$(tune_cxx_compiler "$build")
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCUDAToolkit_ROOT="$toolkit" -DCUDA_TOOLKIT_ROOT_DIR="$toolkit" \
    -DCMAKE_CUDA_COMPILER="$toolkit/bin/nvcc" \
    "$@" >"$configure_log" 2>&1; then
  fail "cmake configure (full log: $configure_log)" "$configure_log"
fi
grep -q 'tune: LibTorch with CUDA' "$configure_log" ||
  fail "configured, but the project did not print 'tune: LibTorch with CUDA' (TUNE_WITH_CUDA not defined)" \
    "$configure_log"

if ((configure_only)); then
  echo "check_cuda_build: OK: configured $build against CUDA LibTorch $torch_version (CUDA $nvcc_version, TUNE_WITH_CUDA=1)"
  exit 0
fi

# ---- 4. build -----------------------------------------------------------------------------------------------------
build_log=$build/build.log
jobs=$(nproc 2>/dev/null || echo 2)
target_args=()
if ((all_targets)); then
  log "building all targets with -j$jobs (log: $build_log)"
else
  # Every library is a dependency of the tune binary; the benchmark apps and the CUDA tests follow.
  target_args=(--target tune tune-bench tune-bench-attention tune-bench-tokenizer "${CUDA_TESTS[@]}")
  log "building the libraries, apps and ${CUDA_TESTS[*]} with -j$jobs (log: $build_log)"
fi
start=$SECONDS
# -k 0: keep going past a failed compile, so one run reports every file that does not build.
if ! nice -n 10 cmake --build "$build" -j"$jobs" "${target_args[@]}" -- -k 0 >"$build_log" 2>&1; then
  # Ninja prints "FAILED: <output>" before each failed command's diagnostics: show those and the errors themselves
  # (compiler and linker), else the end of the log.
  if grep -q '^FAILED:' "$build_log"; then
    grep -E '^FAILED:|error:|undefined reference|ld returned' "$build_log" | head -n 80 >&2
    fail "build: $(grep -c '^FAILED:' "$build_log") failed step(s) (full log: $build_log)"
  fi
  fail "build (full log: $build_log)" "$build_log"
fi
targets=$(find "$build" -type f -perm -u+x \( -path "$build/apps/*" -o -path "$build/tests/*" \) ! -name '*.so' \
  ! -path '*/CMakeFiles/*' | wc -l)
echo "check_cuda_build: OK: tune built and linked against CUDA LibTorch $torch_version (CUDA $nvcc_version," \
  "TUNE_WITH_CUDA=1), $targets executables, in $((SECONDS - start)) s"
