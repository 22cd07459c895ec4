"""Train m2-tiny from scratch on CPU, within a wall-clock budget, then export it to models/m2-tiny.

Model: transformers' MiniMaxM2ForCausalLM trunk (L = 4 layers) + K = 3 MTP modules (model.py).

Exported tensor names (released MiniMax-M2 layout, one model.safetensors, BF16; biases F32):
  model.embed_tokens.weight, model.norm.weight, lm_head.weight
  model.layers.N.{input_layernorm,post_attention_layernorm}.weight
  model.layers.N.self_attn.{q_proj,k_proj,v_proj,o_proj,q_norm,k_norm}.weight
  model.layers.N.block_sparse_moe.gate.weight, model.layers.N.block_sparse_moe.e_score_correction_bias
  model.layers.N.block_sparse_moe.experts.E.{w1,w2,w3}.weight        (N < L: the trunk)
  MTP module k (k = 0, 1, 2) at index L + k (the slots the released checkpoints reserve):
  model.layers.{L+k}.hnorm.weight            RMSNorm of the previous hidden h^k (h^0 = trunk's last
                                             hidden state before model.norm)
  model.layers.{L+k}.enorm.weight            RMSNorm of the embedding of token t_{i+k+1}
  model.layers.{L+k}.eh_proj.weight [d, 2d]  on concat[hnorm(h) ; enorm(emb)], hidden first
  model.layers.{L+k}.<one decoder layer, usual names: input_layernorm, self_attn.*,
                      post_attention_layernorm, block_sparse_moe.*>
  model.layers.{L+k}.shared_head.norm.weight the module's final RMSNorm before the shared lm_head
  Module k at position i predicts t_{i+k+2}; config.json: use_mtp, num_mtp_modules 3,
  mtp_transformer_layers 1.

Loss: CE(trunk) + lambda * mean_k CE(MTP k), lambda annealed linearly 0.3 -> 0.1 over the run.
Windows: 60% chats (only assistant tokens count, weight 1), 15% code (every token, weight
--code-weight 0.25, so code does not swamp the chats), 25% copying drills (repeated spans of code
or chat text, the second copy counts): the drills make in-context copying (tool arguments from the
user's request, answers from the tool result) appear within the budget; without them a first
85-minute run learnt the format but copied nothing. Embeddings are tied while training (see
model.M2Tiny) and exported as two equal tensors.
Routing balance, aux-loss free: after every step each MoE layer's e_score_correction_bias is
nudged by gamma * sign(mean load - expert load) (overloaded experts down, idle ones up).

Run (from the repo root):
  nice -n 19 python tools/train/train.py --budget-min 85           # full run, then export
  nice -n 19 python tools/train/train.py --budget-min 4 --work /tmp/m2tiny/smoke --no-export
  python tools/train/train.py --resume --work DIR                  # continue after a crash
"""

import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_tokenizer  # noqa: E402
import data as D  # noqa: E402
import model as M  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/m2tiny/run", help="log and checkpoints")
    ap.add_argument("--data-dir", default="/tmp/m2tiny/data", help="tokenizer and token cache")
    ap.add_argument("--budget-min", type=float, default=85.0, help="wall-clock budget for the training loop")
    ap.add_argument("--steps", type=int, default=0, help="optional fixed step count (schedule by steps)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=D.T_DEFAULT)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--chat-frac", type=float, default=0.6, help="share of windows that are chats")
    ap.add_argument("--copy-frac", type=float, default=0.25,
                    help="share of windows that are copying drills (repeated spans); the rest is code")
    ap.add_argument("--code-weight", type=float, default=0.25,
                    help="loss weight of a code token relative to an assistant token (code windows have 5x "
                         "more targets; without this, code took ~70%% of the gradient)")
    ap.add_argument("--bias-gamma", type=float, default=2e-3)
    ap.add_argument("--mtp-w0", type=float, default=0.3)
    ap.add_argument("--mtp-w1", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="1 is much faster than 2 on a busy machine (no spin-waiting)")
    ap.add_argument("--ckpt-every-min", type=float, default=5.0)
    ap.add_argument("--untied", action="store_true", help="train embed_tokens and lm_head separately")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "m2-tiny"))
    return ap.parse_args()


def log(fh, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def get_tokenizer(work):
    tp = os.path.join(work, "tokenizer.json")
    if not os.path.exists(tp):
        build_tokenizer.build(work)
    from tokenizers import Tokenizer
    return tp, Tokenizer.from_file(tp)


def special_ids(tok):
    return tok.token_to_id("]~!b["), tok.token_to_id("[e~["), tok.token_to_id("]!p~[")


class LoadCounter:
    """Forward hooks on the routers: per-MoE-block expert selection counts since the last reset."""

    def __init__(self, blocks, E):
        self.counts = [torch.zeros(E) for _ in blocks]
        self.on = True
        for i, b in enumerate(blocks):
            b.gate.register_forward_hook(self._hook(i))

    def _hook(self, i):
        def f(_mod, _inp, out):
            if self.on:
                idx = out[2]
                self.counts[i] += torch.bincount(idx.reshape(-1), minlength=self.counts[i].numel()).float()
        return f

    def reset(self):
        for c in self.counts:
            c.zero_()


def copy_window(d, gen, T, bos):
    """In-context copying drill: [bos] S1 S1 S2 S2 ... with spans S of 32-192 tokens cut from the code
    stream or from chat windows; only the second copy of each span is a target (its first token
    excepted). It gives ~350 copy targets per window, where a chat window has ~15 (tool arguments
    and answers copied from the query or the tool result), and makes the copying circuit appear early."""
    ids = [bos]
    w = [0.0]
    nchat = d["chat_train_ids"].shape[0]
    ncode = d["code_train"].numel()
    while len(ids) < T:
        n = int(torch.randint(32, 193, (), generator=gen))
        if torch.rand((), generator=gen).item() < 0.5:
            o = int(torch.randint(ncode - n, (), generator=gen))
            s = d["code_train"][o:o + n].tolist()
        else:
            j = int(torch.randint(nchat, (), generator=gen))
            o = int(torch.randint(T - n, (), generator=gen))
            s = d["chat_train_ids"][j, o:o + n].tolist()
        ids += s + s
        w += [0.0] * n + [0.0] + [1.0] * (n - 1)
    return torch.tensor(ids[:T]), torch.tensor(w[:T])


def batch_at(d, gen, B, T, chat_frac, code_weight, copy_frac=0.0, bos=0):
    ids, mask = [], []
    nchat = d["chat_train_ids"].shape[0]
    ncode = d["code_train"].numel()
    for _ in range(B):
        r = torch.rand((), generator=gen).item()
        if r < copy_frac:
            a, b = copy_window(d, gen, T, bos)
            ids.append(a.long())
            mask.append(b)
        elif r < copy_frac + chat_frac:
            j = torch.randint(nchat, (), generator=gen).item()
            ids.append(d["chat_train_ids"][j, :T].long())
            mask.append(d["chat_train_mask"][j, :T].float())
        else:
            o = torch.randint(ncode - T - 1, (), generator=gen).item()
            ids.append(d["code_train"][o:o + T].long())
            mask.append(torch.full((T,), code_weight))
    return torch.stack(ids), torch.stack(mask)


@torch.no_grad()
def evaluate(model, d, T, n_windows=16, B=4):
    """Held-out mean CE per head on code windows, on chat (assistant tokens) and on copying drills
    (second copies only: a loss near 0 means in-context copying works)."""
    model.eval()
    res = {}
    for name in ("code", "chat", "copy"):
        if name == "copy":
            g = torch.Generator().manual_seed(12345)
            bos = int(d["code_eval"][0])
            wins = [tuple(x.long() for x in copy_window(d, g, T, bos)) for _ in range(n_windows // 2)]
        elif name == "code":
            s = d["code_eval"]
            step = max(1, (s.numel() - T - 1) // n_windows)
            wins = [(s[i * step:i * step + T].long(), torch.ones(T, dtype=torch.long)) for i in range(n_windows)]
        else:
            n = min(n_windows, d["chat_eval_ids"].shape[0])
            wins = [(d["chat_eval_ids"][i, :T].long(), d["chat_eval_mask"][i, :T].long()) for i in range(n)]
        tot = None
        for i in range(0, len(wins), B):
            ids = torch.stack([w[0] for w in wins[i:i + B]])
            mask = torch.stack([w[1] for w in wins[i:i + B]])
            _m, _k, stats = model.losses(ids, mask)
            cur = [(n.item(), h.item(), s_.item()) for n, h, s_ in stats]
            tot = cur if tot is None else [tuple(a + b for a, b in zip(x, y)) for x, y in zip(tot, cur)]
        res[name] = [{"tokens": int(n), "loss": s_ / n, "ppl": math.exp(s_ / n), "top1": h / n} for n, h, s_ in tot]
    model.train()
    return res


def save_ckpt(path, model, opt, step, elapsed, gen, args):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                "gen": gen.get_state(), "args": vars(args)}, tmp)
    os.replace(tmp, path)


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    fh = open(os.path.join(args.work, "train.log"), "a")
    os.makedirs(args.data_dir, exist_ok=True)
    tok_path, tok = get_tokenizer(args.data_dir)
    bos, eos, pad = special_ids(tok)
    t0 = time.time()
    d = D.build(args.data_dir, tok_path, T=args.seq, seed=args.seed)
    log(fh, "data: code %d tokens, chat %d windows (%d target tokens), prep %.0fs" % (
        d["code_train"].numel(), d["chat_train_ids"].shape[0], int(d["chat_train_mask"].sum()), time.time() - t0))

    cfg = M.make_config(tok.get_vocab_size(), bos, eos, pad)
    model = M.M2Tiny(cfg, seed=args.seed, tie_train=not args.untied)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 and "norm" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    step, elapsed0 = 0, 0.0
    ck = os.path.join(args.work, "ckpt.pt")
    if args.resume and os.path.exists(ck):
        c = torch.load(ck, weights_only=False)
        model.load_state_dict(c["model"])
        opt.load_state_dict(c["opt"])
        step, elapsed0 = c["step"], c["elapsed"]
        gen.set_state(c["gen"])
        log(fh, "resumed at step %d, %.1f min used" % (step, elapsed0 / 60))
    log(fh, "params %d (%.1f MB bf16); config %s" % (
        sum(p.numel() for p in model.parameters()), 2e-6 * sum(p.numel() for p in model.parameters()),
        json.dumps(M.ARCH)))

    blocks = model.moe_blocks()
    E = cfg.num_local_experts
    loads = LoadCounter(blocks, E)
    budget = args.budget_min * 60
    start = time.time() - elapsed0
    last_ck = time.time()
    last_eval = time.time()
    model.train()
    win_tok, win_t = 0, time.time()
    acc = None
    while True:
        elapsed = time.time() - start
        progress = elapsed / budget
        if args.steps:
            progress = max(progress, step / args.steps)
        if progress >= 1.0:
            break
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            lr = args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        lam = args.mtp_w0 + (args.mtp_w1 - args.mtp_w0) * progress

        ids, mask = batch_at(d, gen, args.batch, args.seq, args.chat_frac, args.code_weight,
                             args.copy_frac, bos)
        loads.reset()
        main_l, mtp_l, stats = model.losses(ids, mask)
        loss = main_l + lam * sum(mtp_l) / len(mtp_l)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        # aux-loss-free balancing: nudge each block's selection bias against its load
        imb = []
        with torch.no_grad():
            for b, c in zip(blocks, loads.counts):
                b.e_score_correction_bias += args.bias_gamma * torch.sign(c.mean() - c)
                imb.append((c.max() / c.mean().clamp_min(1e-9)).item())
        step += 1
        win_tok += ids.numel()
        cur = [main_l.item()] + [x.item() for x in mtp_l] + [max(imb), gnorm]
        acc = cur if acc is None else [a + b for a, b in zip(acc, cur)]
        if step % 10 == 0:
            n = 10
            dt = time.time() - win_t
            log(fh, "step %d %.1fmin lr %.2e lam %.3f | main %.3f mtp %s | max-load/mean %.2f gnorm %.2f | %.0f tok/s" % (
                step, (time.time() - start) / 60, lr, lam, acc[0] / n,
                " ".join("%.3f" % (x / n) for x in acc[1:-2]), acc[-2] / n, acc[-1] / n, win_tok / dt))
            acc, win_tok, win_t = None, 0, time.time()
        if time.time() - last_eval > 15 * 60:
            loads.on = False
            r = evaluate(model, d, args.seq, n_windows=8)
            loads.on = True
            log(fh, "eval step %d: code %s | chat %s | copy %s (top1 %.2f)" % (
                step, " ".join("%.3f" % x["loss"] for x in r["code"]), " ".join("%.3f" % x["loss"] for x in r["chat"]),
                " ".join("%.3f" % x["loss"] for x in r["copy"]), r["copy"][0]["top1"]))
            last_eval = time.time()
        if time.time() - last_ck > args.ckpt_every_min * 60:
            save_ckpt(ck, model, opt, step, time.time() - start, gen, args)
            last_ck = time.time()
    elapsed = time.time() - start
    save_ckpt(ck, model, opt, step, elapsed, gen, args)
    log(fh, "training done: %d steps, %.1f min" % (step, elapsed / 60))
    bias = {i: [round(x, 4) for x in b.e_score_correction_bias.tolist()] for i, b in enumerate(blocks)}
    with open(os.path.join(args.work, "train_summary.json"), "w") as f:
        json.dump({"steps": step, "minutes": elapsed / 60, "tokens_seen": step * args.batch * args.seq,
                   "args": vars(args), "final_bias": bias}, f, indent=1)
    if not args.no_export:
        import export
        export.export(ck, tok_path, args.out, fh=fh)


if __name__ == "__main__":
    main()
