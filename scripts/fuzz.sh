#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 30)
# Seeds come from the golden checkpoints and configs; crashes are saved under
# build-fuzz/crashes/ and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
CXX=${CXX_FUZZ:-clang++} cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DM2_FUZZ=ON -DM2_SANITIZE=ON -DM2_BUILD_TESTS=OFF >/dev/null
ninja -C build-fuzz fuzz_safetensors_header fuzz_model_config >/dev/null
mkdir -p build-fuzz/crashes build-fuzz/corpus/safetensors build-fuzz/corpus/config
# Seeds: real headers (first 64 KiB of each golden file) and real configs.
i=0
for f in testdata/golden/*/*.safetensors; do
  head -c 65536 "$f" > "build-fuzz/corpus/safetensors/seed$i"; i=$((i + 1))
done
cp testdata/golden/*/config.json build-fuzz/corpus/config/ 2>/dev/null || true
for d in testdata/golden/*/; do cp "$d/config.json" "build-fuzz/corpus/config/$(basename "$d").json"; done
cp ../shared/reference/minimax-m2/config.json build-fuzz/corpus/config/reference.json 2>/dev/null || true
run() {
  local target=$1 corpus=$2
  echo "fuzzing $target for ${secs}s"
  ./build-fuzz/fuzz/$target -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 "$corpus" 2>&1 | grep -E "^(stat::number_of_executed_units|Done|==|SUMMARY)" || true
  if ls build-fuzz/crashes/ | grep -q .; then echo "fuzz: $target found a crash, see build-fuzz/crashes/"; exit 1; fi
}
run fuzz_safetensors_header build-fuzz/corpus/safetensors
run fuzz_model_config build-fuzz/corpus/config
echo "fuzz: no crashes"
