"""m2-tiny: transformers' MiniMaxM2ForCausalLM trunk plus K multi-token-prediction (MTP) modules.

Checkpoint names (released MiniMax-M2 layout, one model.safetensors, BF16 except the F32 routing bias):
  model.embed_tokens.weight [V, d]        model.norm.weight [d]        lm_head.weight [V, d]
  model.layers.N.input_layernorm.weight, model.layers.N.post_attention_layernorm.weight   [d]
  model.layers.N.self_attn.{q_proj,k_proj,v_proj,o_proj}.weight, .{q_norm,k_norm}.weight
  model.layers.N.block_sparse_moe.gate.weight [E, d]
  model.layers.N.block_sparse_moe.e_score_correction_bias [E]  (F32)
  model.layers.N.block_sparse_moe.experts.E.{w1,w2,w3}.weight   (w1 = gate, w3 = up, w2 = down)
MTP module k (k = 0..K-1) lives at layer index L + k (L = num_hidden_layers), the slots the released
checkpoints reserve:
  model.layers.{L+k}.hnorm.weight [d]             RMSNorm of the previous hidden h^k (h^0 = trunk output
                                                  before model.norm)
  model.layers.{L+k}.enorm.weight [d]             RMSNorm of the embedding of token t_{i+k+1}
  model.layers.{L+k}.eh_proj.weight [d, 2d]       applied to concat[hnorm(h) ; enorm(emb)] (hidden first)
  model.layers.{L+k}.{input_layernorm, self_attn.*, post_attention_layernorm, block_sparse_moe.*}
                                                  one full decoder layer, causal, RoPE positions = i
  model.layers.{L+k}.shared_head.norm.weight [d]  the module's final RMSNorm, then the shared lm_head
Module k at position i predicts token t_{i+k+2} (the trunk at i predicts t_{i+1}).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM
from transformers.models.minimax_m2.modeling_minimax_m2 import MiniMaxM2DecoderLayer, MiniMaxM2RMSNorm

ARCH = dict(
    hidden_size=192,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=12,
    num_key_value_heads=2,
    head_dim=32,
    rotary_dim=16,
    rope_theta=10000.0,
    num_local_experts=16,
    num_experts_per_tok=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    num_mtp_modules=3,
)


def make_config(vocab_size, bos_id, eos_id, pad_id, **over):
    a = dict(ARCH, **over)
    return MiniMaxM2Config(
        vocab_size=vocab_size, hidden_size=a["hidden_size"], intermediate_size=a["intermediate_size"],
        num_hidden_layers=a["num_hidden_layers"], num_attention_heads=a["num_attention_heads"],
        num_key_value_heads=a["num_key_value_heads"], head_dim=a["head_dim"], rotary_dim=a["rotary_dim"],
        rope_theta=a["rope_theta"], max_position_embeddings=a["max_position_embeddings"],
        num_local_experts=a["num_local_experts"], num_experts_per_tok=a["num_experts_per_tok"],
        rms_norm_eps=a["rms_norm_eps"], hidden_act="silu", tie_word_embeddings=False,
        scoring_func="sigmoid", use_routing_bias=True, use_qk_norm=True, qk_norm_type="per_layer",
        shared_intermediate_size=0, sliding_window=None,
        use_mtp=True, num_mtp_modules=a["num_mtp_modules"], mtp_transformer_layers=1,
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id, initializer_range=0.02,
    )


class MTPModule(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        d = cfg.hidden_size
        self.hnorm = MiniMaxM2RMSNorm(d, cfg.rms_norm_eps)
        self.enorm = MiniMaxM2RMSNorm(d, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.layer = MiniMaxM2DecoderLayer(cfg, layer_idx)
        self.final_norm = MiniMaxM2RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, h_prev, emb_next, pos, pe):
        z = self.eh_proj(torch.cat([self.hnorm(h_prev), self.enorm(emb_next)], dim=-1))
        return self.layer(z, attention_mask=None, position_ids=pos, position_embeddings=pe)


def _init_layer(layer, std):
    for name, p in layer.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, mean=0.0, std=std)
    layer.mlp.e_score_correction_bias.zero_()


class M2Tiny(nn.Module):
    def __init__(self, cfg, seed=0, tie_train=False):
        """tie_train: share one matrix between embed_tokens and lm_head while training. A shared
        matrix makes copying a token from the context one generic circuit (attention output ~ the
        token's own embedding); with separate matrices every token's copy mapping has to be learnt
        on its own, which our budget does not allow. The export writes it twice (lm_head.weight and
        model.embed_tokens.weight, equal values), so the shipped model has the released, untied layout."""
        super().__init__()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.lm = MiniMaxM2ForCausalLM(cfg)
        if tie_train:
            self.lm.lm_head.weight = self.lm.model.embed_tokens.weight
        L = cfg.num_hidden_layers
        self.mtp = nn.ModuleList([MTPModule(cfg, L + k) for k in range(cfg.num_mtp_modules)])
        with torch.no_grad():
            for m in self.mtp:
                nn.init.ones_(m.hnorm.weight)
                nn.init.ones_(m.enorm.weight)
                nn.init.ones_(m.final_norm.weight)
                nn.init.normal_(m.eh_proj.weight, std=cfg.initializer_range)
                _init_layer(m.layer, cfg.initializer_range)

    def moe_blocks(self):
        return [l.mlp for l in self.lm.model.layers] + [m.layer.mlp for m in self.mtp]

    def trunk(self, ids):
        """Returns (embeddings, h0 = last hidden before model.norm, positions, (cos, sin))."""
        m = self.lm.model
        emb = m.embed_tokens(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        pe = m.rotary_emb(emb, pos)
        x = emb
        for layer in m.layers:
            x = layer(x, attention_mask=None, position_ids=pos, position_embeddings=pe)
        return emb, x, pos, pe

    def logits(self, h, norm):
        return self.lm.lm_head(norm(h))

    def forward_all(self, ids):
        """Trunk logits [B,T,V] and, per MTP module k, logits [B,T-k-1,V] (position i predicts t_{i+k+2})."""
        emb, h, pos, (cos, sin) = self.trunk(ids)
        out = [self.logits(h, self.lm.model.norm)]
        T = ids.shape[1]
        for k, mod in enumerate(self.mtp):
            n = T - k - 1
            h = mod(h[:, :n], emb[:, k + 1:k + 1 + n], pos[:, :n], (cos[:, :n], sin[:, :n]))
            out.append(self.logits(h, mod.final_norm))
        return out

    def losses(self, ids, mask):
        """Mean CE of the trunk and of each MTP module over target tokens where mask is 1.

        Returns (main_loss, [mtp_loss_k], stats) with stats holding token counts and correct-top1 counts."""
        emb, h, pos, (cos, sin) = self.trunk(ids)
        T = ids.shape[1]
        fmask = mask.float()

        def ce(h_part, norm, targets, tmask):
            # logits only where the target counts (chat windows mask everything but assistant text)
            # tmask holds per-token loss weights (0 = not a target)
            w_all = tmask.reshape(-1)
            sel = (w_all > 0).nonzero().squeeze(1)
            hs = h_part.reshape(-1, h_part.shape[-1]).index_select(0, sel)
            tg = targets.reshape(-1).index_select(0, sel)
            w = w_all.index_select(0, sel).float()
            lg = self.logits(hs, norm)
            l = F.cross_entropy(lg.float(), tg, reduction="none")
            n = torch.tensor(float(max(sel.numel(), 1)))
            with torch.no_grad():
                hit = (lg.argmax(-1) == tg).float().sum()
            return (l * w).sum() / w.sum().clamp_min(1e-6), n, hit, l.detach().sum()

        main, n0, hit0, s0 = ce(h[:, :-1], self.lm.model.norm, ids[:, 1:], fmask[:, 1:])
        stats = [(n0, hit0, s0)]
        mtp = []
        for k, mod in enumerate(self.mtp):
            n = T - k - 1
            h = mod(h[:, :n], emb[:, k + 1:k + 1 + n], pos[:, :n], (cos[:, :n], sin[:, :n]))
            lk, nk, hk, sk = ce(h[:, :n - 1], mod.final_norm, ids[:, k + 2:], fmask[:, k + 2:])
            mtp.append(lk)
            stats.append((nk, hk, sk))
        return main, mtp, stats


# ------------------------------------------------------------------------------------------
# Released-layout state dict
# ------------------------------------------------------------------------------------------

def _layer_tensors(prefix, layer, E):
    out = {
        prefix + "input_layernorm.weight": layer.input_layernorm.weight,
        prefix + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
    }
    for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
        out[prefix + "self_attn.%s.weight" % n] = getattr(layer.self_attn, n).weight
    moe = layer.mlp
    out[prefix + "block_sparse_moe.gate.weight"] = moe.gate.weight
    out[prefix + "block_sparse_moe.e_score_correction_bias"] = moe.e_score_correction_bias
    inter = moe.experts.down_proj.shape[-1]
    for e in range(E):
        gu = moe.experts.gate_up_proj[e]  # [2*I, d]: gate rows first, then up rows
        out[prefix + "block_sparse_moe.experts.%d.w1.weight" % e] = gu[:inter]
        out[prefix + "block_sparse_moe.experts.%d.w3.weight" % e] = gu[inter:]
        out[prefix + "block_sparse_moe.experts.%d.w2.weight" % e] = moe.experts.down_proj[e]
    return out


def released_state_dict(model):
    """name -> tensor (BF16; routing biases F32), contiguous copies on CPU."""
    cfg = model.cfg
    E = cfg.num_local_experts
    m = model.lm.model
    sd = {"model.embed_tokens.weight": m.embed_tokens.weight, "model.norm.weight": m.norm.weight,
          "lm_head.weight": model.lm.lm_head.weight}
    for i, layer in enumerate(m.layers):
        sd.update(_layer_tensors("model.layers.%d." % i, layer, E))
    L = cfg.num_hidden_layers
    for k, mod in enumerate(model.mtp):
        p = "model.layers.%d." % (L + k)
        sd[p + "hnorm.weight"] = mod.hnorm.weight
        sd[p + "enorm.weight"] = mod.enorm.weight
        sd[p + "eh_proj.weight"] = mod.eh_proj.weight
        sd[p + "shared_head.norm.weight"] = mod.final_norm.weight
        sd.update(_layer_tensors(p, mod.layer, E))
    out = {}
    for k, v in sd.items():
        dt = torch.float32 if k.endswith("e_score_correction_bias") else torch.bfloat16
        out[k] = v.detach().to("cpu", dt).contiguous().clone()
    return out


def load_released_state_dict(model, sd):
    """Inverse of released_state_dict (values are copied into the model's own dtype)."""
    cfg = model.cfg
    E = cfg.num_local_experts
    L = cfg.num_hidden_layers

    def put(dst, name):
        with torch.no_grad():
            dst.copy_(sd[name].to(dst.dtype))

    def put_layer(prefix, layer):
        put(layer.input_layernorm.weight, prefix + "input_layernorm.weight")
        put(layer.post_attention_layernorm.weight, prefix + "post_attention_layernorm.weight")
        for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            put(getattr(layer.self_attn, n).weight, prefix + "self_attn.%s.weight" % n)
        moe = layer.mlp
        put(moe.gate.weight, prefix + "block_sparse_moe.gate.weight")
        put(moe.e_score_correction_bias, prefix + "block_sparse_moe.e_score_correction_bias")
        inter = moe.experts.down_proj.shape[-1]
        with torch.no_grad():
            for e in range(E):
                moe.experts.gate_up_proj[e, :inter].copy_(sd[prefix + "block_sparse_moe.experts.%d.w1.weight" % e])
                moe.experts.gate_up_proj[e, inter:].copy_(sd[prefix + "block_sparse_moe.experts.%d.w3.weight" % e])
                moe.experts.down_proj[e].copy_(sd[prefix + "block_sparse_moe.experts.%d.w2.weight" % e])

    m = model.lm.model
    put(m.embed_tokens.weight, "model.embed_tokens.weight")
    put(m.norm.weight, "model.norm.weight")
    put(model.lm.lm_head.weight, "lm_head.weight")
    for i, layer in enumerate(m.layers):
        put_layer("model.layers.%d." % i, layer)
    for k, mod in enumerate(model.mtp):
        p = "model.layers.%d." % (L + k)
        put(mod.hnorm.weight, p + "hnorm.weight")
        put(mod.enorm.weight, p + "enorm.weight")
        put(mod.eh_proj.weight, p + "eh_proj.weight")
        put(mod.final_norm.weight, p + "shared_head.norm.weight")
        put_layer(p, mod.layer)
