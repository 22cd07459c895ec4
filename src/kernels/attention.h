// Attention of one query token over one KV head's cached positions, for the group of
// query heads that share that KV head (GQA): each K and V row is loaded once and used
// by every head of the group.
#pragma once

#include <cstdint>

namespace m2 {

// Where the cached keys and values of one sequence, layer and KV head lie. Positions
// are stored in blocks of `block_tokens`; position j is row j % block_tokens of block
// j / block_tokens, and a row is `row_stride` floats apart from the next (head_dim
// for the engine's head-major blocks).
struct KvHeadView {
  const float* const* k_blocks = nullptr;  // per block: the start of its K data (all heads)
  const float* const* v_blocks = nullptr;
  int64_t head_offset = 0;  // this head's first row, in floats from a block's start
  int64_t block_tokens = 0;
  int64_t row_stride = 0;
  int64_t length = 0;  // positions 0..length-1 are attended (causal: up to the query)
};

// out[h, 0..D) = softmax_j(q[h] . K_j * scale) V_j, for h < group.
// q: [group, D]; scratch: room for group * length floats.
void AttendGroup(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale, float* scratch,
                 float* out);

// Implementations (attention_avx512.cpp, attention_avx2.cpp, attention.cpp).
void AttendGroupPortable(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                         float* scratch, float* out);
void AttendGroupAvx512(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                       float* scratch, float* out);
void AttendGroupAvx2(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                     float* scratch, float* out);

}  // namespace m2
