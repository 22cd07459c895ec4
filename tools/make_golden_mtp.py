#!/usr/bin/env python3
"""Golden data for the engine's multi-token-prediction (MTP) modules.

    python3 tools/make_golden_mtp.py        # rewrites testdata/golden/tiny-mtp/

Builds a tiny RANDOM-weight model exactly as our training code defines it:
tools/train/model.py's M2Tiny = transformers' MiniMaxM2ForCausalLM (the trunk) plus K
MTPModule's (hnorm, enorm, eh_proj, one MiniMaxM2DecoderLayer, final_norm; the lm_head
is shared). The module is imported, not copied, so this golden file follows that code
if it changes. Importing it has no side effects (it defines classes and functions).

The reference is M2Tiny.forward_all (tools/train/model.py), in fp32:
  trunk logits [T, V]          row i predicts t_{i+1}
  module k logits [T-k-1, V]   row i predicts t_{i+k+2}; module k at position i reads
                               h^k_i (h^0 = the trunk's last decoder-layer output, before
                               model.norm; h^{k+1}_i = module k's decoder-layer output at
                               i, before its final norm) and the embedding of t_{i+k+1};
                               its attention is causal over positions 0..i of its own
                               inputs, RoPE position i.

Writes testdata/golden/tiny-mtp/:
  config.json         use_mtp true, num_mtp_modules K, mtp_transformer_layers 1
  model.safetensors   fp32, the released layout (tools/train/model.py's docstring):
                      trunk as usual, module k at model.layers.{L+k}.{hnorm, enorm,
                      eh_proj, shared_head.norm, input_layernorm, self_attn.*,
                      post_attention_layernorm, block_sparse_moe.*}
  golden.safetensors  trunk_logits [T, V], mtp{k}_logits [T-k-1, V] (F32), seq_ids [T] (I32)
                      (the same names as tools/train/make_golden.py uses for models/m2-tiny)
  golden.json         ids, sizes, logit scale, smallest top-2 margins, versions

Checks made here before anything is written:
  - the tensor names equal tools/train/model.py's released_state_dict (same layout);
  - loading the written file back with tools/train/model.py's load_released_state_dict
    into a fresh M2Tiny reproduces every logit exactly (the layout round-trips);
  - transformers' from_pretrained on the folder reproduces the trunk logits (the extra
    MTP tensors are ignored by it);
  - every module is causal: changing the last token changes no earlier row.
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "train"))
import model as M  # noqa: E402  (tools/train/model.py)

OUT = os.path.join(REPO, "testdata", "golden", "tiny-mtp")
SEED = 11
SEQ_LEN = 16
# GQA 2:1, RoPE on 8 of 16 channels (given as rotary_dim), 4 experts top-2, 2 trunk
# layers and 3 MTP modules: about 0.8 MB of fp32 weights.
ARCH = dict(hidden_size=64, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rotary_dim=8, rope_theta=10000.0, num_local_experts=4,
            num_experts_per_tok=2, max_position_embeddings=4096, rms_norm_eps=1e-6, num_mtp_modules=3)
VOCAB = 192
BOS, EOS, PAD = 1, 2, 0


def randomize(model, seed):
    """As tools/make_golden.py: weights large enough that logits spread out, norms away
    from 1 and a non-zero routing bias, so every term of every module is exercised
    (M2Tiny's own init sets norms to 1 and the bias to 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / math.sqrt(p.shape[-1])))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def fp32_released(model):
    """tools/train/model.py's released_state_dict casts to BF16; the golden model keeps
    fp32 so the engine and the reference compute from identical values. Same names."""
    bf16 = M.released_state_dict(model)
    sd = {}
    cfg = model.cfg
    L, E = cfg.num_hidden_layers, cfg.num_local_experts
    m = model.lm.model
    sd.update({"model.embed_tokens.weight": m.embed_tokens.weight, "model.norm.weight": m.norm.weight,
               "lm_head.weight": model.lm.lm_head.weight})
    for i, layer in enumerate(m.layers):
        sd.update(M._layer_tensors("model.layers.%d." % i, layer, E))
    for k, mod in enumerate(model.mtp):
        p = "model.layers.%d." % (L + k)
        sd[p + "hnorm.weight"] = mod.hnorm.weight
        sd[p + "enorm.weight"] = mod.enorm.weight
        sd[p + "eh_proj.weight"] = mod.eh_proj.weight
        sd[p + "shared_head.norm.weight"] = mod.final_norm.weight
        sd.update(M._layer_tensors(p, mod.layer, E))
    sd = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in sd.items()}
    assert sorted(sd) == sorted(bf16), "layout differs from tools/train/model.py released_state_dict"
    assert all(sd[k].shape == bf16[k].shape for k in sd)
    return sd


def config_json(cfg):
    a = ARCH
    return {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
        "vocab_size": VOCAB, "hidden_size": a["hidden_size"], "intermediate_size": a["intermediate_size"],
        "num_hidden_layers": a["num_hidden_layers"], "num_attention_heads": a["num_attention_heads"],
        "num_key_value_heads": a["num_key_value_heads"], "head_dim": a["head_dim"], "rotary_dim": a["rotary_dim"],
        "rope_theta": a["rope_theta"], "num_local_experts": a["num_local_experts"],
        "num_experts_per_tok": a["num_experts_per_tok"], "scoring_func": "sigmoid", "use_routing_bias": True,
        "use_qk_norm": True, "qk_norm_type": "per_layer", "shared_intermediate_size": 0,
        "rms_norm_eps": a["rms_norm_eps"], "hidden_act": "silu",
        "max_position_embeddings": a["max_position_embeddings"], "tie_word_embeddings": False,
        "sliding_window": None, "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
        "use_mtp": True, "num_mtp_modules": a["num_mtp_modules"], "mtp_transformer_layers": 1,
        "torch_dtype": "float32",
    }


def margin(logits):
    top2 = logits.topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def main():
    torch.set_num_threads(2)
    cfg = M.make_config(VOCAB, BOS, EOS, PAD, **ARCH)
    model = M.M2Tiny(cfg, seed=SEED).float().eval()
    randomize(model, SEED)
    assert cfg._attn_implementation == "sdpa", cfg._attn_implementation  # causal with attention_mask=None
    K = cfg.num_mtp_modules

    g = torch.Generator().manual_seed(100 + SEED)
    ids = torch.randint(3, VOCAB, (1, SEQ_LEN), generator=g)
    with torch.no_grad():
        outs = [o[0].float() for o in model.forward_all(ids)]
        trunk_hf = model.lm(input_ids=ids).logits[0].float()
        # Causality: a different last token leaves every earlier row unchanged.
        ids2 = ids.clone()
        ids2[0, -1] = (ids2[0, -1] + 1) % VOCAB
        outs2 = [o[0].float() for o in model.forward_all(ids2)]
    assert torch.equal(outs[0], trunk_hf), "forward_all's trunk differs from MiniMaxM2ForCausalLM"
    for k, (a, b) in enumerate(zip(outs, outs2)):
        # Only the last row reads the last token (module k: t_{i+k+1}). Not bit-exact: the
        # MoE matmul shapes depend on how many tokens chose each expert.
        rows = a.shape[0] - 1
        assert torch.allclose(a[:rows], b[:rows], atol=1e-4), "output %d is not causal" % k
    assert [o.shape[0] for o in outs] == [SEQ_LEN] + [SEQ_LEN - k - 1 for k in range(K)]

    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    sd = fp32_released(model)
    save_file(sd, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config_json(cfg), f, indent=2)
        f.write("\n")

    # The written folder, read back two ways.
    again = M.M2Tiny(M.make_config(VOCAB, BOS, EOS, PAD, **ARCH), seed=0).float().eval()
    M.load_released_state_dict(again, load_file(os.path.join(OUT, "model.safetensors")))
    from transformers import MiniMaxM2ForCausalLM
    hf = MiniMaxM2ForCausalLM.from_pretrained(OUT, dtype=torch.float32).eval()
    with torch.no_grad():
        for a, b in zip(outs, again.forward_all(ids)):
            assert torch.equal(a, b[0].float()), "released layout does not round-trip"
        assert torch.equal(hf(input_ids=ids).logits[0].float(), outs[0]), "from_pretrained trunk differs"

    tensors = {"trunk_logits": outs[0].contiguous(), "seq_ids": ids[0].to(torch.int32).contiguous()}
    for k in range(K):
        tensors["mtp%d_logits" % k] = outs[k + 1].contiguous()
    save_file(tensors, os.path.join(OUT, "golden.safetensors"), metadata={"format": "pt"})
    scale = max(float(o.abs().max()) for o in outs)
    import transformers
    meta = {
        "seq_ids": ids[0].tolist(), "vocab_size": VOCAB, "num_mtp_modules": K,
        "logit_scale": scale,
        "min_top2_margin": {"trunk": margin(outs[0]), **{"mtp%d" % k: margin(outs[k + 1]) for k in range(K)}},
        "argmax": {"trunk": outs[0].argmax(-1).tolist(),
                   **{"mtp%d" % k: outs[k + 1].argmax(-1).tolist() for k in range(K)}},
        "conventions": {
            "trunk_logits": "row i predicts seq[i+1]",
            "mtpK_logits": "row i predicts seq[i+K+2]; module K reads h^K_i (h^0 = trunk last hidden before "
                           "model.norm) and the embedding of seq[i+K+1]; RoPE position i; tensors at "
                           "model.layers.{%d+K}.*" % ARCH["num_hidden_layers"],
        },
        "reference": "tools/train/model.py M2Tiny.forward_all, fp32 on CPU, one pass without a cache",
        "seed": SEED, "transformers": transformers.__version__, "torch": torch.__version__,
    }
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("tiny-mtp: %d tensors, logit scale %.3f, margins %s, folder %.2f MB" %
          (len(sd), scale, meta["min_top2_margin"], size / 1e6))


if __name__ == "__main__":
    main()
