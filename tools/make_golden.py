#!/usr/bin/env python3
"""Builds tiny random-weight MiniMax-M2 checkpoints with transformers' own
MiniMaxM2ForCausalLM and records its fp32 outputs, for the engine's golden tests.

    python3 tools/make_golden.py            # rewrites testdata/golden/*

For each model it writes testdata/golden/<name>/:
  config.json, model.safetensors (or shards + model.safetensors.index.json)
      in the RELEASED tensor layout (block_sparse_moe.experts.E.w1/w2/w3), or in
      transformers' fused layout (mlp.experts.gate_up_proj) for the *-hf-layout model;
  golden.safetensors:
      prompt_logits [P, V]   logits at every prompt position (one forward pass)
      decode_logits [S, V]   logits of each greedy decode step (KV cache)
      layer_out.<l> [P, H]   output of decoder layer l over the prompt (hooks), and
      embed [P, H], final_norm [P, H]   for layer-by-layer comparisons;
  golden.json: prompt ids, greedy ids, sizes.

Numerics: the reference runs in fp32. For BF16 and FP8 checkpoints the reference
model holds exactly the values the checkpoint stores, dequantized to fp32
(FP8: float(q) * scale per 128x128 block, as MODEL_SPEC.md says), so the engine's
"dequantize weights, fp32 activations" path should match to fp32 rounding.
The script checks that transformers' from_pretrained on the written folder (non-fp8)
reproduces the same logits, which proves the layout conversion.
"""
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "golden")
FP8_MAX = 448.0
BLOCK = 128

MODELS = [
    # GQA 6:1, rotary_dim 8 of head_dim 16 (given as rotary_dim only), fp32, one file.
    dict(name="tiny-f32-gqa6", dtype="f32", shards=1, seed=1,
         cfg=dict(vocab_size=320, hidden_size=96, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=1, head_dim=16, rotary_dim=8,
                  rope_theta=10000.0, num_local_experts=8, num_experts_per_tok=2)),
    # The same weights in transformers' own fused layout (mlp.experts.gate_up_proj).
    dict(name="tiny-f32-hf-layout", same_as="tiny-f32-gqa6", layout="hf"),
    # GQA 4:1, partial_rotary_factor 0.5, 16 experts top-4, bf16, three shards.
    dict(name="tiny-bf16-sharded", dtype="bf16", shards=3, seed=2,
         cfg=dict(vocab_size=384, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.5,
                  rope_theta=5000000.0, num_local_experts=16, num_experts_per_tok=4)),
    # FP8 block-quantized in the official layout; hidden 200 and width 160 make partial
    # 128x128 edge blocks; GQA 3:1; bf16 embeddings and lm_head, fp32 router gate.
    dict(name="tiny-fp8", dtype="fp8", shards=1, seed=3,
         cfg=dict(vocab_size=300, hidden_size=200, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, head_dim=32, rotary_dim=16,
                  rope_theta=5000000.0, num_local_experts=4, num_experts_per_tok=2)),
]
PROMPT_LEN = 12
DECODE_STEPS = 16


def make_config(spec):
    c = dict(spec["cfg"])
    extra = {}
    if "rotary_dim" in c:
        extra["rotary_dim"] = c["rotary_dim"]
    cfg = MiniMaxM2Config(**{k: v for k, v in c.items() if k not in ("rotary_dim", "rope_theta", "partial_rotary_factor")},
                          rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"],
                                           "partial_rotary_factor": c.get("partial_rotary_factor",
                                                                          c.get("rotary_dim", 0) / c["head_dim"])},
                          bos_token_id=1, eos_token_id=2, max_position_embeddings=4096,
                          tie_word_embeddings=False)
    return cfg


def config_json(spec, cfg):
    """The config.json the engine reads, in the released checkpoints' style."""
    c = spec["cfg"]
    j = {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
        "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"], "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"], "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"], "rope_theta": c["rope_theta"],
        "num_local_experts": c["num_local_experts"], "num_experts_per_tok": c["num_experts_per_tok"],
        "scoring_func": "sigmoid", "use_routing_bias": True, "use_qk_norm": True, "qk_norm_type": "per_layer",
        "shared_intermediate_size": 0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "sliding_window": None,
        "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "fp8": "bfloat16"}[spec["dtype"]],
    }
    if "rotary_dim" in c:
        j["rotary_dim"] = c["rotary_dim"]
    else:
        j["partial_rotary_factor"] = c["partial_rotary_factor"]
    if spec["dtype"] == "fp8":
        j["quantization_config"] = {"quant_method": "fp8", "fmt": "float8_e4m3fn", "activation_scheme": "dynamic",
                                    "weight_block_size": [BLOCK, BLOCK],
                                    "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}
    return j


def randomize(model, seed):
    """Weights large enough that logits spread out (greedy choices far from ties),
    norms away from 1 and a non-zero routing bias so every term is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / math.sqrt(fan_in)))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def quantize_fp8(w):
    """128x128 block fp8 e4m3: returns (q [out,in] float8, scale [ceil(out/128), ceil(in/128)] fp32)."""
    out_f, in_f = w.shape
    so, si = -(-out_f // BLOCK), -(-in_f // BLOCK)
    scale = torch.zeros(so, si, dtype=torch.float32)
    q = torch.zeros(out_f, in_f, dtype=torch.float8_e4m3fn)
    for i in range(so):
        for j in range(si):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            s = blk.abs().max().clamp(min=1e-12) / FP8_MAX
            scale[i, j] = s
            q[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


def dequantize_fp8(q, scale):
    rows = torch.arange(q.shape[0]) // BLOCK
    cols = torch.arange(q.shape[1]) // BLOCK
    return q.to(torch.float32) * scale[rows][:, cols]


def released_tensors(model, cfg, dtype):
    """State dict in the released layout; also puts the stored values back into the
    model (rounded to bf16 / dequantized fp8) so the reference computes with them."""
    sd = {}
    E, I = cfg.num_local_experts, cfg.intermediate_size
    as_store = {"f32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.bfloat16}[dtype]

    def store_plain(name, t, cast=as_store):
        stored = t.detach().to(cast).contiguous()
        t.data.copy_(stored.to(torch.float32))
        sd[name] = stored

    def store_linear(name, t):  # name without ".weight"
        if dtype != "fp8":
            return store_plain(name + ".weight", t)
        q, s = quantize_fp8(t.detach().float())
        t.data.copy_(dequantize_fp8(q, s))
        sd[name + ".weight"] = q.contiguous()
        sd[name + ".weight_scale_inv"] = s.contiguous()

    m = model.model
    store_plain("model.embed_tokens.weight", m.embed_tokens.weight)
    store_plain("model.norm.weight", m.norm.weight)
    store_plain("lm_head.weight", model.lm_head.weight)
    for l, layer in enumerate(m.layers):
        p = f"model.layers.{l}"
        store_plain(f"{p}.input_layernorm.weight", layer.input_layernorm.weight)
        store_plain(f"{p}.post_attention_layernorm.weight", layer.post_attention_layernorm.weight)
        a = layer.self_attn
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            store_linear(f"{p}.self_attn.{proj}", getattr(a, proj).weight)
        store_plain(f"{p}.self_attn.q_norm.weight", a.q_norm.weight)
        store_plain(f"{p}.self_attn.k_norm.weight", a.k_norm.weight)
        moe = layer.mlp
        # The router gate is never quantized; fp8 models keep it in fp32.
        store_plain(f"{p}.block_sparse_moe.gate.weight", moe.gate.weight,
                    torch.float32 if dtype == "fp8" else as_store)
        sd[f"{p}.block_sparse_moe.e_score_correction_bias"] = moe.e_score_correction_bias.detach().float().clone()
        gate_up, down = moe.experts.gate_up_proj, moe.experts.down_proj
        for e in range(E):
            for wname, view in (("w1", gate_up[e, :I]), ("w3", gate_up[e, I:]), ("w2", down[e])):
                t = view.detach().clone()
                if dtype == "fp8":
                    q, s = quantize_fp8(t.float())
                    view.data.copy_(dequantize_fp8(q, s))
                    sd[f"{p}.block_sparse_moe.experts.{e}.{wname}.weight"] = q.contiguous()
                    sd[f"{p}.block_sparse_moe.experts.{e}.{wname}.weight_scale_inv"] = s.contiguous()
                else:
                    stored = t.to(as_store).contiguous()
                    view.data.copy_(stored.float())
                    sd[f"{p}.block_sparse_moe.experts.{e}.{wname}.weight"] = stored
    return sd


def hf_layout_tensors(model):
    """transformers' module names (fused experts), fp32."""
    return {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()
            if not k.endswith("inv_freq")}


def write_checkpoint(out, tensors, shards):
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map = {}
    per = -(-len(names) // shards)
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(out, fname), metadata={"format": "pt"})
        for n in part:
            weight_map[n] = fname
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def run_reference(model, prompt):
    """Prompt logits + layer outputs in one pass, then greedy decode with the KV cache."""
    record = {}
    hooks = [layer.register_forward_hook(lambda mod, inp, out, l=l: record.__setitem__(
        f"layer_out.{l}", (out[0] if isinstance(out, tuple) else out)[0].detach().clone()))
        for l, layer in enumerate(model.model.layers)]
    hooks.append(model.model.embed_tokens.register_forward_hook(
        lambda mod, inp, out: record.__setitem__("embed", out[0].detach().clone())))
    hooks.append(model.model.norm.register_forward_hook(
        lambda mod, inp, out: record.__setitem__("final_norm", out[0].detach().clone())))
    with torch.no_grad():
        out = model(input_ids=prompt[None], use_cache=True)
    for h in hooks:
        h.remove()
    prompt_logits = out.logits[0].float()
    cache = out.past_key_values
    steps, ids = [], []
    nxt = int(prompt_logits[-1].argmax())
    with torch.no_grad():
        for _ in range(DECODE_STEPS):
            ids.append(nxt)
            o = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            logits = o.logits[0, -1].float()
            steps.append(logits)
            nxt = int(logits.argmax())
    return prompt_logits, torch.stack(steps), ids, record


def min_margin(logits):
    top2 = logits.topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def main():
    torch.set_num_threads(2)
    built = {}
    for spec in MODELS:
        out = os.path.join(ROOT, spec["name"])
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        if "same_as" in spec:  # another layout of an existing model
            base = built[spec["same_as"]]
            write_checkpoint(out, hf_layout_tensors(base["model"]), 1)
            shutil.copy(os.path.join(ROOT, spec["same_as"], "config.json"), out)
            for f in ("golden.safetensors", "golden.json"):
                shutil.copy(os.path.join(ROOT, spec["same_as"], f), out)
            check_reload(out, base["prompt"], base["prompt_logits"])
            print(f"{spec['name']}: same weights as {spec['same_as']}, transformers layout")
            continue
        torch.manual_seed(spec["seed"])
        cfg = make_config(spec)
        model = MiniMaxM2ForCausalLM(cfg).float().eval()
        randomize(model, spec["seed"])
        tensors = released_tensors(model, cfg, spec["dtype"])
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config_json(spec, cfg), f, indent=2)
        write_checkpoint(out, tensors, spec["shards"])

        g = torch.Generator().manual_seed(100 + spec["seed"])
        prompt = torch.randint(3, cfg.vocab_size, (PROMPT_LEN,), generator=g)
        prompt_logits, decode_logits, greedy, record = run_reference(model, prompt)
        # Sanity: the cached decode agrees with one full pass over prompt + generated.
        with torch.no_grad():
            full = model(input_ids=torch.cat([prompt, torch.tensor(greedy)])[None]).logits[0].float()
        drift = float((full[PROMPT_LEN - 1:PROMPT_LEN - 1 + DECODE_STEPS][1:] - decode_logits[:-1]).abs().max())
        assert drift < 1e-3, f"cached decode disagrees with a full pass: {drift}"
        if spec["dtype"] != "fp8":
            check_reload(out, prompt, prompt_logits)

        golden = {"prompt_logits": prompt_logits.contiguous(), "decode_logits": decode_logits.contiguous()}
        golden.update({k: v.float().contiguous() for k, v in record.items()})
        save_file(golden, os.path.join(out, "golden.safetensors"))
        margin = min(min_margin(decode_logits), min_margin(prompt_logits[-1:]))
        scale = float(torch.cat([prompt_logits, decode_logits]).abs().max())
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"prompt_ids": prompt.tolist(), "greedy_ids": greedy, "vocab_size": cfg.vocab_size,
                       "logit_scale": scale, "min_greedy_margin": margin,
                       "transformers": __import__("transformers").__version__,
                       "torch": torch.__version__}, f, indent=2)
        print(f"{spec['name']}: logit scale {scale:.3f}, smallest greedy margin {margin:.4f}, greedy {greedy}")
        if margin < 1e-3 * scale:
            print("  WARNING: a greedy step is close to a tie; pick another seed", file=sys.stderr)
        built[spec["name"]] = {"model": model, "prompt": prompt, "prompt_logits": prompt_logits}


def check_reload(folder, prompt, expected):
    """transformers itself loads the written folder and must give the same logits."""
    m = MiniMaxM2ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        got = m(input_ids=prompt[None]).logits[0].float()
    diff = float((got - expected).abs().max())
    assert diff < 1e-5, f"{folder}: transformers reload differs by {diff}"


if __name__ == "__main__":
    main()
