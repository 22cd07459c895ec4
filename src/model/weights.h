// The tensors of a MiniMax-M2 checkpoint, bound to the model's structure. Matrices are
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
#include "kernels/linear.h"
#include "model/config.h"

namespace m2 {

struct AttentionWeights {
  LinearWeight q, k, v, o;                // q [H*D, hidden], k/v [KV*D, hidden], o [hidden, H*D]
  std::vector<float> q_norm, k_norm;      // [H*D], [KV*D]; empty when use_qk_norm is false
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
  std::vector<float> input_norm, post_attention_norm;  // [hidden]
  AttentionWeights attn;
  MoeWeights moe;
};

struct ModelWeights {
  LinearWeight embed;    // [vocab, hidden]
  LinearWeight lm_head;  // [vocab, hidden] (the embedding when tied)
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::string moe_layout;  // "block_sparse_moe" or "mlp (fused experts)"
};

// `on_layer(i, n)` is called after each layer is bound (for progress displays).
Result<ModelWeights> LoadModelWeights(const ModelConfig& cfg, const TensorStore& store,
                                      const std::function<void(int64_t, int64_t)>& on_layer = {});

}  // namespace m2
