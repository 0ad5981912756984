#!/usr/bin/env bash
# Build llama.cpp's own llama-server (the system to beat) and llama-batched-bench from the
# llama.cpp sources vendored in the llama-cpp-python sdist: the very same llama.cpp qassist runs.
# AMX stays off, as for the Python wheel (it segfaults or computes garbage on these Xeons).
set -euo pipefail
VERSION="${LLAMA_VERSION:-0.3.36}"
DEST="${LLAMA_SERVER_DIR:-$HOME/.cache/qassist/llama-server-$VERSION}"
PYTHON="${PYTHON:-python3}"
if [[ -x "$DEST/bin/llama-server" && -x "$DEST/bin/llama-batched-bench" ]]; then
  echo "$DEST/bin/llama-server"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Only llama-cpp-python from source: with ":all:", pip also builds its build dependencies
# (cmake, ninja) from source to read the sdist's metadata, which takes far longer.
"$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python -d "$work" "llama-cpp-python==$VERSION" >&2
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
flags="-mno-amx-int8 -mno-amx-tile -mno-amx-bf16"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" >&2
cmake --build "$work/build" --target llama-server llama-batched-bench -j "$(nproc)" >&2
mkdir -p "$DEST/bin"
cp "$work"/build/bin/llama-server "$work"/build/bin/llama-batched-bench "$DEST/bin/"
find "$work/build" -name '*.so*' -exec cp -P {} "$DEST/bin/" \; 2>/dev/null || true
echo "$DEST/bin/llama-server"
