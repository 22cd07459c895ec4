// The tensors of a MiniMax checkpoint (M2, or a Lightning hybrid: see LightningWeights), bound to the model's structure. Matrices are
// views into the mapped files (no copy); small vectors (norms, router bias) are
// widened to fp32 copies at load. Every tensor is checked for dtype and shape.
//
// Accepted layouts (MODEL_SPEC.md section 1):
//  - the released one: model.layers.N.block_sparse_moe.{gate.weight, e_score_correction_bias,
//    experts.E.{w1,w2,w3}.weight[, .weight_scale_inv]}
//  - transformers' own: model.layers.N.mlp.{gate.weight, e_score_correction_bias,
//    experts.gate_up_proj [E, 2I, H] (gate rows first), experts.down_proj [E, H, I]}
// Linear weights may be F32, BF16, F16, or F8_E4M3 with a weight_scale_inv F32 tensor
// of shape [ceil(out/128), ceil(in/128)] (block size from quantization_config).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/tensor_store.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "model/config.h"

namespace m2 {

struct AttentionWeights {
  LinearWeight q, k, v, o;                // q [H*D, hidden], k/v [KV*D, hidden], o [hidden, H*D]
  std::vector<float> q_norm, k_norm;      // [H*D], [KV*D]; empty when use_qk_norm is false
  // How the layer forms its attention products; set by the model on load
  // (LoadOptions::attention).
  AttentionMath math = AttentionMath::kExact;
};

// A Lightning layer of the hybrids (MODEL_SPEC.md section 2; transformers'
// MiniMaxLightningAttention): model.layers.N.self_attn.{qkv_proj, output_gate, norm, out_proj}.
struct LightningWeights {
  LinearWeight qkv;         // [H*3*D, hidden]: per head h rows [q_h | k_h | v_h]
  LinearWeight gate;        // output_gate [H*D, hidden]
  LinearWeight out;         // out_proj [hidden, H*D]
  std::vector<float> norm;  // [H*D]
};

struct ExpertWeights {
  LinearWeight w1, w3, w2;  // gate [I, hidden], up [I, hidden], down [hidden, I]
};

struct MoeWeights {
  LinearWeight gate;                   // router [E, hidden], never quantized
  std::vector<float> bias;             // e_score_correction_bias [E]; empty when unused
  std::vector<ExpertWeights> experts;  // [E]
};

struct LayerWeights {
  LayerType type = LayerType::kSoftmax;
  std::vector<float> input_norm, post_attention_norm;  // [hidden]
  AttentionWeights attn;      // kSoftmax
  LightningWeights lightning; // kLightning
  MoeWeights moe;
};

// One multi-token-prediction module (MODEL_SPEC.md "MTP"; our layout is defined by
// tools/train/model.py, MTPModule and released_state_dict). Module k (0-based) lives at
// layer index L + k, L = num_hidden_layers:
//   model.layers.{L+k}.hnorm.weight [hidden]              RMSNorm of the previous hidden h^k
//   model.layers.{L+k}.enorm.weight [hidden]              RMSNorm of the next token's embedding
//   model.layers.{L+k}.eh_proj.weight [hidden, 2*hidden]  on concat[hnorm(h) ; enorm(e)]
//   model.layers.{L+k}.{input_layernorm, self_attn.*, post_attention_layernorm,
//                       block_sparse_moe.* or mlp.*}     one decoder layer, as in the trunk
//   model.layers.{L+k}.shared_head.norm.weight [hidden]   final RMSNorm before the shared lm_head
struct MtpWeights {
  std::vector<float> hnorm, enorm;  // [hidden]
  LinearWeight eh_proj;             // [hidden, 2*hidden]; columns [0, hidden) take the hidden state
  LayerWeights layer;
  std::vector<float> final_norm;  // [hidden] (shared_head.norm)
};

struct ModelWeights {
  LinearWeight embed;    // [vocab, hidden]
  LinearWeight lm_head;  // [vocab, hidden] (the embedding when tied)
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::string moe_layout;  // "block_sparse_moe" or "mlp (fused experts)"
  // The MTP modules, empty when the model has none (see LoadModelWeights), and one line
  // saying which: "3 modules at model.layers.62..64", or why there are none.
  std::vector<MtpWeights> mtp;
  std::string mtp_status;
};

// MTP modules are bound when the config says use_mtp with num_mtp_modules > 0 AND the
// checkpoint has an MTP tensor (hnorm, enorm, eh_proj or shared_head.norm) of some module:
// then every module's tensors must be there with the right dtype and shape, or it is an
// error naming the tensor. A config that says use_mtp over a checkpoint without MTP
// tensors (the released MiniMax-M2 files) loads with no modules and says so in mtp_status.
// `on_layer(i, n)` is called after each layer is bound (for progress displays).
Result<ModelWeights> LoadModelWeights(const ModelConfig& cfg, const TensorStore& store,
                                      const std::function<void(int64_t, int64_t)>& on_layer = {});

// Calls fn on every matrix of the model (trunk, lm_head, embedding, MTP modules).
void ForEachLinear(ModelWeights& w, const std::function<void(LinearWeight&)>& fn);

}  // namespace m2
