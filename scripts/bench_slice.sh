#!/usr/bin/env bash
# Runs `m2 bench` on the FP8 M2 slice (and its q4 quantization) several times and prints,
# for every row, the median and the range over the runs. On a shared or virtual machine
# single runs vary a lot (other tenants take memory bandwidth and cores for minutes at a
# time); the median of a few runs is the figure to quote, the range shows the spread.
#
#   bash scripts/bench_slice.sh [runs=3] [slice dir=/tmp/slice]
#
# Makes the slice (5.8 GiB, a few minutes) and the q4 copy (4.3 GiB) when they are missing.
# Each run's JSON is kept next to the slice as bench-<format>-<n>.json. Activations: exact
# (the README's figures; m2 bench's own default is auto), or M2_ACTIVATIONS=auto|int8+int8|...
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
slice=${2:-/tmp/slice}
m2=build/src/cli/m2
[ -x "$m2" ] || { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build m2; }
[ -f "$slice/model.safetensors" ] || "$m2" make-bench-model -o "$slice"
[ -f "$slice-q4/model.safetensors" ] || "$m2" quantize -m "$slice" -o "$slice-q4" --type q4
for fmt in fp8 q4; do
  dir=$slice; [ $fmt = q4 ] && dir=$slice-q4
  for i in $(seq "$runs"); do
    echo "bench $fmt, run $i of $runs..." >&2
    "$m2" bench -m "$dir" --json --activations "${M2_ACTIVATIONS:-exact}" > "$slice/bench-$fmt-$i.json"
  done
done
python3 - "$slice" "$runs" <<'PY'
import json, statistics, sys
slice_dir, runs = sys.argv[1], int(sys.argv[2])
def show(label, values, fmt):
    values = sorted(values)
    print(f"  {label:<34} median {fmt.format(statistics.median(values))}   range {fmt.format(values[0])} .. {fmt.format(values[-1])}")
for f in ("fp8", "q4"):
    js = [json.load(open(f"{slice_dir}/bench-{f}-{i}.json")) for i in range(1, runs + 1)]
    print(f"{f} slice, {js[0]['threads']} threads, {js[0]['kernels']} kernels, {runs} runs:")
    show("read bandwidth GB/s", [j["read_bandwidth_bytes_per_s"] / 1e9 for j in js], "{:.1f}")
    show("fp32 FMA peak GFLOP/s", [j["peak_fp32_flops"] / 1e9 for j in js], "{:.0f}")
    for k, row in enumerate(js[0]["prefill"]):
        show(f"prefill {row['tokens']} tokens/s", [j["prefill"][k]["tokens_per_s"] for j in js], "{:.1f}")
        show(f"prefill {row['tokens']} % of peak", [100 * j["prefill"][k]["compute_utilization"] for j in js], "{:.1f}")
    for k, row in enumerate(js[0]["decode"]):
        show(f"decode ctx {row['context']} tokens/s", [j["decode"][k]["tokens_per_s"] for j in js], "{:.2f}")
        show(f"decode ctx {row['context']} % of bandwidth", [100 * j["decode"][k]["bandwidth_utilization"] for j in js], "{:.1f}")
    d = [j["decode"] for j in js]
    show("decode: last context slower by %", [100 * (1 - x[-1]["tokens_per_s"] / x[0]["tokens_per_s"]) for x in d], "{:.1f}")
    if js[0]["thread_scaling"]:
        show("prefill 512: threads speedup", [j["thread_scaling"]["prefill_512_speedup"] for j in js], "{:.2f}")
    show("peak RSS over weights+KV %", [100 * j["peak_rss_over_weights_and_kv"] for j in js], "{:.1f}")
PY
