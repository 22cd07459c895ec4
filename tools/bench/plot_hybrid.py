#!/usr/bin/env python3
"""Plots the Lightning hybrid against an all-softmax model of the same sizes, from two
`m2 bench --json` runs at several contexts:

    m2 make-bench-model --arch minimax-text-01 --experts 2 -o /tmp/t01
    m2 make-bench-model --arch minimax-text-01-softmax --experts 2 -o /tmp/t01s
    for m in t01 t01s; do
      m2 bench -m /tmp/$m --prefill 128 --context 1024,8192,32768,131072 --context-chunk 128 \\
          --decode-steps 8 --repeats 1 --no-scaling --json > /tmp/bench_$m.json
    done
    python3 tools/bench/plot_hybrid.py /tmp/bench_t01.json /tmp/bench_t01s.json docs/hybrid_crossover.png

Prints a table (decode and prefill-chunk tokens/s, cache bytes of one sequence, per
context) and the crossover: the context where the hybrid's decode step becomes cheaper,
measured (log-linear interpolation between the measured contexts) and modelled from the
bytes a step reads (weights + keys/values + Lightning state, each run's own counts).
Needs matplotlib for the PNG (the table is printed without it).
"""
import json
import math
import sys


def rows(path):
    with open(path) as f:
        j = json.load(f)
    out = {}
    for r in j["decode"]:
        if "error" in r:
            continue
        out[r["context"]] = r
    return j, out


def crossover(xs, a, b):
    """First context where a(x) <= b(x), interpolating a-b linearly in log(context)."""
    for i in range(len(xs) - 1):
        d0, d1 = a[i] - b[i], a[i + 1] - b[i + 1]
        if d0 > 0 and d1 <= 0:
            t = d0 / (d0 - d1)
            return math.exp(math.log(xs[i]) + t * (math.log(xs[i + 1]) - math.log(xs[i])))
    if a and a[0] <= b[0]:
        return xs[0]
    return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    hj, h = rows(sys.argv[1])
    sj, s = rows(sys.argv[2])
    ctx = sorted(set(h) & set(s))
    if not ctx:
        sys.exit("no context measured in both runs")
    print(f"hybrid: {hj['model']}   softmax: {sj['model']}   ({hj['kernels']}, {hj['threads']} threads, "
          f"{hj['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s)")
    print(f"{'context':>8} {'decode tok/s hybrid':>20} {'softmax':>9} {'prefill tok/s hybrid':>21} {'softmax':>9} "
          f"{'cache MB hybrid':>16} {'softmax':>9}")
    hd, sd = [], []
    for c in ctx:
        a, b = h[c], s[c]
        hd.append(a["seconds_per_token"])
        sd.append(b["seconds_per_token"])
        pa = a.get("prefill_chunk", {}).get("tokens_per_s", float("nan"))
        pb = b.get("prefill_chunk", {}).get("tokens_per_s", float("nan"))
        print(f"{c:>8} {a['tokens_per_s']:>20.3f} {b['tokens_per_s']:>9.3f} {pa:>21.2f} {pb:>9.2f} "
              f"{a['cache_bytes_at_context'] / 1e6:>16.1f} {b['cache_bytes_at_context'] / 1e6:>9.1f}")
    measured = crossover(ctx, hd, sd)
    # Bytes per decode step: weights + state (fixed) against KV bytes growing with the context.
    hw = h[ctx[0]]["weight_bytes_per_token"] + h[ctx[0]]["state_bytes_per_token"]
    sw = s[ctx[0]]["weight_bytes_per_token"]
    # Keys and values per token of context: the slope of the cache size over the contexts.
    span = ctx[-1] - ctx[0] if len(ctx) > 1 else 1
    kv_per_ctx_h = (h[ctx[-1]]["cache_bytes_at_context"] - h[ctx[0]]["cache_bytes_at_context"]) / span
    kv_per_ctx_s = (s[ctx[-1]]["cache_bytes_at_context"] - s[ctx[0]]["cache_bytes_at_context"]) / span
    modelled = (hw - sw) / (kv_per_ctx_s - kv_per_ctx_h) if kv_per_ctx_s > kv_per_ctx_h else None
    print(f"crossover (decode): measured {measured and f'{measured:,.0f}'} tokens; modelled from bytes per step "
          f"{modelled and f'{modelled:,.0f}'} tokens (hybrid reads {(hw - sw) / 1e6:.0f} MB more per step, the "
          f"softmax model {(kv_per_ctx_s - kv_per_ctx_h) / 1e3:.1f} KB more per token of context)")
    if len(sys.argv) < 4:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is needed for the PNG (pip install matplotlib)")
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(ctx, [1 / x for x in hd], "o-", label="hybrid (7 Lightning : 1 softmax)")
    ax[0].plot(ctx, [1 / x for x in sd], "s-", label="all softmax")
    if measured:
        ax[0].axvline(measured, color="gray", ls="--", lw=1)
        ax[0].text(measured, ax[0].get_ylim()[1] * 0.95, f" crossover ~{measured / 1000:.0f}k", va="top", fontsize=8)
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("context (tokens)")
    ax[0].set_ylabel("decode tokens/s (one sequence)")
    ax[0].legend(fontsize=8)
    ax[0].set_title("decode")
    ax[1].plot(ctx, [h[c]["cache_bytes_at_context"] / 2**20 for c in ctx], "o-", label="hybrid")
    ax[1].plot(ctx, [s[c]["cache_bytes_at_context"] / 2**20 for c in ctx], "s-", label="all softmax")
    ax[1].set_xscale("log", base=2)
    ax[1].set_yscale("log")
    ax[1].set_xlabel("context (tokens)")
    ax[1].set_ylabel("cache of one sequence (MiB)")
    ax[1].legend(fontsize=8)
    ax[1].set_title("memory")
    fig.suptitle("MiniMax-Text-01 slice (8 layers, real per-layer sizes, fp8): hybrid vs all-softmax", fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=100)
    print(f"wrote {sys.argv[3]}")


if __name__ == "__main__":
    main()
