// Attention of one query token (or a run of consecutive ones) over one KV head's cached
// positions, for the group of query heads that share that KV head (GQA): each K and V row
// is loaded once and used by every head of the group (and every query of the run).
#pragma once

#include <cstdint>

namespace m2 {

// How cached keys and values are stored. bf16 halves the cache (and the bytes attention
// reads per token); the kernels widen it to fp32 exactly and compute in fp32. q8 (llama.cpp's
// `-ctk q8_0 -ctv q8_0`, with fp32 scales): each row of head_dim values (a multiple of 32) is
// head_dim int8 values followed by head_dim / 32 fp32 scales, value i = int8[i] * scale[i / 32],
// the scale of a group of 32 its largest |value| / 127: 144 bytes for a row of 128 against
// bf16's 256, the kernels widening each value to fp32 (one multiply more than bf16) and
// computing in fp32. Not exact: each value within half a step (largest |value| of its group
// / 254) of the one stored; README, "q8 KV cache".
enum class KvDtype : uint8_t { kF32, kBf16, kQ8 };
// Bytes of one element: rows are KvRowElems elements of this size (q8: bytes).
inline int64_t KvDtypeBytes(KvDtype t) { return t == KvDtype::kF32 ? 4 : t == KvDtype::kBf16 ? 2 : 1; }
// Elements of one cached row of head_dim values (q8: the values and their scales' bytes).
inline int64_t KvRowElems(KvDtype t, int64_t head_dim) { return t == KvDtype::kQ8 ? head_dim + head_dim / 8 : head_dim; }
inline int64_t KvRowBytes(KvDtype t, int64_t head_dim) { return KvRowElems(t, head_dim) * KvDtypeBytes(t); }
// Values per scale of a q8 row; head_dim must be a multiple of it.
constexpr int64_t kKvQ8Group = 32;
const char* KvDtypeName(KvDtype t);

// Where the cached keys and values of one sequence, layer and KV head lie. The layer's
// K and V live in arenas indexed by block id: position j is in block blocks[j /
// block_tokens], row j % block_tokens; that block's rows of this head start
// block_stride * id + head_offset elements (of `dtype`) from k_base (keys) or v_base
// (values), and a row is `row_stride` elements apart from the next (KvRowElems(dtype,
// head_dim) for the engine's head-major blocks).
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

// dst = src[0..n) in `dtype` (bf16: round to nearest even, NaN stays NaN; q8: one row of n
// values, n a multiple of kKvQ8Group, as described at KvDtype; a group holding a NaN or an
// infinity gets a NaN scale, so its values read back as NaN).
void StoreKv(const float* src, int64_t n, KvDtype dtype, void* dst);
// dst[0..n) = src's n values widened to fp32 (exact for f32 and bf16; q8: int8 x scale).
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
