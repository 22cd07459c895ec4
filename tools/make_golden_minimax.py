#!/usr/bin/env python3
"""Golden data for the Lightning-attention hybrid (MiniMax-Text-01 / MiniMax-M1), made
with transformers' own MiniMaxForCausalLM (transformers.models.minimax).

    python3 tools/make_golden_minimax.py     # rewrites testdata/golden/tiny-hybrid-*

The same structure, style and numerics as tools/make_golden.py (the MiniMax-M2 goldens):
tiny random-weight models, the reference in fp32 on exactly the stored values (bf16
weights rounded and copied back into the model), 21 prompt tokens (blocks of 8 + 8 + 5)
and 16 greedy decode steps through the cache.

Models (testdata/golden/<name>/):
  tiny-hybrid-text01  released naming, config.json as MiniMax-Text-01 ("minimax_text_01",
                      attn_type_list [0, 0, 1]: softmax LAST), fp32, one file;
                      hidden 80 with 4 x 16 attention channels (projections not square).
  tiny-hybrid-m1      released naming, config.json as MiniMax-M1 ("minimax_m1",
                      attn_type_list [1, 0, 0, 0]: softmax FIRST), bf16, two shards +
                      model.safetensors.index.json, GQA 4:2, 8 experts.
  tiny-hybrid-hf      written by transformers' save_pretrained (config "minimax" with
                      layer_types, *_alpha_factor/_beta_factor, rope_parameters), layer
                      types [linear, full, linear, full, linear], fp32, GQA 4:1.
Each holds config.json, the weights, and
  golden.safetensors  prompt_logits [P, V], decode_logits [S, V], and over the prompt:
                      embed [P, H], attn_out.<l> [P, H] (the self_attn module's output,
                      i.e. after out_proj / o_proj, before the residual mix),
                      layer_out.<l> [P, H], final_norm [P, H];
  golden.json         prompt_ids, greedy_ids, vocab_size, logit_scale, min_greedy_margin,
                      the schedule (attn_type_list and layer_types), the alpha/beta used
                      per kind, rotary_dim, block_size, versions.

What transformers' MiniMax computes (read in modeling_minimax.py /
configuration_minimax.py of transformers 5.24.0, and confirmed by the checks below):

Lightning layer (MiniMaxLightningAttention; layer_types[l] == "linear_attention"),
input x = input_layernorm(h) [T, H], n heads of d = head_dim (num_key_value_heads is
not used by it):
  qkv = silu(qkv_proj(x))                  qkv_proj.weight [3*n*d, H], SiLU on all of it
  per head, rows of qkv_proj are [q | k | v]: head i is rows [3*d*i, 3*d*(i+1)), of
      which the first d are q, the next d are k, the last d are v (the output is
      reshaped [T, n, 3*d] and split in three along the last axis). No RoPE, no scale.
  slope_i = b^(i+1) * f_l  for head i = 0..n-1, b = 1 / 2^(8/n), and
      f_l = 1 - l / (L - 1 + 1e-5) + 1e-5, l = the layer's index among ALL L decoder
      layers. (For n a power of two b^(i+1) equals the ALiBi slopes of the released
      code; for other n the released code interleaves slopes of the neighbouring powers
      of two and transformers does not: all models here use n = 4. The released code
      and vLLM write f_l = 1 - l / (L - 1) + 1e-5; the two differ by at most ~1e-5/(L-1)
      in f_l, which matters only relatively for the last layer, f = 1.33e-5 vs 1e-5 at
      L = 4, far below any tolerance over these prompt lengths.)
  out_t = sum_{j <= t} exp(-slope * (t - j)) * (q_t . k_j) * v_j      per head
      First call (no linear state in the cache): computed in blocks of block_size
      (intra-block q k^T masked with exp(-slope*(i-j)) for j <= i; inter-block
      (q * exp(-slope*(i+1))) @ KV; KV <- exp(-slope*m) KV + (k * exp(-slope*(m-1-j)))^T v
      for a block of m rows, so the last, shorter block is handled too); with a linear
      state in the cache: the per-token recurrence KV <- exp(-slope) KV + k_t^T v_t,
      out_t = q_t KV. The state KV [n, d, d] (key channel x value channel) is what the
      cache keeps (the final KV after the prompt, in both forms). The check below (a)
      compares the two forms (and different block boundaries) on every position.
  o = RMSNorm(out) over all n*d channels at once (not per head), weight self_attn.norm,
      eps 1e-6: MiniMaxRMSNorm's default; config.rms_norm_eps is NOT used here;
  o = sigmoid(output_gate(x)) * o           output_gate.weight [n*d, H], on the same x
  attn_out = out_proj(o)                    out_proj.weight [H, n*d]
Softmax layer (MiniMaxAttention, Mixtral-like; "full_attention"): q/k/v/o_proj without
  bias, no q/k norm, GQA by repeating kv heads, causal, scale head_dim^-0.5, RoPE
  NeoX-style (rotate_half: channel c pairs with c + half) on q and k.
  PARTIAL ROTARY: transformers' MiniMax does not support it. MiniMaxRotaryEmbedding's
  default init uses dim = head_dim (partial_rotary_factor in rope_parameters is ignored,
  and a legacy "rotary_dim" is not read), and apply_rotary_pos_emb rotates all head_dim
  channels. The released MiniMax-Text-01 / M1 checkpoints use rotary_dim 64 of head_dim
  128: their remote code (and vLLM's minimax_text_01) rotates the FIRST rotary_dim
  channels NeoX-style within those channels (pairs (c, c + rotary_dim/2), inv_freq_i =
  theta^(-2i/rotary_dim), i < rotary_dim/2) and passes channels [rotary_dim, head_dim)
  through unchanged. For the released-naming models here (rotary_dim 8 of 16) the
  reference therefore has that partial rotary put in (partial_rope below: the rotary
  module's inv_freq over rotary_dim, and apply_rotary_pos_emb rotating the first
  cos.shape[-1] channels; with a full-width cos it is transformers' function exactly,
  which is checked). The hf model uses transformers' own full rotary (its config has no
  partial factor).
Decoder layer (always "postnorm": the residual is the NORMED input):
  x = input_layernorm(h);  h = alpha_attn * x + beta_attn * self_attn(x)
  y = post_attention_layernorm(h);  h = alpha_mlp * y + beta_mlp * moe(y)
  with (alpha_attn, beta_attn) = linear_attn_*_factor or full_attn_*_factor by the
  layer's kind and mlp_*_factor for the MoE (released names: layernorm_linear_attention_
  alpha/beta, layernorm_full_attention_alpha/beta, layernorm_mlp_alpha/beta).
  input/post_attention_layernorm and the final model.norm use config.rms_norm_eps
  (MiniMaxConfig's default 1e-5).
Router (MiniMaxTopKRouter): logits = y @ gate.weight^T, softmax over all experts in
  fp32, top-k of the probabilities, the k weights renormalised to sum 1 (no bias, no
  scaling); expert e: down_e(silu(gate_e y) * up_e y) with gate_up_proj[e] = [w1; w3]
  (rows [0, I) = w1 = gate, [I, 2I) = w3 = up), down_proj[e] = w2 [H, I]; no shared
  expert. lm_head is not tied.
Cache: transformers' MiniMaxCache.get_seq_length() reads cache layer 0, which stays empty
  when layer 0 is a Lightning layer, so its decode would restart RoPE positions at 0
  (tiny-hybrid-text01 and -hf: logits off by several units); the decode here passes
  position_ids explicitly (P + step), as any engine must.

Tensor names:
  released (tiny-hybrid-text01, -m1): model.embed_tokens.weight, model.norm.weight,
    lm_head.weight, model.layers.N.{input_layernorm,post_attention_layernorm}.weight,
    Lightning model.layers.N.self_attn.{qkv_proj,output_gate,norm,out_proj}.weight,
    softmax model.layers.N.self_attn.{q_proj,k_proj,v_proj,o_proj}.weight,
    model.layers.N.block_sparse_moe.gate.weight [E, H],
    model.layers.N.block_sparse_moe.experts.E.{w1,w3}.weight [I, H], .w2.weight [H, I].
  transformers' in-memory state_dict() fuses the experts (mlp.gate.weight,
    mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]), but its
    save_pretrained (5.24) converts back to the released MoE names above and also writes
    the Lightning layers' persistent buffers model.layers.N.self_attn.{slope_rate [n,1,1],
    query_decay [n,B,1], key_decay [n,B,1], diagonal_decay [1,n,B,B]} (B = block_size;
    derived from the config, an engine may ignore them). tiny-hybrid-hf is exactly what
    save_pretrained writes (plus its generation_config.json).

Checks made here before anything is written:
  (a) cached greedy decode == one full pass over prompt + generated tokens (1e-3), and
      feeding the prompt one token at a time (first token blocked, then the recurrence)
      == the one-call prompt logits (1e-3): the blocked and recurrent forms agree;
  (b) tiny-hybrid-hf: transformers' from_pretrained on the written folder reproduces the
      prompt logits (1e-5). Released naming: transformers cannot load these folders by
      itself: AutoConfig does not know model_type "minimax_text_01" / "minimax_m1"
      (ValueError), and MiniMaxForCausalLM.from_pretrained(folder) reads config.json as a
      MiniMaxConfig that ignores attn_type_list and the layernorm_* names (default layer
      types, alpha = beta = 1) and, for a foreign model_type, does not convert the
      block_sparse_moe.* names either (reported unexpected; experts left random): the
      script checks that its logits differ. Given the equivalent MiniMaxConfig,
      from_pretrained loads the released tensor names (its Mixtral conversion fuses
      block_sparse_moe.experts.E.w1/w3 into gate_up_proj; the Lightning buffers, absent,
      are recomputed) and, with the same partial rotary, reproduces the logits (1e-5):
      that checks the tensor layout; the engine matching the goldens checks the config;
  (c) the partial-rotary apply_rotary_pos_emb equals transformers' for a full-width cos,
      and with a partial cos leaves channels [rotary_dim, head_dim) untouched;
  (d) sensitivity (printed; the model is restored after): full rotary instead of the
      partial one moves the released models' prompt logits by ~5 (asserted > 1e-2 of the
      logit scale: the goldens tell the two apart); the released code's slope factor
      1 - l/(L-1) + 1e-5 moves them by < 1e-5 (asserted < 1e-5 of the scale, so an engine
      may use either formula); eps 1e-5 instead of 1e-6 in the Lightning norm moves them
      by ~1e-5 (the goldens cannot tell these eps apart);
  (e) independent_forward: the formulas above, written out in float64 torch from the
      written folder alone (config.json + tensors; Lightning as one masked product, no
      blocks, no recurrence), reproduce the prompt logits and every layer output within
      1e-5 of their scale (measured 4e-6 .. 2e-5 absolute at logit scales 6 .. 7).

Seeds were picked for greedy margins >= 1.3e-2 of the logit scale (golden.json).
There is no testdata/golden/README.md; this docstring is the explanation.
"""
import json
import math
import os
import shutil
import sys

import torch
import transformers
import transformers.models.minimax.modeling_minimax as mm
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, MiniMaxConfig, MiniMaxForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "golden")
PROMPT_LEN = 21   # not a multiple of BLOCK_SIZE
DECODE_STEPS = 16
BLOCK_SIZE = 8
KINDS = {0: "linear_attention", 1: "full_attention"}   # released attn_type_list values

MODELS = [
    # Lightning, Lightning, softmax; MHA; hidden 80 vs 4 x 16 attention channels; fp32.
    dict(name="tiny-hybrid-text01", naming="text01", dtype="f32", shards=1, seed=4, schedule=[0, 0, 1],
         ab=dict(linear=(1.6, 0.7), full=(1.3, 0.9), mlp=(1.8, 0.6)),
         cfg=dict(vocab_size=300, hidden_size=80, intermediate_size=32, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=16, rotary_dim=8, rope_theta=10000.0,
                  num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5)),
    # softmax, then three Lightning layers; GQA 4:2; 8 experts; bf16 in two shards.
    dict(name="tiny-hybrid-m1", naming="m1", dtype="bf16", shards=2, seed=35, schedule=[1, 0, 0, 0],
         ab=dict(linear=(1.4, 0.8), full=(1.2, 1.1), mlp=(1.7, 0.5)),
         cfg=dict(vocab_size=384, hidden_size=64, intermediate_size=32, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, rotary_dim=8, rope_theta=100000.0,
                  num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-6)),
    # transformers' own files (save_pretrained); full rotary; GQA 4:1; fp32. Intermediate
    # 24 keeps the five layers under 1 MB.
    dict(name="tiny-hybrid-hf", naming="hf", dtype="f32", shards=1, seed=36, schedule=[0, 1, 0, 1, 0],
         ab=dict(linear=(1.5, 0.75), full=(1.25, 0.85), mlp=(1.9, 0.65)),
         cfg=dict(vocab_size=300, hidden_size=64, intermediate_size=24, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=16, rotary_dim=None, rope_theta=10000.0,
                  num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5)),
]

# ---------------------------------------------------------------------------------------
# Partial rotary (the released models' RoPE), see the docstring.
_TRANSFORMERS_APPLY_ROPE = mm.apply_rotary_pos_emb


def apply_partial_rotary(q, k, cos, sin, unsqueeze_dim=1):
    """RoPE on the first cos.shape[-1] channels of q and k (NeoX rotate_half within
    them); the remaining channels pass through. Full-width cos: transformers' function."""
    rd = cos.shape[-1]
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)

    def rotate(x):
        rot, rest = x[..., :rd], x[..., rd:]
        return torch.cat((rot * cos + mm.rotate_half(rot) * sin, rest), dim=-1)

    return rotate(q), rotate(k)


mm.apply_rotary_pos_emb = apply_partial_rotary   # MiniMaxAttention.forward looks it up here


def partial_rope(model, rotary_dim, theta):
    """Makes the model's rotary module produce cos/sin over rotary_dim channels."""
    if rotary_dim is None:
        return
    rot = model.model.rotary_emb
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    rot.inv_freq = inv_freq
    rot.original_inv_freq = inv_freq.clone()


def check_partial_rotary():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 5, 16, generator=g), torch.randn(1, 2, 5, 16, generator=g)
    ang = torch.randn(1, 5, 8, generator=g)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    for a, b in zip(apply_partial_rotary(q, k, cos, sin), _TRANSFORMERS_APPLY_ROPE(q, k, cos, sin)):
        assert torch.equal(a, b), "partial rotary differs from transformers' at full width"
    cos4, sin4 = torch.cat((ang[..., :4], ang[..., :4]), -1).cos(), torch.cat((ang[..., :4], ang[..., :4]), -1).sin()
    pq, pk = apply_partial_rotary(q, k, cos4, sin4)
    wq, wk = _TRANSFORMERS_APPLY_ROPE(q[..., :8], k[..., :8], cos4, sin4)
    assert torch.equal(pq[..., 8:], q[..., 8:]) and torch.equal(pk[..., 8:], k[..., 8:])
    assert torch.equal(pq[..., :8], wq) and torch.equal(pk[..., :8], wk)


# ---------------------------------------------------------------------------------------
def make_config(spec):
    c, ab = spec["cfg"], spec["ab"]
    return MiniMaxConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        num_hidden_layers=len(spec["schedule"]), num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"], hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=c["rms_norm_eps"], bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, num_local_experts=c["num_local_experts"],
        num_experts_per_tok=c["num_experts_per_tok"],
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
        layer_types=[KINDS[t] for t in spec["schedule"]], block_size=BLOCK_SIZE,
        linear_attn_alpha_factor=ab["linear"][0], linear_attn_beta_factor=ab["linear"][1],
        full_attn_alpha_factor=ab["full"][0], full_attn_beta_factor=ab["full"][1],
        mlp_alpha_factor=ab["mlp"][0], mlp_beta_factor=ab["mlp"][1])


def released_config_json(spec):
    """config.json in the released MiniMax-Text-01 / MiniMax-M1 style."""
    c, ab = spec["cfg"], spec["ab"]
    arch, mtype = {"text01": ("MiniMaxText01ForCausalLM", "minimax_text_01"),
                   "m1": ("MiniMaxM1ForCausalLM", "minimax_m1")}[spec["naming"]]
    return {
        "architectures": [arch], "model_type": mtype,
        "attn_type_list": spec["schedule"],
        "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"], "num_hidden_layers": len(spec["schedule"]),
        "num_attention_heads": c["num_attention_heads"], "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"], "rotary_dim": c["rotary_dim"], "rope_theta": c["rope_theta"],
        "block_size": BLOCK_SIZE, "postnorm": True,
        "layernorm_full_attention_alpha": ab["full"][0], "layernorm_full_attention_beta": ab["full"][1],
        "layernorm_linear_attention_alpha": ab["linear"][0], "layernorm_linear_attention_beta": ab["linear"][1],
        "layernorm_mlp_alpha": ab["mlp"][0], "layernorm_mlp_beta": ab["mlp"][1],
        "num_local_experts": c["num_local_experts"], "num_experts_per_tok": c["num_experts_per_tok"],
        "shared_intermediate_size": 0, "shared_moe_mode": "sigmoid",
        "rms_norm_eps": c["rms_norm_eps"], "hidden_act": "silu",
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "sliding_window": None,
        "attention_dropout": 0.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
        "output_router_logits": False, "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[spec["dtype"]],
    }


def randomize(model, seed):
    """As tools/make_golden.py: norms 1 + 0.2 randn, embeddings randn, linear weights
    randn * 1.5 / sqrt(fan_in) (logits spread out; greedy choices far from ties)."""
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


def released_tensors(model, dtype):
    """State dict in the released layout; puts the stored values back into the model
    (rounded to bf16) so the reference computes with exactly them."""
    sd = {}
    as_store = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]

    def store(name, t):
        stored = t.detach().to(as_store).contiguous().clone()
        t.data.copy_(stored.to(torch.float32))
        sd[name] = stored

    m = model.model
    store("model.embed_tokens.weight", m.embed_tokens.weight)
    store("model.norm.weight", m.norm.weight)
    store("lm_head.weight", model.lm_head.weight)
    I = model.config.intermediate_size
    for l, layer in enumerate(m.layers):
        p = f"model.layers.{l}"
        store(f"{p}.input_layernorm.weight", layer.input_layernorm.weight)
        store(f"{p}.post_attention_layernorm.weight", layer.post_attention_layernorm.weight)
        a = layer.self_attn
        if isinstance(a, mm.MiniMaxLightningAttention):
            for mod in ("qkv_proj", "output_gate", "norm", "out_proj"):
                store(f"{p}.self_attn.{mod}.weight", getattr(a, mod).weight)
        else:
            for mod in ("q_proj", "k_proj", "v_proj", "o_proj"):
                store(f"{p}.self_attn.{mod}.weight", getattr(a, mod).weight)
        moe = layer.mlp
        store(f"{p}.block_sparse_moe.gate.weight", moe.gate.weight)
        gate_up, down = moe.experts.gate_up_proj, moe.experts.down_proj
        for e in range(moe.experts.num_experts):
            for wname, view in (("w1", gate_up[e, :I]), ("w3", gate_up[e, I:]), ("w2", down[e])):
                store(f"{p}.block_sparse_moe.experts.{e}.{wname}.weight", view)
    return sd


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


# ---------------------------------------------------------------------------------------
def forward(model, ids, cache=None, start=0):
    """One call; position_ids always explicit (see the docstring's Cache note)."""
    pos = torch.arange(start, start + ids.shape[0])[None]
    with torch.no_grad():
        out = model(input_ids=ids[None], position_ids=pos, cache=cache, use_cache=cache is not None)
    return out.logits[0].float(), out.cache


def run_reference(model, prompt):
    """Prompt logits + per-layer outputs in one call, then greedy decode with the cache."""
    record = {}

    def keep(name):
        return lambda mod, inp, out: record.__setitem__(
            name, (out[0] if isinstance(out, tuple) else out)[0].detach().float().clone())

    hooks = [model.model.embed_tokens.register_forward_hook(keep("embed")),
             model.model.norm.register_forward_hook(keep("final_norm"))]
    for l, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_hook(keep(f"layer_out.{l}")))
        hooks.append(layer.self_attn.register_forward_hook(keep(f"attn_out.{l}")))
    cache = mm.MiniMaxCache()
    prompt_logits, cache = forward(model, prompt, cache)
    for h in hooks:
        h.remove()
    steps, ids = [], []
    nxt = int(prompt_logits[-1].argmax())
    for s in range(DECODE_STEPS):
        ids.append(nxt)
        logits, cache = forward(model, torch.tensor([nxt]), cache, start=len(prompt) + s)
        steps.append(logits[-1])
        nxt = int(logits[-1].argmax())
    return prompt_logits, torch.stack(steps), ids, record


def check_forms(model, prompt, greedy, prompt_logits, decode_logits):
    """(a): cached decode vs one full pass; token-by-token prompt vs one call."""
    P = len(prompt)
    full, _ = forward(model, torch.cat([prompt, torch.tensor(greedy)]))
    d1 = float((full[P:P + DECODE_STEPS] - decode_logits).abs().max())
    d2 = float((full[:P] - prompt_logits).abs().max())
    cache, rows = mm.MiniMaxCache(), []
    for t in range(P):
        logits, cache = forward(model, prompt[t:t + 1], cache, start=t)
        rows.append(logits[-1])
    d3 = float((torch.stack(rows) - prompt_logits).abs().max())
    assert max(d1, d2, d3) < 1e-3, f"blocked and recurrent forms disagree: {d1} {d2} {d3}"
    return max(d1, d2, d3)


def check_reload_hf(folder, prompt, expected):
    m = MiniMaxForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    got, _ = forward(m, prompt)
    diff = float((got - expected).abs().max())
    assert diff < 1e-5, f"{folder}: transformers reload differs by {diff}"
    return diff


def check_reload_released(folder, spec, cfg, prompt, expected):
    """transformers cannot read the released config; given the equivalent MiniMaxConfig it
    loads the released tensor names and must reproduce the logits."""
    try:
        AutoConfig.from_pretrained(folder)
        raise AssertionError(f"{folder}: AutoConfig unexpectedly understood the released config")
    except ValueError:
        pass
    naive = MiniMaxForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    partial_rope(naive, spec["cfg"]["rotary_dim"], spec["cfg"]["rope_theta"])
    naive_logits, _ = forward(naive, prompt)
    assert float((naive_logits - expected).abs().max()) > 1e-2, "released config read as if transformers knew it"
    m = MiniMaxForCausalLM.from_pretrained(folder, config=cfg, dtype=torch.float32).eval()
    partial_rope(m, spec["cfg"]["rotary_dim"], spec["cfg"]["rope_theta"])
    got, _ = forward(m, prompt)
    diff = float((got - expected).abs().max())
    assert diff < 1e-5, f"{folder}: transformers reload (given the config) differs by {diff}"
    return diff


def variant_diffs(model, spec, prompt, expected):
    """How far the prompt logits move under the variants the docstring discusses; the
    model is restored afterwards. Returns max |logit difference| per variant."""
    c, res = spec["cfg"], {}
    lightning = [l.self_attn for l in model.model.layers if isinstance(l.self_attn, mm.MiniMaxLightningAttention)]
    saved = [(a.slope_rate.clone(), a.query_decay.clone(), a.key_decay.clone(), a.diagonal_decay.clone())
             for a in lightning]

    def set_slopes(a, slope):
        a.slope_rate, (a.query_decay, a.key_decay, a.diagonal_decay) = slope, a.decay_factors(slope)

    # The released code's layer factor 1 - l / (L - 1) + 1e-5.
    L = len(model.model.layers)
    for a in lightning:
        n = a.num_attention_heads
        base = 1 / (2 ** (8 / n)) ** (torch.arange(n, dtype=torch.float) + 1)
        set_slopes(a, (base * (1 - a.layer_idx / (L - 1) + 1e-5))[:, None, None])
    res["slope_factor_released"] = float((forward(model, prompt)[0] - expected).abs().max())
    for a, (s, q, k, d) in zip(lightning, saved):
        a.slope_rate, a.query_decay, a.key_decay, a.diagonal_decay = s, q, k, d
    # eps 1e-5 (vLLM's) instead of 1e-6 in the Lightning output norm.
    for a in lightning:
        a.norm.variance_epsilon = 1e-5
    res["lightning_norm_eps_1e-5"] = float((forward(model, prompt)[0] - expected).abs().max())
    for a in lightning:
        a.norm.variance_epsilon = 1e-6
    # Rotary over all of head_dim (what transformers alone does) for the partial models.
    if c["rotary_dim"] is not None:
        partial_rope(model, c["head_dim"], c["rope_theta"])
        res["full_rotary"] = float((forward(model, prompt)[0] - expected).abs().max())
        partial_rope(model, c["rotary_dim"], c["rope_theta"])
    assert float((forward(model, prompt)[0] - expected).abs().max()) == 0.0, "model not restored"
    return res


def independent_forward(folder, prompt):
    """(e): the prompt logits from the written folder alone (config.json + weights), by
    the formulas of the docstring in plain float64 torch: Lightning as one masked
    (q k^T * decay) v product (neither blocks nor recurrence), the released partial
    rotary, postnorm residuals, the softmax top-k router. Returns (logits, layer outputs)."""
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    w = {}
    for fname in os.listdir(folder):
        if fname.endswith(".safetensors") and fname != "golden.safetensors":
            with safe_open(os.path.join(folder, fname), "pt") as sf:
                w.update({k: sf.get_tensor(k).double() for k in sf.keys()})
    if c["model_type"] == "minimax":   # transformers' names
        kinds = [1 if t == "full_attention" else 0 for t in c["layer_types"]]
        ab = {0: (c["linear_attn_alpha_factor"], c["linear_attn_beta_factor"]),
              1: (c["full_attn_alpha_factor"], c["full_attn_beta_factor"]),
              "mlp": (c["mlp_alpha_factor"], c["mlp_beta_factor"])}
        rd, theta = c["head_dim"], c["rope_parameters"]["rope_theta"]
    else:                              # released names
        kinds = c["attn_type_list"]
        ab = {0: (c["layernorm_linear_attention_alpha"], c["layernorm_linear_attention_beta"]),
              1: (c["layernorm_full_attention_alpha"], c["layernorm_full_attention_beta"]),
              "mlp": (c["layernorm_mlp_alpha"], c["layernorm_mlp_beta"])}
        rd, theta = c["rotary_dim"], c["rope_theta"]
    eps, n, kvh, d = c["rms_norm_eps"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    L, T = len(kinds), len(prompt)
    E, I, k_top = c["num_local_experts"], c["intermediate_size"], c["num_experts_per_tok"]

    def rms(x, weight, e):
        return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + e)

    def heads(x, count):   # [T, count*d] -> [count, T, d]
        return x.reshape(T, count, d).transpose(0, 1)

    pos = torch.arange(T, dtype=torch.float64)
    ang = pos[:, None] * (1.0 / theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))[None]
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()

    def rope(x):           # [heads, T, d]: first rd channels, pairs (c, c + rd/2)
        r, rest = x[..., :rd], x[..., rd:]
        rot = torch.cat((-r[..., rd // 2:], r[..., :rd // 2]), -1)
        return torch.cat((r * cos + rot * sin, rest), -1)

    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]   # [t, j]: j <= t
    h = w["model.embed_tokens.weight"][prompt]
    layer_out = []
    for l in range(L):
        p = f"model.layers.{l}"
        x = rms(h, w[f"{p}.input_layernorm.weight"], eps)
        if kinds[l] == 0:
            qkv = torch.nn.functional.silu(x @ w[f"{p}.self_attn.qkv_proj.weight"].T)
            qkv = qkv.reshape(T, n, 3 * d).transpose(0, 1)
            q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
            factor = 1 - l / (L - 1 + 1e-5) + 1e-5
            slope = (2.0 ** (-8.0 / n)) ** torch.arange(1, n + 1, dtype=torch.float64) * factor
            dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
            decay = torch.where(causal, torch.exp(-slope[:, None, None] * dist), torch.zeros(()))
            o = ((q @ k.transpose(1, 2)) * decay) @ v
            o = rms(o.transpose(0, 1).reshape(T, n * d), w[f"{p}.self_attn.norm.weight"], 1e-6)
            o = torch.sigmoid(x @ w[f"{p}.self_attn.output_gate.weight"].T) * o
            attn = o @ w[f"{p}.self_attn.out_proj.weight"].T
        else:
            q = rope(heads(x @ w[f"{p}.self_attn.q_proj.weight"].T, n))
            k = rope(heads(x @ w[f"{p}.self_attn.k_proj.weight"].T, kvh)).repeat_interleave(n // kvh, 0)
            v = heads(x @ w[f"{p}.self_attn.v_proj.weight"].T, kvh).repeat_interleave(n // kvh, 0)
            s = (q @ k.transpose(1, 2)) / math.sqrt(d)
            o = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v
            attn = o.transpose(0, 1).reshape(T, n * d) @ w[f"{p}.self_attn.o_proj.weight"].T
        a, b = ab[kinds[l]]
        h = a * x + b * attn
        y = rms(h, w[f"{p}.post_attention_layernorm.weight"], eps)
        probs = torch.softmax(y @ w[f"{p}.block_sparse_moe.gate.weight"].T, -1)
        top_w, top_i = probs.topk(k_top, -1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        moe = torch.zeros_like(y)
        for t in range(T):
            for j in range(k_top):
                e = f"{p}.block_sparse_moe.experts.{int(top_i[t, j])}"
                act = torch.nn.functional.silu(w[f"{e}.w1.weight"] @ y[t]) * (w[f"{e}.w3.weight"] @ y[t])
                moe[t] += top_w[t, j] * (w[f"{e}.w2.weight"] @ act)
        am, bm = ab["mlp"]
        h = am * y + bm * moe
        layer_out.append(h)
    assert E == w["model.layers.0.block_sparse_moe.gate.weight"].shape[0] and I == w[
        "model.layers.0.block_sparse_moe.experts.0.w1.weight"].shape[0]
    logits = rms(h, w["model.norm.weight"], eps) @ w["lm_head.weight"].T
    return logits, layer_out


def min_margin(logits):
    top2 = logits.topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def tensor_names(folder):
    names = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors") and f != "golden.safetensors":
            with safe_open(os.path.join(folder, f), "pt") as sf:
                for k in sf.keys():
                    names[k] = (sf.get_slice(k).get_dtype(), sf.get_slice(k).get_shape())
    return names


def main():
    torch.set_num_threads(2)
    check_partial_rotary()
    for spec in MODELS:
        out = os.path.join(ROOT, spec["name"])
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        torch.manual_seed(spec["seed"])
        cfg = make_config(spec)
        model = MiniMaxForCausalLM(cfg).float().eval()
        randomize(model, spec["seed"])
        partial_rope(model, spec["cfg"]["rotary_dim"], spec["cfg"]["rope_theta"])
        if spec["naming"] == "hf":
            model.save_pretrained(out)
        else:
            write_checkpoint(out, released_tensors(model, spec["dtype"]), spec["shards"])
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(released_config_json(spec), f, indent=2)

        g = torch.Generator().manual_seed(100 + spec["seed"])
        prompt = torch.randint(3, cfg.vocab_size, (PROMPT_LEN,), generator=g)
        prompt_logits, decode_logits, greedy, record = run_reference(model, prompt)
        drift = check_forms(model, prompt, greedy, prompt_logits, decode_logits)
        if spec["naming"] == "hf":
            reload = check_reload_hf(out, prompt, prompt_logits)
        else:
            reload = check_reload_released(out, spec, cfg, prompt, prompt_logits)

        variants = variant_diffs(model, spec, prompt, prompt_logits)
        ind_logits, ind_layers = independent_forward(out, prompt)
        scale = float(torch.cat([prompt_logits, decode_logits]).abs().max())
        independent = float((ind_logits - prompt_logits.double()).abs().max())
        assert independent < 1e-5 * scale, f"independent forward differs by {independent}"
        for l, want in enumerate(ind_layers):
            got = record[f"layer_out.{l}"].double()
            assert float((got - want).abs().max()) < 1e-5 * float(want.abs().max()), f"layer {l} differs"

        golden = {"prompt_logits": prompt_logits.contiguous(), "decode_logits": decode_logits.contiguous()}
        golden.update({k: v.contiguous() for k, v in record.items()})
        save_file(golden, os.path.join(out, "golden.safetensors"))
        margin = min(min_margin(decode_logits), min_margin(prompt_logits[-1:]))
        ab = spec["ab"]
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"prompt_ids": prompt.tolist(), "greedy_ids": greedy, "vocab_size": cfg.vocab_size,
                       "logit_scale": scale, "min_greedy_margin": margin,
                       "attn_type_list": spec["schedule"], "layer_types": list(cfg.layer_types),
                       "alpha_beta": {"linear_attention": {"alpha": ab["linear"][0], "beta": ab["linear"][1]},
                                      "full_attention": {"alpha": ab["full"][0], "beta": ab["full"][1]},
                                      "mlp": {"alpha": ab["mlp"][0], "beta": ab["mlp"][1]}},
                       "rotary_dim": spec["cfg"]["rotary_dim"] or spec["cfg"]["head_dim"],
                       "block_size": BLOCK_SIZE, "lightning_norm_eps": 1e-6,
                       "rms_norm_eps": spec["cfg"]["rms_norm_eps"],
                       "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=2)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print(f"{spec['name']}: {size} bytes, logit scale {scale:.3f}, smallest greedy margin {margin:.4f} "
              f"({margin / scale:.2e} of scale), decode-vs-full {drift:.2e}, reload {reload:.2e}, "
              f"independent float64 {independent:.2e}, greedy {greedy}")
        print("  prompt logits move by " + ", ".join(f"{k} {v:.2e}" for k, v in variants.items()))
        assert variants.get("full_rotary", 1.0) > 1e-2 * scale, "the golden does not tell partial from full rotary"
        assert variants["slope_factor_released"] < 1e-5 * scale, "slope formulas differ beyond tolerance"
        if margin < 2e-3 * scale:
            print("  WARNING: a greedy step is close to a tie; pick another seed", file=sys.stderr)
        for name, (dt, shape) in tensor_names(out).items():
            if ".layers." not in name or ".layers.0." in name or ".layers.1." in name:
                print(f"    {name} {dt} {shape}")


if __name__ == "__main__":
    main()
