"""Evaluate a shipped m2-tiny folder.

1. Held-out loss / perplexity of the trunk and of each MTP module, on held-out code files (every
   token) and held-out synthetic chats (assistant tokens only), plus MTP top-1 acceptance: how often
   module k's argmax equals the true token t_{i+k+2}, and the mean accepted draft length when the
   three drafts at a position are checked in order against the true continuation.
2. Tool use on N held-out synthetic tasks (seed differs from training), through transformers with
   greedy decoding: the model sees the conversation up to the last user request plus the generation
   prompt ']~b]ai\\n<think>\\n' and must emit reasoning, '</think>' and a <minimax:tool_call> block;
   the calls are parsed, arguments typed by the tool schema and compared with the expected calls.
   Then the real tool results are appended (the model's own call message when it was right, the
   reference one otherwise) and the model must give a final answer that contains the result.
   The same generations give the speculative-decoding acceptance of the MTP drafts against the
   model's own greedy output.

Usage: nice -n 19 python tools/train/evaluate.py [--model models/m2-tiny] [--tasks 100] [--out FILE]
"""

import argparse
import json
import math
import os
import random
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chatdata  # noqa: E402
import data as D  # noqa: E402
import export  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
EVAL_SEED = 4242


@torch.no_grad()
def head_stats(model, windows, B=4):
    """Per head: tokens, CE sum, top-1 hits; plus chained-acceptance histogram (0..K)."""
    K = len(model.mtp)
    tot = [[0, 0.0, 0] for _ in range(K + 1)]
    chain = [0] * (K + 1)
    for s in range(0, len(windows), B):
        ids = torch.stack([w[0] for w in windows[s:s + B]])
        mask = torch.stack([w[1] for w in windows[s:s + B]]).bool()
        outs = model.forward_all(ids)
        T = ids.shape[1]
        hits = []
        for k, lg in enumerate(outs):
            off = k + 1  # head k (0 = trunk) at position i predicts t_{i+off}
            n = T - off
            lg = lg[:, :n].float()
            tgt = ids[:, off:off + n]
            m = mask[:, off:off + n]
            ce = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="none")
            ok = lg.argmax(-1) == tgt
            tot[k][0] += int(m.sum())
            tot[k][1] += float(ce.reshape(m.shape)[m].sum())
            tot[k][2] += int(ok[m].sum())
            hits.append(ok)
        # chained acceptance at positions i where all K draft targets exist and count
        n = T - (K + 1)
        allm = torch.ones_like(mask[:, :n])
        for k in range(1, K + 1):
            allm &= mask[:, k + 1:k + 1 + n]
        run = torch.ones_like(allm)
        length = torch.zeros(allm.shape, dtype=torch.long)
        for k in range(1, K + 1):
            run = run & hits[k][:, :n]
            length += run.long()
        for a in range(K + 1):
            chain[a] += int(((length == a) & allm).sum())
    heads = []
    for k, (n, s, h) in enumerate(tot):
        heads.append({"head": "trunk" if k == 0 else "mtp%d" % (k - 1), "predicts": "t+%d" % (k + 1),
                      "tokens": n, "loss": s / max(n, 1), "ppl": math.exp(s / max(n, 1)), "top1": h / max(n, 1)})
    npos = max(sum(chain), 1)
    return {"heads": heads, "chain_hist": chain,
            "mean_accepted_drafts": sum(a * c for a, c in enumerate(chain)) / npos}


@torch.no_grad()
def expert_loads(model, windows, B=4):
    """Per MoE block (trunk layers, then MTP layers): expert selection counts over the windows."""
    blocks = model.moe_blocks()
    E = model.cfg.num_local_experts
    counts = [torch.zeros(E) for _ in blocks]
    hooks = []
    for i, b in enumerate(blocks):
        def f(_m, _inp, out, i=i):
            counts[i] += torch.bincount(out[2].reshape(-1), minlength=E).float()
        hooks.append(b.gate.register_forward_hook(f))
    for s in range(0, len(windows), B):
        model.forward_all(torch.stack([w[0] for w in windows[s:s + B]]))
    for h in hooks:
        h.remove()
    names = ["layer%d" % i for i in range(model.cfg.num_hidden_layers)] + ["mtp%d" % k for k in range(len(model.mtp))]
    return {n: {"max_over_mean": round(float(c.max() / c.mean()), 3), "min_over_mean": round(float(c.min() / c.mean()), 3)}
            for n, c in zip(names, counts)}


@torch.no_grad()
def load_balance(model, windows):
    """Expert load with the trained selection bias, and with the bias zeroed (what it corrects)."""
    with_bias = expert_loads(model, windows)
    saved = [b.e_score_correction_bias.clone() for b in model.moe_blocks()]
    for b in model.moe_blocks():
        b.e_score_correction_bias.zero_()
    without = expert_loads(model, windows)
    for b, v in zip(model.moe_blocks(), saved):
        b.e_score_correction_bias.copy_(v)
    return {"with_bias": with_bias, "bias_zeroed": without,
            "bias_abs_max": [round(float(v.abs().max()), 4) for v in saved]}


def heldout(model, tok_path, n_windows, T):
    from tokenizers import Tokenizer
    import corpus
    tok = Tokenizer.from_file(tok_path)
    bos = tok.token_to_id("]~!b[")
    pad = tok.token_to_id("]!p~[")
    code = D.code_stream(tok, corpus.load_code(400_000, 150_000, heldout=True), bos)
    step = max(1, (code.numel() - T - 1) // n_windows)
    cw = [(code[i * step:i * step + T].long(), torch.ones(T, dtype=torch.long)) for i in range(n_windows)]
    ci, cm = D.chat_windows(D.chat_tokens(tok, 400, 1002), T, pad)  # same held-out chats as train.py
    chw = [(ci[i].long(), cm[i].long()) for i in range(min(n_windows, ci.shape[0]))]
    half = max(1, n_windows // 4)
    return {"code": head_stats(model, cw), "chat_assistant": head_stats(model, chw),
            "expert_load": load_balance(model, cw[:half] + chw[:half])}


# --------------------------------------------------------------------------------------------
# Tool-use evaluation
# --------------------------------------------------------------------------------------------

CALL_RE = re.compile(r"<minimax:tool_call>(.*?)</minimax:tool_call>", re.S)
INVOKE_RE = re.compile(r'<invoke name="([^"]*)">(.*?)</invoke>', re.S)
PARAM_RE = re.compile(r'<parameter name="([^"]*)">(.*?)</parameter>', re.S)


def parse_reply(text):
    """(reasoning, content, [(name, raw_args)]) from text generated after '<think>\\n'."""
    text = text.split("[e~[")[0]
    if "</think>" in text:
        reasoning, rest = text.split("</think>", 1)
    else:
        reasoning, rest = "", text
    calls = []
    m = CALL_RE.search(rest)
    content = rest
    if m:
        content = rest[:m.start()]
        for name, body in INVOKE_RE.findall(m.group(1)):
            calls.append((name, {k: v for k, v in PARAM_RE.findall(body)}))
    return reasoning.strip("\n"), content.strip("\n"), calls


def same_value(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def typed_ok(name, args):
    """Arguments have the JSON types the schema asks for (integer must be int, number a number...)."""
    props = chatdata.TOOLS[name]["schema"]["parameters"]["properties"]
    for k, v in args.items():
        t = props.get(k, {}).get("type")
        if t == "integer" and not (isinstance(v, int) and not isinstance(v, bool)):
            return False
        if t == "number" and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
            return False
        if t == "boolean" and not isinstance(v, bool):
            return False
        if t == "string" and not isinstance(v, str):
            return False
        if t == "array" and not isinstance(v, list):
            return False
    return True


def calls_match(got, want):
    """Order-insensitive exact match of [(name, typed_args)]."""
    if len(got) != len(want):
        return False
    left = list(want)
    for name, args in got:
        hit = None
        for j, (wn, wa) in enumerate(left):
            if wn == name and set(wa) == set(args) and all(same_value(args[k], wa[k]) for k in wa):
                hit = j
                break
        if hit is None:
            return False
        left.pop(hit)
    return True


def eval_tasks(folder, n_tasks, log):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tk = AutoTokenizer.from_pretrained(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    hf.eval()
    eos = tk.convert_tokens_to_ids("[e~[")
    mtp_model = export.load_folder(folder)
    rng = random.Random(EVAL_SEED)

    def gen(msgs, tools):
        prompt = tk.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
        ids = tk(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = hf.generate(ids, max_new_tokens=160, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        new = out[0, ids.shape[1]:]
        return prompt, out[0], ids.shape[1], tk.decode(new, skip_special_tokens=False)

    K = len(mtp_model.mtp)
    spec_hist = [0] * (K + 1)
    rows = []
    c = dict(format=0, tool=0, typed=0, args=0, final=0, end_to_end=0)
    for t in range(n_tasks):
        msgs, tools, task = chatdata.make_conversation(rng, for_eval=True)
        n = task["n_msgs"]
        prompt_msgs = msgs[:n]
        want = [(nm, a) for nm, a in task["calls"]]
        _p, seq1, plen1, reply = gen(prompt_msgs, tools)
        reasoning, content, raw_calls = parse_reply(reply)
        got = [(nm, chatdata.coerce_args(nm, ra)) if nm in chatdata.TOOLS else (nm, ra) for nm, ra in raw_calls]
        fmt = bool(raw_calls) and reply.rstrip().endswith(("[e~[", "</minimax:tool_call>"))
        tool_ok = sorted(nm for nm, _ in got) == sorted(nm for nm, _ in want)
        typed = tool_ok and all(typed_ok(nm, a) for nm, a in got)
        args_ok = calls_match(got, want)
        # stage 2: the tool results; the model's own call message if right, else the reference one
        ref_call_msg = msgs[n]
        n_tools_msgs = len(ref_call_msg["tool_calls"])
        ref_results = msgs[n + 1:n + 1 + n_tools_msgs]
        if args_ok:
            call_msg = {"role": "assistant", "content": content, "reasoning_content": reasoning,
                        "tool_calls": [{"type": "function", "id": "call_%d" % i,
                                        "function": {"name": nm, "arguments": a}} for i, (nm, a) in enumerate(got)]}
            results = [{"role": "tool", "content": chatdata.run_tool(nm, a)} for nm, a in got]
        else:
            call_msg, results = ref_call_msg, ref_results
        _p2, seq2, plen2, reply2 = gen(prompt_msgs + [call_msg] + results, tools)
        _r2, answer, _c2 = parse_reply(reply2)
        final_ok = all(k in answer for k in task["key"]) and not _c2
        for key, v in (("format", fmt), ("tool", tool_ok), ("typed", typed), ("args", args_ok),
                       ("final", final_ok), ("end_to_end", args_ok and final_ok)):
            c[key] += int(v)
        # speculative acceptance of the MTP drafts on the model's own greedy output
        for seq, plen in ((seq1, plen1), (seq2, plen2)):
            with torch.no_grad():
                outs = mtp_model.forward_all(seq[None])
            L = seq.numel()
            for i in range(plen - 1, L - 1 - 1):  # trunk at i produced seq[i+1]; drafts for seq[i+2..]
                a = 0
                for k in range(K):
                    j = i + k + 2
                    if j >= L or outs[k + 1][0, i].argmax().item() != seq[j].item():
                        break
                    a += 1
                spec_hist[a] += 1
        rows.append({"query": task["query"], "expected": want, "reply": reply, "parsed": got, "answer_reply": reply2,
                     "tool_ok": tool_ok, "args_ok": args_ok, "final_ok": final_ok})
        if (t + 1) % 10 == 0:
            log("tasks %d: %s" % (t + 1, json.dumps(c)))
    npos = max(sum(spec_hist), 1)
    summary = {k: v / n_tasks for k, v in c.items()}
    summary["n_tasks"] = n_tasks
    summary["spec_accept_hist"] = spec_hist
    summary["spec_mean_accepted_drafts"] = sum(a * h for a, h in enumerate(spec_hist)) / npos
    summary["spec_draft_accept_rate_k"] = [sum(spec_hist[a] for a in range(k + 1, K + 1)) / npos for k in range(K)]
    return summary, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "m2-tiny"))
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--seq", type=int, default=D.T_DEFAULT)
    ap.add_argument("--threads", type=int, default=1, help="1 is much faster than 2 on a busy machine (no spin-waiting)")
    ap.add_argument("--out", default="/tmp/m2tiny/eval.json")
    ap.add_argument("--skip-heldout", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t0 = time.time()

    def log(m):
        print("%6.0fs %s" % (time.time() - t0, m), flush=True)

    res = {"model": args.model}
    if not args.skip_heldout:
        model = export.load_folder(args.model)
        res["heldout"] = heldout(model, os.path.join(args.model, "tokenizer.json"), args.windows, args.seq)
        log("expert load: " + json.dumps(res["heldout"]["expert_load"]))
        for kind, r in res["heldout"].items():
            if kind == "expert_load":
                continue
            log("%s: %s | mean accepted drafts %.3f" % (kind, " ".join(
                "%s loss %.3f ppl %.2f top1 %.3f" % (h["head"], h["loss"], h["ppl"], h["top1"]) for h in r["heads"]),
                r["mean_accepted_drafts"]))
    if args.tasks:
        summary, rows = eval_tasks(args.model, args.tasks, log)
        res["tools"] = summary
        res["samples"] = rows
        log("tools: " + json.dumps(summary))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    log("wrote " + args.out)


if __name__ == "__main__":
    main()
