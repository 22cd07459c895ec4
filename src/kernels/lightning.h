// Lightning attention (MiniMax-Text-01 / MiniMax-M1): linear attention with a per-head
// exponential decay, for one head of one sequence. With slope s > 0 (decay r = e^-s per
// token), a D x D fp32 state S (S[d][e]: d indexes the key, e the value) and tokens
// t = 0..n-1 with rows q_t, k_t, v_t of D floats:
//
//   S = r S + k_t^T v_t        (S[d][e] += k_t[d] v_t[e] after the decay)
//   o_t = q_t S                (o_t[e] = sum_d q_t[d] S[d][e])
//
// i.e. o_t = e^(-s(t+1)) q_t S0 + sum_{j<=t} e^(-s(t-j)) (q_t . k_j) v_j from an initial
// state S0. No 1/sqrt(D) scale, no softmax.
//
// LightningRecurrent applies that per token (decode); LightningBlocked takes the tokens
// in blocks of `block` (the last may be shorter) as transformers' prefill does:
//   o_blk = (q_blk e^(-s(j+1))) S + ((q_blk k_blk^T) o Dm) v_blk,  Dm[i][j] = e^(-s(i-j)), i >= j
//   S     = e^(-s m) S + (k_blk e^(-s(m-1-j)))^T v_blk
// which is the same function (up to rounding) at more FLOPs per token but in small GEMMs.
//
// STATE LAYOUT (both functions, so they can be mixed on one sequence): D*D floats,
// row-major S[d][e] at state[d * D + e], row d belonging to key dimension d. All zeros is
// the state before any token. Both update it in place.
//
// Rows: q, k, v row i at q + i*stride (etc.), D floats each (stride in floats; rows may be
// interleaved with other data, e.g. [q|k|v] of several heads per token); out row i at
// out + i*out_stride, D floats, overwritten. out must not overlap q, k, v or state.
//
// Neither function allocates or touches globals: different heads may run on different
// threads at once, each with its own state, output rows and scratch. Non-finite inputs
// are not checked (the model does). Decay factors below 1e-30 are taken as 0 (keeps
// denormals out of the FMAs; those terms are far below fp32 resolution of the output).
// SIMD paths (AVX-512 / AVX2, lightning_simd.inc) need D to be a multiple of the vector
// width (16 / 8 floats); other head dims run the portable loops.
#pragma once

#include <cstdint>

namespace m2 {

// Scratch floats LightningBlocked needs for head dim D and block size `block`.
int64_t LightningScratchFloats(int64_t head_dim, int64_t block);

// One head over n consecutive tokens of one sequence, continuing from `state`.
// PRECONDITIONS (checked: n >= 0, head_dim > 0, block > 0, slope >= 0 and finite): q, k, v
// hold n rows at `stride`, out n rows at `out_stride` that overlap neither each other nor
// the inputs, state D*D floats, scratch LightningScratchFloats(head_dim, block) floats.
// FLOPs per token: 4 D^2 (as the recurrent form) + 2 D (block + 1) for the products
// within a block, so on a CPU a smaller block is cheaper; any block gives the same
// outputs up to rounding. (lightning_bench, D = 128, AVX2, one core: block 256 1.8 us per
// token, block 64 1.4 us, LightningRecurrent over the same prompt 1.3-1.5 us.)
void LightningBlocked(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                      float slope, int64_t block, float* state, float* out, int64_t out_stride, float* scratch);
// The same, token by token: one pass over the state per token that decays it, adds
// k^T v and multiplies by q (the state is read and written once per token).
void LightningRecurrent(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                        float slope, float* state, float* out, int64_t out_stride);

// Implementations behind the two above, chosen by ActiveIsa() (base/cpu.h); exposed for
// the tests, which compare them on one machine. The SIMD ones run the portable code for a
// head dim they cannot take. Same arguments and preconditions as the public functions.
void LightningBlockedPortable(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                              int64_t head_dim, float slope, int64_t block, float* state, float* out,
                              int64_t out_stride, float* scratch);
void LightningBlockedAvx2(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                          float slope, int64_t block, float* state, float* out, int64_t out_stride, float* scratch);
void LightningBlockedAvx512(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                            float slope, int64_t block, float* state, float* out, int64_t out_stride, float* scratch);
void LightningRecurrentPortable(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                                int64_t head_dim, float slope, float* state, float* out, int64_t out_stride);
void LightningRecurrentAvx2(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                            float slope, float* state, float* out, int64_t out_stride);
void LightningRecurrentAvx512(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                              int64_t head_dim, float slope, float* state, float* out, int64_t out_stride);

namespace detail {
// Shared by the implementations: where LightningBlocked's scratch parts start (floats
// from the start), for head dim D and block size `block`; mp = block rounded up to 16.
//   rev    [block + mp]       rev[x] = e^(-s(m-1-x)) for x < m, 0 from x = m
//   qdecay [block]            qdecay[i] = e^(-s(i+1))
//   scores [kTileRows][mp]    one tile of rows of (q k^T) o Dm          (SIMD paths)
//   kt     [D*mp]             the block's keys transposed, in panels     (SIMD paths)
//   sp     [D*D]              the state in panels                       (SIMD paths)
//   vp     [block*D]          the block's values in panels               (SIMD paths)
// A panel holds the columns [p*w, (p+1)*w) of a matrix of K rows as K*w contiguous
// floats (w the vector width), so that a GEMM tile reads each operand sequentially.
inline constexpr int64_t kLightningTileRows = 8;
inline constexpr int64_t LightningPaddedBlock(int64_t block) { return (block + 15) / 16 * 16; }
struct LightningScratch {
  int64_t rev, qdecay, scores, kt, sp, vp, total;
};
inline constexpr LightningScratch LightningScratchLayout(int64_t D, int64_t block) {
  const int64_t mp = LightningPaddedBlock(block);
  LightningScratch s{};
  s.rev = 0;
  s.qdecay = s.rev + block + mp;
  s.scores = s.qdecay + block;
  s.kt = s.scores + kLightningTileRows * mp;
  s.sp = s.kt + D * mp;
  s.vp = s.sp + D * D;
  s.total = s.vp + block * D;
  return s;
}
// Fills rev (m + LightningPaddedBlock(m) floats) and qdecay (m floats) for a block of m
// tokens; returns e^(-s m), the state's decay over the block (each value 0 below 1e-30).
float LightningDecayTables(float slope, int64_t m, float* rev, float* qdecay);
// e^(-s), the recurrent form's decay per token (0 below 1e-30).
float LightningStepDecay(float slope);
}  // namespace detail

}  // namespace m2
