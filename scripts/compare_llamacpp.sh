#!/usr/bin/env bash
# Compares m2 with llama.cpp on the same model, at the same number of bits, on this machine.
#
#   bash scripts/compare_llamacpp.sh            # everything: fetch, build, convert, benchmark
#   bash scripts/compare_llamacpp.sh --help
#
# The model is the M2 bench slice (`m2 make-bench-model`: random FP8 weights with MiniMax-M2's
# real per-layer sizes, 4 layers, 64 experts, top-8). llama.cpp is the copy vendored in the
# llama-cpp-python sdist on PyPI (a fixed version, so the comparison can be repeated), built
# for this CPU only. The slice is converted with llama.cpp's own converter, then quantized with
# llama-quantize; m2 quantizes its copies with `m2 quantize`. Four pairs are timed, alternating
# the two engines, for prefill of 512 tokens and decode at depth 0 and 2048, on 2 threads.
#
# Everything goes into a cache folder (default /tmp/llamacpp); a step whose output is already
# there is skipped, so a second run only benchmarks. On a machine shared with other work, run
# it under `nice -n 19`; both engines then see the same conditions, in alternation.
set -Eeuo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
# sha256 of llama_cpp_python-0.3.36.tar.gz as downloaded from PyPI
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

usage() {
  cat <<EOF
Usage: bash scripts/compare_llamacpp.sh [--prepare | --table RESULTS_DIR | --help]

  --prepare            steps 1-4 only: build, convert and quantize, no benchmark
  --table RESULTS_DIR  only print the table of an earlier (or interrupted) benchmark, from the
                       JSON files it left in RESULTS_DIR (a folder under \$LLAMACPP_CACHE/results)

Compares m2 and llama.cpp on the M2 bench slice, same bits, same machine. Steps (each skipped
when its output exists):
  1. download llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's sdist from PyPI (pip download, sha256 checked),
     unpack it and build its vendored llama.cpp (CPU, Release, GGML_NATIVE=ON):
     llama-bench and llama-quantize only
  2. build m2 if build/src/cli/m2 is missing; make the slice if it is missing
  3. a Python venv with the converter's packages; convert the slice to a bf16 GGUF with
     llama.cpp's convert_hf_to_gguf.py (the slice has no tokenizer: a stand-in is supplied)
  4. llama-quantize: Q8_0 with a bf16 output matrix, Q8_0, Q4_0 and Q4_K_M with a Q8_0 output
     matrix; m2 quantize: q8 and q4 with a q8 lm_head
  5. benchmark ROUNDS rounds, the engines alternating, and print per pair the median, the
     range (min..max) and m2 / llama.cpp for prefill 512, decode at depth 0 and at depth 2048

Pairs (the output matrix / lm_head is stored the same way on both sides):
  m2 FP8 (lm_head bf16)   vs  llama.cpp Q8_0, output bf16
  m2 q8  (lm_head q8)     vs  llama.cpp Q8_0 (output Q8_0)
  m2 q4  (lm_head q8)     vs  llama.cpp Q4_0, output Q8_0
  m2 q4  (lm_head q8)     vs  llama.cpp Q4_K_M, output Q8_0

Environment:
  LLAMACPP_CACHE  cache folder                   (default /tmp/llamacpp)
  M2_SLICE        the FP8 slice folder            (default /tmp/slice)
  M2_BIN          the m2 binary                   (default build/src/cli/m2)
  ROUNDS          benchmark rounds                (default 3)
  THREADS         threads for both engines        (default 2)
  KEEP_BF16       1: keep the 10 GB bf16 GGUF after quantizing (default: delete it)
  M2_FAST         1: also time m2 with its fast activations, --activations bf16 on FP8 and
                  int16+bf16 on q8 (what auto gives them on AMD) and int8+bf16 on q4 where
                  the CPU has AVX-512 BF16 (ISA=native), else --activations auto on each
                  (q8: int16+int16, FP8: int16 prefill); 0: exact only (default: 1 where the CPU has AVX-512 BF16
                  and ISA is native)
  LLAMA_LOAD_MODE llama-bench's -lm: none (default: weights read into memory, as m2 does by
                  default) or auto (llama.cpp's default: mapped); ignored by a llama-bench
                  without -lm
  PAIRS           all (default) or fp8: only the FP8 pair (m2 FP8 vs Q8_0 with a bf16 output
                  matrix): one llama-quantize, no m2 quantize, a round in about a quarter of the time;
                  or q8: only the q8 pair (m2 q8 vs Q8_0, output q8 on both); or q4: only the two
                  q4 pairs (Q4_0 and Q4_K_M; the same preparation as all), for more rounds of them
                  in the same time
  LLAMA_AMX       0: build llama.cpp without its AMX kernels (-mno-amx-*, in build-noamx), 1: with
                  them, auto (default): 0 where the CPU has AMX (this version's AMX kernels crashed
                  llama-bench on such a machine), else 1
  ISA             native (default): both engines use everything this CPU has; avx2: both are
                  held to AVX2 + FMA + F16C, as on an AVX2-only CPU (llama.cpp built with
                  GGML_NATIVE=OFF and only those into build-avx2, m2 run with M2_KERNELS=avx2),
                  so an AVX-512 machine measures the AVX2 paths too; M2_FAST defaults to 0 there;
                  avxvnni: the same plus AVX-VNNI (llama.cpp GGML_AVX_VNNI=ON into build-avxvnni,
                  m2 M2_KERNELS=avxvnni), as on Intel's client cores (AVX2 + AVX-VNNI, no AVX-512)
  M2_INT8         1: also time m2 with --activations int8+int8: q8 / q4 with int8 decode and
                  the int8 prefill GEMM, FP8 with that GEMM for prefill (its weights requantized
                  per 32 as it reads them) and exact decode steps; 0: not (default: 1 where the
                  CPU has AVX2)

What is timed (tokens/s; random token ids on both sides, the same lengths):
  m2 bench      prefill: 512 tokens, best of 2 runs (the first is the warm-up)
                decode: median of 64 single-token steps after 0 and after 2048 cached tokens
                (--context 1,2049: m2 decodes after C - 1 cached tokens; the cache is filled
                with synthetic keys and values)
  llama-bench   -r 1: one warm-up run, then one timed run; prefill: pp512; decode: tg64
                (64 tokens / their total time) at depth 0 and after a 2048-token prompt (-d 2048)
  The memory's read speed while each engine decodes: m2 bench's reads of the weights
                between its steps; for llama.cpp 'm2 bench --probe' just before and after each
                llama-bench call (its prefill, decode at depth 0 and at depth 2048 are three
                calls); each decode round is placed in a slow or a fast memory minute by it, and
                the table compares the engines within each regime too (a VM's memory can switch
                between speeds from one minute to the next).
  Both use THREADS threads and keep keys and values in 16 bits (m2 bf16, llama.cpp f16).
  Both read the weights into memory rather than mapping the files (m2's default where they
  fit, llama-bench -lm none; LLAMA_LOAD_MODE=auto gives llama.cpp its default, the mapping):
  on an Intel VM each decoded 4-7% faster that way, and mapped page-cache pages sometimes
  decoded a quarter slower (README, "Against llama.cpp").

Disk: the slice 5.8 GiB, the bf16 GGUF 9.4 GiB while quantizing, then 16.5 GiB of GGUFs and
9.3 GiB of m2 copies. Time measured on 2 cores shared with a compile, at nice 19: the
llama.cpp build 30 min, the conversion 10 min, the quantizations 25 min, one round 16 min.
EOF
}

prepare_only=0
table_only=""
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --prepare) prepare_only=1 ;;
  --table) table_only=${2:?--table needs the results folder}; [ -d "$table_only" ] || { echo "compare_llamacpp.sh: no folder $table_only" >&2; exit 2; } ;;
  "") ;;
  *) echo "compare_llamacpp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
repo=$PWD
cache=${LLAMACPP_CACHE:-/tmp/llamacpp}
slice=${M2_SLICE:-/tmp/slice}
m2=${M2_BIN:-$repo/build/src/cli/m2}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_llamacpp.sh: ROUNDS must be a positive integer, found '$rounds'" >&2; exit 2; }
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "compare_llamacpp.sh: THREADS must be a positive integer, found '$threads'" >&2; exit 2; }
isa=${ISA:-native}
[[ $isa =~ ^(native|avx2|avxvnni)$ ]] || { echo "compare_llamacpp.sh: ISA must be native, avx2 or avxvnni, found '$isa'" >&2; exit 2; }
if [ "$isa" = avx2 ]; then
  grep -qw avx2 /proc/cpuinfo || { echo "compare_llamacpp.sh: ISA=avx2 needs a CPU with AVX2" >&2; exit 2; }
  export M2_KERNELS=avx2  # every m2 run below: the AVX2 kernels, as on an AVX2-only CPU
elif [ "$isa" = avxvnni ]; then
  { grep -qw avx2 /proc/cpuinfo && grep -qw avx_vnni /proc/cpuinfo; } ||
    { echo "compare_llamacpp.sh: ISA=avxvnni needs a CPU with AVX2 and AVX-VNNI (flag avx_vnni)" >&2; exit 2; }
  export M2_KERNELS=avxvnni  # the AVX2 kernels with vpdpbusd on 256 bits, as on Intel's client cores
fi
fast_default=0
[ "$isa" = native ] && grep -qw avx512_bf16 /proc/cpuinfo && fast_default=1
fast=${M2_FAST:-$fast_default}
[[ $fast =~ ^[01]$ ]] || { echo "compare_llamacpp.sh: M2_FAST must be 0 or 1, found '$fast'" >&2; exit 2; }
int8=${M2_INT8:-$(grep -qw avx2 /proc/cpuinfo && echo 1 || echo 0)}
q8_int8=int8+int8  # every AVX2 CPU has a q8 int8 GEMM (AVX2: vpsignb + vpmaddubsw + vpmaddwd)
[[ $int8 =~ ^[01]$ ]] || { echo "compare_llamacpp.sh: M2_INT8 must be 0 or 1, found '$int8'" >&2; exit 2; }
load_mode=${LLAMA_LOAD_MODE:-none}
[[ $load_mode =~ ^(none|auto)$ ]] || { echo "compare_llamacpp.sh: LLAMA_LOAD_MODE must be none or auto, found '$load_mode'" >&2; exit 2; }
pairs=${PAIRS:-all}
[[ $pairs =~ ^(all|fp8|q8|q4)$ ]] || { echo "compare_llamacpp.sh: PAIRS must be all, fp8, q8 or q4, found '$pairs'" >&2; exit 2; }

# --- progress and errors --------------------------------------------------------------------
step="start"
phase() {
  step=$1
  echo "" >&2
  echo "== $(date +%H:%M:%S) $step" >&2
}
note() { echo "   $*" >&2; }
trap 'rc=$?; echo "compare_llamacpp.sh: error: step \"$step\" failed (exit $rc)" >&2; exit $rc' ERR

# Runs a command with its output in $cache/logs/NAME.log; on failure shows the log's end.
logged() {
  local name=$1
  shift
  local log=$cache/logs/$name.log
  note "running: $* (log: $log)"
  if ! "$@" >"$log" 2>&1; then
    echo "---- last lines of $log:" >&2
    tail -n 25 "$log" >&2
    return 1
  fi
}

mkdir -p "$cache/src" "$cache/logs" "$cache/gguf"

# --- the table ------------------------------------------------------------------------------
print_table() {
  python3 - "$1" "$cache" "$slice" <<'PY'
import glob, json, os, statistics, sys

results, cache, slice_dir = sys.argv[1], sys.argv[2], sys.argv[3]
# A round counts when every one of its runs finished (an interrupted benchmark leaves some).
# The pairs present: PAIRS=fp8, q8 and q4 run only theirs. A pair counts where both engines'
# first-round files are there; m2's fast (M2_FAST) and int8+int8 (M2_INT8) runs likewise.
# (FP8 with int8+int8 since December 2026: older results lack it and print without it.)
pair_defs = [
    ("m2 FP8, lm_head bf16", "fp8", slice_dir, "llama.cpp Q8_0, output bf16", "q8_0-outbf16"),
    ("m2 q8, lm_head q8", "q8", f"{cache}/m2-q8-lmq8", "llama.cpp Q8_0, output Q8_0", "q8_0"),
    ("m2 q4, lm_head q8", "q4", f"{cache}/m2-q4-lmq8", "llama.cpp Q4_0, output Q8_0", "q4_0-outq8"),
    ("m2 q4, lm_head q8", "q4", f"{cache}/m2-q4-lmq8", "llama.cpp Q4_K_M, output Q8_0", "q4_k_m-outq8"),
]
has = lambda name: os.path.exists(f"{results}/{name}-1.json" if name.startswith("m2") else f"{results}/{name}-1.json.d0")
pairs = [p for p in pair_defs if has(f"m2-{p[1]}") and has(f"llama-{p[4]}")]
if not pairs:
    sys.exit(f"no benchmark pair in {results}")
names = []
for p in pairs:
    for n in (f"m2-{p[1]}", f"llama-{p[4]}", f"m2-{p[1]}-fast", f"m2-{p[1]}-int8"):
        if has(n) and n not in names:
            names.append(n)
rounds = []
for r in range(1, 1000):
    found = [os.path.exists(f"{results}/{n}-{r}.json" if n.startswith("m2") else f"{results}/{n}-{r}.json.d0")
             for n in names]
    if not any(found):
        break
    if all(found):
        rounds.append(r)
if not rounds:
    sys.exit(f"no complete benchmark round in {results}")

def load(path):
    with open(path) as f:
        return json.load(f)

def m2_numbers(name):
    """Per round: prefill 512, decode at depth 0, decode at depth 2048 (tokens/s)."""
    out = {"prefill": [], "d0": [], "d2048": []}
    for r in rounds:
        j = load(f"{results}/m2-{name}-{r}.json")
        out["prefill"] += [p["tokens_per_s"] for p in j["prefill"] if p["tokens"] == 512]
        out["d0"] += [d["tokens_per_s"] for d in j["decode"] if d["context"] == 1]
        out["d2048"] += [d["tokens_per_s"] for d in j["decode"] if d["context"] == 2049]
    return out

def llama_numbers(name):
    out = {"prefill": [], "d0": [], "d2048": []}
    for r in rounds:
        rows = load(f"{results}/llama-{name}-{r}.json.d0")
        for extra in ("d2048", "pp"):  # pp: prefill in a call of its own (since the read probes)
            path = f"{results}/llama-{name}-{r}.json.{extra}"
            rows += load(path) if os.path.exists(path) else []
        for t in rows:
            if t["n_prompt"] == 512 and t["n_gen"] == 0 and t.get("n_depth", 0) == 0:
                out["prefill"].append(t["avg_ts"])
            elif t["n_prompt"] == 0 and t["n_gen"] == 64 and t.get("n_depth", 0) == 0:
                out["d0"].append(t["avg_ts"])
            elif t["n_prompt"] == 0 and t["n_gen"] == 64 and t.get("n_depth", 0) == 2048:
                out["d2048"].append(t["avg_ts"])
    return out

def mean_read(before, after):
    return (before + after) / 2 / 1e9

def m2_reads(name):
    """Per round, per decode row: the memory's read speed (GB/s) while m2 decoded, from m2
    bench's reads of the weights between the steps (the step's bytes x tokens/s over its
    median share of those reads)."""
    out = {"d0": [], "d2048": []}
    for r in rounds:
        for d in load(f"{results}/m2-{name}-{r}.json")["decode"]:
            key = {1: "d0", 2049: "d2048"}.get(d.get("context"))
            v = d.get("of_reads_between_steps")
            if key is None:
                continue
            if not v:
                return None
            step_bytes = d["weight_bytes_per_token"] + d.get("kv_bytes_per_token", 0) + d.get("state_bytes_per_token", 0)
            out[key].append(step_bytes * d["tokens_per_s"] / v["median"] / 1e9)
    return out

def llama_reads(name):
    """Per round, per decode row: the mean of `m2 bench --probe` just before and after the
    llama-bench call that timed it, or None where the two disagree by more than 1.3x (the
    memory changed regime during the call: the round belongs to neither); None for results
    from before the probes."""
    out = {"d0": [], "d2048": []}
    def around(a, b):
        return None if max(a, b) > 1.3 * min(a, b) else mean_read(a, b)
    for r in rounds:
        paths = [f"{results}/llama-{name}-{r}.json.read{i}" for i in range(4)]
        if not all(os.path.exists(p) for p in paths):
            return None
        g = [load(p)["read_bandwidth_bytes_per_s"] for p in paths]
        out["d2048"].append(around(g[0], g[1]))
        out["d0"].append(around(g[2], g[3]))
    return out

def regime_split(reads_lists):
    """The read speed that separates this VM's slow and fast memory minutes in these results
    (the geometric mean of the slowest and fastest read), or None where all runs saw about
    the same memory (fastest / slowest below 1.4)."""
    all_reads = [g for rl in reads_lists if rl for key in ("d0", "d2048") for g in rl[key] if g is not None]
    if not all_reads or max(all_reads) / min(all_reads) < 1.4:
        return None
    return (max(all_reads) * min(all_reads)) ** 0.5

def same_regime(a, ar, b, br, key, split):
    """Decode in the same memory regime: per regime (slow / fast minutes) where both engines
    have rounds, the ratio of their medians there."""
    if ar is None or br is None or len(a[key]) != len(ar[key]) or len(b[key]) != len(br[key]):
        return ""
    parts = []
    for name, fast in (("slow", False), ("fast", True)):
        pick = lambda tps, reads: [t for t, g in zip(tps, reads) if g is not None and (split is None or (g >= split) == fast)]
        x, y = pick(a[key], ar[key]), pick(b[key], br[key])
        if split is None:
            name = "one"
        if x and y:
            parts.append(f"{name} {statistics.median(x):.2f} ({len(x)}) / {statistics.median(y):.2f} ({len(y)}) = "
                         f"{statistics.median(x) / statistics.median(y):.2f}")
        if split is None:
            break
    return "; ".join(parts) if parts else "no round of both in one regime"

def size_gib(path):
    files = [path] if os.path.isfile(path) else glob.glob(f"{path}/*.safetensors")
    return sum(os.path.getsize(f) for f in files) / 2**30

def cell(v):
    if not v:
        return f"{'n/a':>22}"
    return f"{statistics.median(v):8.2f} [{min(v):.2f}..{max(v):.2f}]".rjust(22)

first = load(f"{results}/llama-{pairs[0][4]}-{rounds[0]}.json.d0")[0]
m2_first = load(f"{results}/m2-{pairs[0][1]}-{rounds[0]}.json")
print(f"llama.cpp build {first.get('build_commit')} ({first.get('backends')}), cpu_info: {first.get('cpu_info')}, "
      f"flash_attn {first.get('flash_attn')}, K/V cache {first.get('type_k')}/{first.get('type_v')}")
print(f"m2 kernels: {m2_first.get('kernels')}, K/V cache bf16; threads: m2 {m2_first.get('threads')}, "
      f"llama.cpp {first.get('n_threads')}; {len(rounds)} complete round(s)")
print("tokens/s: median [min..max] over the rounds; ratio = m2 median / llama.cpp median")
if glob.glob(f"{results}/llama-*.json.read3"):
    print("same memory regime (decode): this VM's memory switches between slow and fast minutes; each engine's\n"
          "read speed while it decoded (m2: its reads of the weights between the steps; llama.cpp: `m2 bench\n"
          "--probe` just before and after its llama-bench call; 'changed' where those two differ by more than\n"
          "1.3x) puts each round in one, and per regime the medians of the rounds there are compared:\n"
          "m2 (rounds) / llama.cpp (rounds) = ratio")
print()

rows = [("prefill 512", "prefill"), ("decode depth 0", "d0"), ("decode depth 2048", "d2048")]
split = regime_split([m2_reads(n[len("m2-"):]) for n in names if n.startswith("m2-")] +
                     [llama_reads(n[len("llama-"):]) for n in names if n.startswith("llama-")]) \
    if glob.glob(f"{results}/llama-*.json.read3") else None

for m2_label, m2_name, m2_path, ll_label, ll_name in pairs:
    a, b = m2_numbers(m2_name), llama_numbers(ll_name)
    ar, br = m2_reads(m2_name), llama_reads(ll_name)
    print(f"{m2_label} ({size_gib(m2_path):.2f} GiB)  vs  {ll_label} "
          f"({size_gib(f'{cache}/gguf/slice-{ll_name}.gguf'):.2f} GiB)")
    print(f"  {'':<18} {'m2':>22} {'llama.cpp':>22} {'m2/llama.cpp':>13}")
    for label, key in rows:
        ratio = (f"{statistics.median(a[key]) / statistics.median(b[key]):13.2f}"
                 if a[key] and b[key] else f"{'n/a':>13}")
        print(f"  {label:<18} {cell(a[key])} {cell(b[key])} {ratio}")
    def regime_lines(x, xr):
        if xr is None or br is None:
            return
        show = lambda reads: ", ".join("changed" if g is None else f"{g:.0f}" for g in reads)
        print(f"    read GB/s while decoding at depth 0: m2 {show(xr['d0'])}; llama.cpp {show(br['d0'])}" +
              (f" (slow below {split:.0f}, fast above)" if split else ""))
        for label, key in rows[1:]:
            print(f"    {label}, same memory regime: {same_regime(x, xr, b, br, key, split)}")
    regime_lines(a, ar)
    # The same m2 model with its fast activations, against the same llama.cpp runs.
    variants = []
    if f"m2-{m2_name}-fast" in names:
        variants.append(("-fast", load(f"{results}/m2-{m2_name}-fast-{rounds[0]}.json").get(
            "activations", "int8+bf16" if m2_name == "q4" else "bf16")))
    if f"m2-{m2_name}-int8" in names:  # the activations each run used, as its JSON records them
        variants.append(("-int8", load(f"{results}/m2-{m2_name}-int8-{rounds[0]}.json").get("activations", "int8+int8")))
    for suffix, acts in variants:
        f = m2_numbers(m2_name + suffix)
        print(f"  m2 --activations {acts}:")
        for label, key in rows:
            ratio = (f"{statistics.median(f[key]) / statistics.median(b[key]):13.2f}"
                     if f[key] and b[key] else f"{'n/a':>13}")
            print(f"  {label:<18} {cell(f[key])} {cell(b[key])} {ratio}")
        regime_lines(f, m2_reads(m2_name + suffix))
    print()
if os.path.exists(f"{results}/load.txt"):
    print("machine load during the benchmark (1, 5, 15 min averages; above 0 means other work competed):")
    print(open(f"{results}/load.txt").read().rstrip())
PY
}

if [ -n "$table_only" ]; then
  print_table "$table_only"
  exit 0
fi

# --- the machine ------------------------------------------------------------------------------
phase "machine"
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' |
  grep -E '^(avx|avx2|fma|f16c|avx512.*|avx_vnni.*|amx.*)$' | sort | tr '\n' ' ' || true)
cpu_id=$(awk -F': ' '/^cpu family/ {f = $2} /^model\t/ {m = $2} /^stepping/ {s = $2; exit} END {print "family " f ", model " m ", stepping " s}' /proc/cpuinfo)
echo "CPU: $cpu_model ($cpu_id), $(nproc) cores available; $threads threads used by both engines"
echo "SIMD flags: ${cpu_flags:-none of avx/avx2/avx512/vnni}"
[ "$isa" = avx2 ] && echo "ISA=avx2: both engines held to AVX2 + FMA + F16C (llama.cpp build-avx2, m2 M2_KERNELS=avx2)"
[ "$isa" = avxvnni ] && echo "ISA=avxvnni: both engines held to AVX2 + FMA + F16C + AVX-VNNI (llama.cpp build-avxvnni, m2 M2_KERNELS=avxvnni)"
echo "load average (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"

# --- 1. llama.cpp: fetch and build ----------------------------------------------------------
phase "fetch llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist from PyPI"
sdist=$cache/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
if [ -f "$sdist" ]; then
  note "already there: $sdist"
else
  # pip fetches the sdist from PyPI; it also runs the package's build backend to read its
  # metadata, which takes a minute or two. The sha256 below pins the exact file.
  rm -rf "$cache/src/download"
  logged pip-download python3 -m pip download --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$cache/src/download"
  mv "$cache/src/download/$(basename "$sdist")" "$sdist"
fi
echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --quiet - ||
  { echo "the sha256 of $sdist is not the expected $LLAMA_CPP_PYTHON_SHA256" >&2; false; }
note "sha256 $LLAMA_CPP_PYTHON_SHA256 (as expected)"
unpacked=$cache/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
llama_src=$unpacked/vendor/llama.cpp
if [ ! -f "$llama_src/CMakeLists.txt" ]; then
  note "unpacking into $cache/src"
  tar -xzf "$sdist" -C "$cache/src"
fi
[ -f "$llama_src/CMakeLists.txt" ] || { echo "no vendor/llama.cpp in $sdist" >&2; false; }
# The sdist carries no git history; llama-cpp-python's CHANGELOG names the upstream commit.
llama_commit=$(awk -v v="## [$LLAMA_CPP_PYTHON_VERSION]" '$0 == v {on = 1; next} /^## \[/ {on = 0}
  on && match($0, /llama\.cpp@[0-9a-f]+/) {print substr($0, RSTART + 10, RLENGTH - 10); exit}' "$unpacked/CHANGELOG.md")
llama_commit=${llama_commit:-unknown}
echo "llama.cpp: vendored in llama-cpp-python $LLAMA_CPP_PYTHON_VERSION, upstream commit $llama_commit (from its CHANGELOG)"

# llama.cpp's AMX kernels (ggml-cpu/amx, compiled in by -march=native where the CPU has AMX)
# crash this version: on an Intel Xeon VM with AMX, llama-bench with its default settings died
# with SIGSEGV at the ldtilecfg in ggml_backend_amx_mul_mat for every model here (--repack 0,
# which also turns off llama.cpp's repacked Q4_0 / Q8_0 layouts, avoided it). So where the CPU
# has AMX, llama.cpp is built with -mno-amx-* (into build-noamx): everything else as native.
llama_amx=${LLAMA_AMX:-auto}
if [ "$llama_amx" = auto ]; then
  if grep -qw amx_tile /proc/cpuinfo; then llama_amx=0; else llama_amx=1; fi
fi
case "$llama_amx" in 0 | 1) ;; *) echo "compare_llamacpp.sh: LLAMA_AMX must be 0, 1 or auto, found '$llama_amx'" >&2; exit 2 ;; esac
llama_build=$cache/build
llama_flags=()
llama_native=ON
if [ "$isa" != native ]; then  # AVX2 + FMA + F16C (+ BMI2), and AVX-VNNI for avxvnni: no AVX-512, no AMX
  llama_build=$cache/build-$isa
  llama_native=OFF
  llama_vnni=$([ "$isa" = avxvnni ] && echo ON || echo OFF)
  llama_flags=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=$llama_vnni
               -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
               -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
elif [ "$llama_amx" = 0 ]; then
  llama_build=$cache/build-noamx
  llama_flags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
               -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
phase "build llama.cpp (CPU, Release, $([ "$isa" != native ] && echo "GGML_NATIVE=OFF, AVX2 + FMA + F16C$([ "$isa" = avxvnni ] && echo ' + AVX-VNNI')" || echo 'GGML_NATIVE=ON')$([ "$isa" = native ] && [ "$llama_amx" = 0 ] && echo ', AMX off')): llama-bench, llama-quantize"
bin=$llama_build/bin
if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-quantize" ]; then
  note "already built: $bin/llama-bench, $bin/llama-quantize"
else
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  logged llama-cmake cmake -S "$llama_src" -B "$llama_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=$llama_native -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_COMMIT="$llama_commit" -DLLAMA_BUILD_NUMBER=0 "${llama_flags[@]}"
  logged llama-build cmake --build "$llama_build" --target llama-bench llama-quantize -j "$(nproc)"
fi
"$bin/llama-bench" --help >"$cache/logs/llama-bench-help.txt" 2>&1 || true
if grep -q -- '--n-depth' "$cache/logs/llama-bench-help.txt"; then
  depth_flag=1
else
  depth_flag=0
  echo "warning: this llama-bench has no -d/--n-depth: llama.cpp's decode at depth 2048 is not measured" >&2
fi
load_args=()
if grep -q -- '--load-mode' "$cache/logs/llama-bench-help.txt"; then
  load_args=(-lm "$load_mode")
else
  echo "warning: this llama-bench has no -lm/--load-mode: llama.cpp uses its default way of loading" >&2
fi
"$bin/llama-quantize" --help >"$cache/logs/llama-quantize-help.txt" 2>&1 || true
grep -q -- '--output-tensor-type' "$cache/logs/llama-quantize-help.txt" || {
  echo "this llama-quantize has no --output-tensor-type: the output matrix cannot be matched to m2's lm_head" >&2
  false
}

# --- 2. m2 and the slice --------------------------------------------------------------------
phase "m2 binary"
if [ -x "$m2" ]; then
  note "using $m2"
else
  logged m2-cmake cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  logged m2-build ninja -C "$repo/build" m2
  m2=$repo/build/src/cli/m2
fi

phase "M2 bench slice (random FP8 weights, real per-layer sizes)"
if [ -f "$slice/model.safetensors" ] && [ -f "$slice/config.json" ]; then
  note "already there: $slice"
else
  logged make-bench-model "$m2" make-bench-model -o "$slice"
fi

# --- 3. convert to GGUF with llama.cpp's converter ------------------------------------------
phase "converter support for MiniMax-M2"
if grep -rqs "MiniMaxM2ForCausalLM" "$llama_src/convert_hf_to_gguf.py" "$llama_src/conversion"; then
  note "convert_hf_to_gguf.py knows MiniMaxM2ForCausalLM"
else
  echo "llama.cpp's convert_hf_to_gguf.py in this version does not know MiniMaxM2ForCausalLM" >&2
  false
fi

phase "Python venv for the converter"
venv=$cache/venv
needed="import gguf, numpy, safetensors, torch, transformers"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$needed" 2>/dev/null; then
  note "ready: $venv"
else
  # --system-site-packages: a torch or transformers already installed is reused (torch is big).
  python3 -m venv --system-site-packages "$venv"
  logged pip-gguf "$venv/bin/pip" install "$llama_src/gguf-py"
  for module in numpy safetensors torch transformers; do
    if ! "$venv/bin/python" -c "import $module" 2>/dev/null; then
      logged "pip-$module" "$venv/bin/pip" install "$module"
    fi
  done
  "$venv/bin/python" -c "$needed"
fi
"$venv/bin/python" -c 'import torch, transformers; print(f"   torch {torch.__version__}, transformers {transformers.__version__}")' >&2

# All four GGUFs: name, llama-quantize type, output tensor type.
ggufs=("q8_0-outbf16 Q8_0 bf16" "q8_0 Q8_0 q8_0" "q4_0-outq8 Q4_0 q8_0" "q4_k_m-outq8 Q4_K_M q8_0")
[ "$pairs" = fp8 ] && ggufs=("${ggufs[0]}")
[ "$pairs" = q8 ] && ggufs=("${ggufs[1]}")
all_quantized=1
for g in "${ggufs[@]}"; do
  read -r name _ _ <<<"$g"
  [ -f "$cache/gguf/slice-$name.gguf" ] || all_quantized=0
done

phase "convert the slice to a bf16 GGUF (llama.cpp's convert_hf_to_gguf.py)"
bf16=$cache/gguf/slice-bf16.gguf
if [ $all_quantized = 1 ]; then
  note "not needed: every quantized GGUF is already there"
elif [ -f "$bf16" ]; then
  note "already there: $bf16"
else
  # The converter reads a Hugging Face folder. The slice has the weights and config.json but
  # no tokenizer, and the converter needs one; the project's m2-tiny tokenizer stands in. Its
  # ids do not matter here: both benchmarks feed random token ids, never text.
  hf=$cache/hf-slice
  mkdir -p "$hf"
  ln -sf "$slice/model.safetensors" "$hf/model.safetensors"
  cp "$slice/config.json" "$hf/config.json"
  cp "$repo/models/m2-tiny/tokenizer.json" "$repo/models/m2-tiny/tokenizer_config.json" "$hf/"
  note "the slice has no tokenizer: $hf holds its weights (a link), its config.json and the"
  note "m2-tiny tokenizer as a stand-in, labelled with MiniMax-M2's pre-tokenizer ('minimax-m2')"
  # convert_hf_to_gguf.py refuses a tokenizer whose pre-tokenizer it does not recognize; this
  # wrapper runs it unchanged except for that label.
  cat >"$cache/convert_slice.py" <<'PY'
# Runs llama.cpp's convert_hf_to_gguf.py, changing one thing: the vocabulary's pre-tokenizer
# label. The stand-in tokenizer's pre-tokenizer hash is not in llama.cpp's table of known
# tokenizers, and the converter refuses unknown ones; the benchmark feeds token ids, never
# text, so we label it "minimax-m2" (what the real MiniMax-M2 tokenizer gets) and go on.
# Usage: python convert_slice.py LLAMA_CPP_SOURCE_DIR [convert_hf_to_gguf.py arguments...]
import runpy
import sys
from pathlib import Path

source = Path(sys.argv.pop(1)).resolve()
sys.path.insert(0, str(source))
sys.path.insert(1, str(source / "gguf-py"))
import conversion.base  # noqa: E402  (llama.cpp's converter package)


def minimax_m2_pre_tokenizer(self, tokenizer):
    print("convert_slice.py: stand-in tokenizer, pre-tokenizer labelled 'minimax-m2'")
    return "minimax-m2"


conversion.base.TextModel.get_vocab_base_pre = minimax_m2_pre_tokenizer
sys.argv[0] = str(source / "convert_hf_to_gguf.py")
runpy.run_path(sys.argv[0], run_name="__main__")
PY
  logged convert "$venv/bin/python" "$cache/convert_slice.py" "$llama_src" "$hf" \
    --outtype bf16 --outfile "$bf16.part"
  mv "$bf16.part" "$bf16"
fi

# --- 4. quantize on both sides --------------------------------------------------------------
phase "llama-quantize: $(for g in "${ggufs[@]}"; do read -r name _ <<<"$g"; printf '%s ' "$name"; done)"
for g in "${ggufs[@]}"; do
  read -r name type out <<<"$g"
  dst=$cache/gguf/slice-$name.gguf
  if [ -f "$dst" ]; then
    note "already there: $dst"
    continue
  fi
  logged "quantize-$name" "$bin/llama-quantize" --output-tensor-type "$out" "$bf16" "$dst.part" "$type" "$threads"
  mv "$dst.part" "$dst"
done
if [ -f "$bf16" ] && [ "${KEEP_BF16:-0}" != 1 ]; then
  note "deleting $bf16 (every quantized GGUF is made; KEEP_BF16=1 keeps it)"
  rm -f "$bf16"
fi

m2_types=(q8 q4)
[ "$pairs" = fp8 ] && m2_types=()
[ "$pairs" = q8 ] && m2_types=(q8)
[ ${#m2_types[@]} -gt 0 ] && phase "m2 quantize: ${m2_types[*]}, lm_head q8"
for type in "${m2_types[@]}"; do
  dst=$cache/m2-$type-lmq8
  if [ -f "$dst/model.safetensors" ] || ls "$dst"/*.safetensors >/dev/null 2>&1; then
    note "already there: $dst"
    continue
  fi
  rm -rf "$dst.part"
  logged "m2-quantize-$type" "$m2" quantize -m "$slice" -o "$dst.part" --type "$type" --lm-head q8 -t "$threads"
  mv "$dst.part" "$dst"
done

if [ $prepare_only = 1 ]; then
  echo "prepared (--prepare): llama.cpp in $bin, GGUFs in $cache/gguf, m2 copies in $cache/m2-*" >&2
  exit 0
fi

# --- 5. benchmark ---------------------------------------------------------------------------
results=$cache/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
phase "benchmark: $rounds rounds, $threads threads, results in $results"
note "weights: m2 its default (read into memory where they fit), llama-bench ${load_args[*]:-with its default loading}"
# m2: prefill of 512 tokens, best of 2 runs (the first warms up); decode 64 steps after a
# cache of 0 and of 2048 tokens (m2's --context C decodes after C - 1 cached tokens).
bench_m2() {
  local label=$1 dir=$2 out=$3 activations=${4:-exact}
  note "m2 $label (activations $activations)"
  "$m2" bench -m "$dir" --json -t "$threads" --prefill 512 --context 1,2049 --decode-steps 64 \
    --repeats 2 --no-scaling --activations "$activations" >"$out.part" 2>"$out.log" || { tail -n 20 "$out.log" >&2; return 1; }
  mv "$out.part" "$out"  # only finished runs get their final name (see print_table)
}
# llama-bench: one warm-up run, then one timed run of each test (-r 1). Two calls, so that
# the prompt is not also timed at depth 2048 (not compared here, and slow on 2 cores).
# The memory's read speed on the benchmark's threads, into $1 (JSON): m2 bench takes this
# probe before and after its own timings; here it is taken around each llama-bench call, so
# the table can set both engines against the memory of their own minutes (this VM's memory
# switches between speeds within minutes).
probe_read() {
  "$m2" bench --probe --json -t "$threads" >"$1.part" 2>>"$1.log" || { tail -n 5 "$1.log" >&2; return 1; }
  mv "$1.part" "$1"
}
bench_llama() {
  local label=$1 file=$2 out=$3
  note "llama.cpp $label"
  probe_read "$out.read0"
  if [ $depth_flag = 1 ]; then
    "$bin/llama-bench" -m "$file" -t "$threads" "${load_args[@]}" -p 0 -n 64 -d 2048 -r 1 -o json >"$out.d2048.part" 2>"$out.log" ||
      { tail -n 20 "$out.log" >&2; return 1; }
    mv "$out.d2048.part" "$out.d2048"
  fi
  probe_read "$out.read1"
  "$bin/llama-bench" -m "$file" -t "$threads" "${load_args[@]}" -p 512 -n 0 -r 1 -o json >"$out.pp" 2>>"$out.log" ||
    { tail -n 20 "$out.log" >&2; return 1; }
  # Decode at depth 0 in a call of its own, so that the probes around it bracket it alone.
  probe_read "$out.read2"
  "$bin/llama-bench" -m "$file" -t "$threads" "${load_args[@]}" -p 0 -n 64 -r 1 -o json >"$out.d0.part" 2>>"$out.log" ||
    { tail -n 20 "$out.log" >&2; return 1; }
  probe_read "$out.read3"
  mv "$out.d0.part" "$out.d0"  # the .d0 file marks a finished run (see print_table)
}
runs=(
  "m2 fp8 $slice"
  "llama q8_0-outbf16 $cache/gguf/slice-q8_0-outbf16.gguf"
  "m2 q8 $cache/m2-q8-lmq8"
  "llama q8_0 $cache/gguf/slice-q8_0.gguf"
  "m2 q4 $cache/m2-q4-lmq8"
  "llama q4_0-outq8 $cache/gguf/slice-q4_0-outq8.gguf"
  "llama q4_k_m-outq8 $cache/gguf/slice-q4_k_m-outq8.gguf"
)
[ "$pairs" = fp8 ] && runs=("${runs[@]:0:2}")
[ "$pairs" = q8 ] && runs=("${runs[@]:2:2}")
[ "$pairs" = q4 ] && runs=("${runs[@]:4:3}")
if [ "$fast" = 1 ] && [ "$fast_default" = 1 ]; then  # native, AVX-512 BF16
  [[ $pairs =~ ^(all|fp8)$ ]] && runs+=("m2 fp8-fast $slice bf16")
  [[ $pairs =~ ^(all|q8)$ ]] && runs+=("m2 q8-fast $cache/m2-q8-lmq8 int16+bf16")  # what auto gives q8 on AMD
  [[ $pairs =~ ^(all|q4)$ ]] && runs+=("m2 q4-fast $cache/m2-q4-lmq8 int8+bf16")
elif [ "$fast" = 1 ]; then  # no bf16 here: each pair's row is what auto gives it (q8: int16+int16)
  [[ $pairs =~ ^(all|fp8)$ ]] && runs+=("m2 fp8-fast $slice auto")
  [[ $pairs =~ ^(all|q8)$ ]] && runs+=("m2 q8-fast $cache/m2-q8-lmq8 auto")
  [[ $pairs =~ ^(all|q4)$ ]] && runs+=("m2 q4-fast $cache/m2-q4-lmq8 auto")
fi
if [ "$int8" = 1 ]; then
  [[ $pairs =~ ^(all|fp8)$ ]] && runs+=("m2 fp8-int8 $slice int8+int8")  # FP8: int8 prefill, exact decode steps
  [[ $pairs =~ ^(all|q8)$ ]] && runs+=("m2 q8-int8 $cache/m2-q8-lmq8 $q8_int8")
  [[ $pairs =~ ^(all|q4)$ ]] && runs+=("m2 q4-int8 $cache/m2-q4-lmq8 int8+int8")
fi
for round in $(seq "$rounds"); do
  phase "benchmark round $round of $rounds"
  # Other processes on the cores change the figures, llama.cpp's decode most here (its threads
  # meet at a barrier after every operation, so one thread that loses its core holds up the
  # token); the load is kept with the results and printed with the table.
  echo "round $round ($isa): load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date +%H:%M:%S)" | tee -a "$results/load.txt" >&2
  order=("${runs[@]}")
  if [ $((round % 2)) = 0 ]; then  # every other round in reverse, so neither engine always goes first
    order=()
    for ((i = ${#runs[@]} - 1; i >= 0; i--)); do order+=("${runs[i]}"); done
  fi
  for r in "${order[@]}"; do
    read -r engine name path activations <<<"$r"
    if [ "$engine" = m2 ]; then
      bench_m2 "$name" "$path" "$results/m2-$name-$round.json" "${activations:-exact}"
    else
      bench_llama "$name" "$path" "$results/llama-$name-$round.json"
    fi
  done
done

echo "after the last round: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date +%H:%M:%S)" >>"$results/load.txt"
phase "results"
print_table "$results"
echo "raw results: $results (bash scripts/compare_llamacpp.sh --table $results prints this table again)" >&2
