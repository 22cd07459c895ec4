#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 30)
# Seeds come from the golden checkpoints and configs; crashes are saved under
# build-fuzz/crashes/ and make the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
targets=(fuzz_safetensors_header fuzz_model_config fuzz_server_request)
# The sanitizer build of scripts/test.sh --sanitize holds the targets when it was made with
# clang (-O0: fewer runs per second than an optimized build, no second build). Otherwise an
# optimized build of the targets alone in build-fuzz/.
if grep -q "^M2_FUZZ:BOOL=ON" build-asan/CMakeCache.txt 2>/dev/null; then
  bdir=build-asan
else
  bdir=build-fuzz
  CXX=${CXX_FUZZ:-clang++} cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DM2_FUZZ=ON -DM2_SANITIZE=ON -DM2_BUILD_TESTS=OFF >/dev/null
fi
echo "fuzz: targets from $bdir"
ninja -C "$bdir" "${targets[@]}" >/dev/null
mkdir -p build-fuzz/crashes build-fuzz/corpus/safetensors build-fuzz/corpus/config build-fuzz/corpus/request
# Seeds: real headers (first 64 KiB of each golden file) and real configs.
i=0
for f in testdata/golden/*/*.safetensors; do
  head -c 65536 "$f" > "build-fuzz/corpus/safetensors/seed$i"; i=$((i + 1))
done
cp testdata/golden/*/config.json build-fuzz/corpus/config/ 2>/dev/null || true
for d in testdata/golden/*/; do cp "$d/config.json" "build-fuzz/corpus/config/$(basename "$d").json"; done
cp testdata/reference/minimax-m2/config.json build-fuzz/corpus/config/reference.json
cp testdata/reference/minimax-m1/config.json build-fuzz/corpus/config/reference-m1.json
# Requests: the chat conversations of the template tests, and OpenAI / Anthropic shapes.
i=0
for f in testdata/chat/*.json; do cp "$f" "build-fuzz/corpus/request/chat$i.json"; i=$((i + 1)); done 2>/dev/null || true
cat > build-fuzz/corpus/request/openai_tools.json <<'JSON'
{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},{"role":"tool","tool_call_id":"c","content":"2"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number"}}}}}],"tool_choice":"required","temperature":0.5,"stream":true,"stream_options":{"include_usage":true}}
JSON
cat > build-fuzz/corpus/request/anthropic_tools.json <<'JSON'
{"model":"m","max_tokens":10,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"2"}],"is_error":false}]}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}],"tool_choice":{"type":"tool","name":"f"}}
JSON
run() {
  local target=$1 corpus=$2
  echo "fuzzing $target for ${secs}s"
  "./$bdir/fuzz/$target" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 "$corpus" 2>&1 | grep -E "^(stat::number_of_executed_units|Done|==|SUMMARY)" || true
  if ls build-fuzz/crashes/ | grep -q .; then echo "fuzz: $target found a crash, see build-fuzz/crashes/"; exit 1; fi
}
run fuzz_safetensors_header build-fuzz/corpus/safetensors
run fuzz_model_config build-fuzz/corpus/config
run fuzz_server_request build-fuzz/corpus/request
echo "fuzz: no crashes"
