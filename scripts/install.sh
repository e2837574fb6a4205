#!/usr/bin/env bash
# Builds tune (scripts/build.sh: dependencies, virtual environment, build/) and installs it so that `tune` is a
# command: PREFIX/bin/tune, PREFIX/lib/libtune_sentencepiece.so, the shipped recipes and presets in PREFIX/share/tune.
#   scripts/install.sh [PREFIX]     (default: $PREFIX, else ~/.local)
# The installed binary keeps using the LibTorch of this checkout's .venv (its run-time path points there).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-${PREFIX:-$HOME/.local}}
bash scripts/build.sh
cmake --install build --prefix "$prefix" >/dev/null
echo "installed $prefix/bin/tune ($("$prefix/bin/tune" --version))"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH; add it with: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
