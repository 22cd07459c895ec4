#!/usr/bin/env bash
# Builds everything and runs every test with CTest.
#   scripts/test.sh              Release build in build/ (the default compiler, g++ on Debian)
#   scripts/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
#
# The sanitizer build uses clang++ when it is installed (scripts/install_deps.sh installs it):
# at -O0 it compiles this code in about a third less time than g++ with the sanitizers (cmd_bench.cpp:
# 22 s against 34 s), and the same build then also holds the libFuzzer targets, which
# scripts/fuzz.sh runs without a build of its own. Without clang++ it is a g++ build without
# the fuzz targets. CXX_SANITIZE=g++ forces g++.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DM2_SANITIZE=ON)
  cxx=${CXX_SANITIZE:-$(command -v clang++ || echo g++)}
  flags+=(-DCMAKE_CXX_COMPILER="$cxx")
  if "$cxx" --version | grep -q clang; then flags+=(-DM2_FUZZ=ON); else flags+=(-DM2_FUZZ=OFF); fi
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export M2_SANITIZED=1  # the server tests scale their load test down (an ASan build is ~5x slower)
fi
cmake -S . -B "$dir" -G Ninja -DM2_BUILD_TESTS=ON "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
