// Attention of one query token (or a run of consecutive ones) over one KV head's cached
// positions, for the group of query heads that share that KV head (GQA): each K and V row
// is loaded once and used by every head of the group (and every query of the run).
#pragma once

#include <cstdint>

namespace m2 {

// How cached keys and values are stored. bf16 halves the cache (and the bytes attention
// reads per token); the kernels widen it to fp32 exactly and compute in fp32.
enum class KvDtype : uint8_t { kF32, kBf16 };
inline int64_t KvDtypeBytes(KvDtype t) { return t == KvDtype::kF32 ? 4 : 2; }
const char* KvDtypeName(KvDtype t);

// Where the cached keys and values of one sequence, layer and KV head lie. The layer's
// K and V live in arenas indexed by block id: position j is in block blocks[j /
// block_tokens], row j % block_tokens; that block's rows of this head start
// block_stride * id + head_offset elements (of `dtype`) from k_base (keys) or v_base
// (values), and a row is `row_stride` elements apart from the next (head_dim for the
// engine's head-major blocks).
struct KvHeadView {
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  const int32_t* blocks = nullptr;  // the sequence's block ids, in position order
  int64_t block_stride = 0;
  int64_t head_offset = 0;
  int64_t block_tokens = 0;
  int64_t row_stride = 0;
  int64_t length = 0;  // positions 0..length-1 are attended (causal: up to the query)
  KvDtype dtype = KvDtype::kF32;
};

// How attention forms its products. kExact: fp32 products of the fp32 query with K and of
// the fp32 softmax weights with V (a bf16 cache widened exactly), fp32 sums. kBf16 (CPUs
// with AVX-512 BF16 and a bf16 cache; AttentionBf16Available): the query and the softmax
// weights rounded to bf16 (a relative 2^-9 at most), K and V as stored, the products summed
// in fp32 by vdpbf16ps: half the instructions per cached position, so a long context costs
// less (README, "bf16 attention"). Elsewhere (another CPU, an fp32 cache, head_dim not a
// multiple of 32) kBf16 computes as kExact.
enum class AttentionMath : uint8_t { kExact, kBf16 };
bool AttentionBf16Available();

// dst[0..n) = src[0..n) in `dtype` (bf16: round to nearest even, NaN stays NaN).
void StoreKv(const float* src, int64_t n, KvDtype dtype, void* dst);
// dst[0..n) = src[0..n) widened to fp32 (exact).
void LoadKv(const void* src, int64_t n, KvDtype dtype, float* dst);

// out[h, 0..D) = softmax_j(q[h] . K_j * scale) V_j, for h < group.
// q: [group, D]; scratch: room for group * length floats.
void AttendGroup(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale, float* scratch,
                 float* out);

// nq query tokens of one sequence at consecutive positions, for one KV head: query j
// (q + j * q_stride: [group, D]) attends positions 0 .. kv.length + j - 1 and writes out +
// j * out_stride. Each query gets the bits AttendGroup gives it alone, while each K and V
// row is read once for all the queries that attend it (a prefill's tokens share their
// cache rows instead of each reading them from memory). scratch: room for nq * group *
// (kv.length + nq - 1) floats.
void AttendQueries(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim, const KvHeadView& kv,
                   float scale, float* scratch, float* out, int64_t out_stride,
                   AttentionMath math = AttentionMath::kExact);

// Implementations (attention_avx512.cpp, attention_avx512bf16.cpp, attention_avx2.cpp,
// attention.cpp).
void AttendGroupPortable(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                         float* scratch, float* out);
void AttendGroupAvx512(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                       float* scratch, float* out);
void AttendGroupAvx2(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                     float* scratch, float* out);
void AttendQueriesPortable(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                           const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride);
void AttendQueriesAvx512(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                         const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride);
void AttendQueriesAvx512Bf16(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                             const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride);
void AttendQueriesAvx2(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                       const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride);

}  // namespace m2
