#!/usr/bin/env bash
# Run on the development machine (Debian 12), in the project's root: downloads the Debian packages that a CUDA
# build of tune needs besides LibTorch into .deps/debs (git-ignored). The GPU machine has PyTorch, nvcc, CMake and
# ninja but no package registry; scripts/build_cuda.sh unpacks these there into a private prefix.
#
# Debian 12's binaries (glibc 2.36, GCC 12, CXX11 ABI) run on the GPU image's newer glibc; their C++ ABI matches
# the torch wheels' LibTorch (built with the CXX11 ABI). FFmpeg (libav*, ~90 MB with its codecs) is left out:
# the CUDA build is configured with TUNE_WITH_FFMPEG=OFF, and tests that need video are not run there.
#   bash scripts/gpu/pack_deps.sh [extra packages...]
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs
packages=(
  libyaml-cpp-dev libyaml-cpp0.7
  libcli11-dev nlohmann-json3-dev catch2
  libsentencepiece-dev libsentencepiece0 sentencepiece libprotobuf-lite32
  libgloo-dev                      # headers only (the wheel's libtorch_cpu holds Gloo itself)
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2  # tokenizer.json
  pkgconf libpkgconf3 pkgconf-bin  # pkg-config for sentencepiece's .pc (the image may lack it)
  "$@"
)
(cd .deps/debs && apt-get download "${packages[@]}" >/dev/null)
echo "pack_deps: $(ls .deps/debs | wc -l) packages, $(du -sh .deps | cut -f1) in .deps/debs"
# bitsandbytes (the QLoRA comparison's reference; its CUDA 13 library is inside the wheel), for the GPU image's
# Python 3.12: into .whl (git-ignored); scripts/gpu/run_all.sh installs it there under /tmp/site. ~43 MB: carry
# .whl only in the calls that run the qlora phase (a call carries at most 64 MiB).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_24_x86_64 -d .whl bitsandbytes==0.50.2
echo "pack_deps: $(ls .whl)"
# diffusers (pure Python; the GPU image has transformers but not diffusers), the Latte-1 comparison's reference and
# what scripts/make_real_size_pipeline.py builds its tensor layout with: into .whl/diffusers (carry only that folder
# in the calls that run the latte1 phase).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl/diffusers diffusers==0.42.1
echo "pack_deps: $(ls .whl/diffusers)"
# einops (pure Python), which the official Latte code imports: into .whl/einops, for run_all.sh's latte_official
# phase. The official code itself cannot be downloaded here (GitHub is not a package registry): put a clone of
# github.com/Vchitect/Latte (its models/ folder is enough) in .whl/latte_official and carry both folders.
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl/einops einops==0.8.2
echo "pack_deps: $(ls .whl/einops)"
