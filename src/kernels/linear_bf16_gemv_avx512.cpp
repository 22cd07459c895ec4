// The bf16-activation decode kernels (linear_bf16.h, GemvRowsBf16Avx512): products of up
// to 4 tokens with bf16 or FP8 weights, the activations rounded to bf16 and multiplied
// with vdpbf16ps. Compiled with AVX-512 F/BW/VL and BF16; the FP8 kernel also needs
// AVX-512 VBMI and GFNI (a function-level target, so nothing else here can use them).
//
// Why: a decode step reads every weight once, and at 2 threads the memory delivers more
// than the exact kernels can consume on some machines: the exact FP8 GEMV widens each
// byte to fp32 (four 512-bit operations per 16 weights, about 20 GB/s per Zen 4 core,
// against 28-30 GB/s that one core can read). Here a 64-byte line of FP8 weights is two
// GFNI bit moves (or two byte-table lookups and an OR, see Fp8Decode below), two unpacks
// into bf16 words and two vdpbf16ps: 6 operations per 64 weights instead of 16. bf16
// weights need no decoding at all: one vdpbf16ps per 32 weights, the line as it is.
//
// Exactness: the weights are exact (every e4m3 value is a bf16 value; the block scale
// multiplies each block's fp32 partial sum, as in the exact kernels; the GFNI moves drop
// the subnormal codes), the products are exact in fp32, the sums fp32; what differs from
// the exact path is the activations, rounded to bf16 (at most 2^-9 relative), as in the
// bf16 prefill GEMM.
#include "kernels/simd_intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp8_bf16_tables.h"
#include "kernels/linear_bf16.h"

namespace m2::avx512bf16gemv {
namespace {

constexpr const Fp8Bf16Tables& kFp8Tables = kFp8Bf16Tables;

// Prefetch per row stream (kStream false, RowPrefetch::kNearAndFar): into L1 1 KiB ahead;
// into L2 two passes ahead (a pass reads R rows side by side, so a fixed distance shorter
// than R rows would land inside the pass already being read). Chosen with `gemv_bench
// --bf16` on a Zen 4 VM (1 thread, FP8 1536 x 3072 and 3072 x 1536): R = 4 with the far
// prefetch two passes ahead streamed 30-34 GB/s, R = 8 with a fixed 16 KiB 18-19.
// kStream (one row a pass with RowPrefetch::kL2Stream, Zen 5): into L2 only,
// kPrefetchStreamBytes ahead, as the int8 / int16 kernels. `gemv_bench --turns 1024
// "fp8-block, bf16"` (Zen 5 VM, 2 threads, the two taking turns in one process, five runs):
// 78-81% of the read in the minutes it read 76-88 GB/s against 72-76% with L1 1 KiB + L2
// two rows ahead, 94-96% against 87-91% at 51-53 GB/s. (Two accumulator chains per row
// instead of one were level then, while a division per block bound the kernel; one token
// now sums in two, see GemvFp8.)
constexpr int64_t kNear = 1024;
constexpr int kFarPasses = 2;

// The FP8 codes' two ways to bf16 (Fp8GemvGfni, linear.h).
//
// Tables (kGfni false): two byte-table lookups (vpermi2b) give each code's bf16 value, exact
// for every code (fp8_bf16_tables.h), and one OR adds the sign.
//
// GFNI (kGfni true): each code's bits moved into a bf16 word by two vgf2p8affineqb (any bit
// permutation of each byte): the sign to bit 15, the 4 exponent and 3 mantissa bits to bits
// 10..4, which is the bf16 value 2^-120 x the code's (bf16's exponent bias is 127, e4m3's
// 7), exact for every normal code; the activations come scaled up by 2^shift
// (PackGemvBf16Avx512) so the products stay far from fp32's subnormals, and the row's sum
// is scaled back by 2^(120 - shift) at the end. A subnormal code (exponent 0, |w| < 2^-6
// of its block's scale, under 1 in 28,000 of the block's largest) becomes a bf16 subnormal,
// which vdpbf16ps reads as zero: it drops out of the sum. Zeros stay zeros; the two NaN
// codes read as +-480, as in the exact FP8 kernel (linear_simd.inc). Why: the lookups are
// the kernel's most expensive operations. One row a pass over 512 KiB (in L2), one thread of
// the Zen 5 VM, the kernel itself taking turns: 61-65 GB/s with the lookups, 81-90 with the
// GFNI moves, where a thread reads 40-45 GB/s from memory in the fast minutes. (Until
// this change both ran at 38-39: a division per block to find its scale, now a pointer per
// row, had cost half the speed.)
// Exactness: in the Gaussian FP8 codes of make-bench-model (rms 100 of 448) 1 code in
// 8,000 has exponent 0; each dropped one moves its row's sum by at most 2^-6 x 7/8 of its
// block scale x |x|, against the activations' bf16 rounding of up to 2^-9 relative on
// every term.
struct Fp8Decode {
  __m512i lo0, lo1, hi0, hi1, sign;  // tables
  __m512i lo_bits, hi_bits;          // GFNI: the bit matrices of the low and high bytes
};

// vgf2p8affineqb's matrix (8 bytes, one per bit of the result: byte 7 - i says which bits
// of the source byte make result bit i) for result bit i = source bit from[i] (-1: zero).
constexpr uint64_t BitMoveMatrix(const int (&from)[8]) {
  uint64_t m = 0;
  for (int i = 0; i < 8; ++i)
    if (from[i] >= 0) m |= (uint64_t{1} << from[i]) << (8 * (7 - i));
  return m;
}
// A code s eeee mmm (bits 7..0) as bf16 word bits s000 0eee emmm 0000: low byte emmm 0000
// (source bits 0..3 to 4..7), high byte s000 0eee (bit 7 stays; bits 4..6 to 0..2).
constexpr int kLowFrom[8] = {-1, -1, -1, -1, 0, 1, 2, 3};
constexpr int kHighFrom[8] = {4, 5, 6, -1, -1, -1, -1, 7};

template <bool kGfni>
__attribute__((target("avx512vbmi,gfni"), always_inline)) inline void DecodeFp8Line(const Fp8Decode& d, __m512i b,
                                                                                     __m512bh& w0, __m512bh& w1) {
  __m512i lo, hi;
  if constexpr (kGfni) {
    lo = _mm512_gf2p8affine_epi64_epi8(b, d.lo_bits, 0);
    hi = _mm512_gf2p8affine_epi64_epi8(b, d.hi_bits, 0);
  } else {
    lo = _mm512_permutex2var_epi8(d.lo0, b, d.lo1);  // index bit 7 (the sign) ignored
    hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(d.hi0, b, d.hi1), b, d.sign, 0xf8);
  }
  w0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi), w1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
}

// FP8: T tokens (their bf16 activations in the FP8 order, scaled by 2^x_shift, see
// PackGemvBf16Avx512), R rows at a time; each 64-column line of each row decoded as above,
// then 2 x T dot products. Block partial sums scaled once per block (block_cols a multiple
// of 64), each row's total by 2^((kGfni ? 120 : 0) - x_shift) at the end.
template <int T, int R, bool kStream, bool kGfni>
__attribute__((target("avx512vbmi,gfni"))) void GemvFp8(const LinearWeight& w, const uint16_t* xb, int x_shift, float* y,
                                                        int64_t r0, int64_t r1) {
  const int64_t K = w.cols, bc = w.block_cols;
  Fp8Decode d;
  if constexpr (kGfni) {
    d.lo_bits = _mm512_set1_epi64(static_cast<long long>(BitMoveMatrix(kLowFrom)));
    d.hi_bits = _mm512_set1_epi64(static_cast<long long>(BitMoveMatrix(kHighFrom)));
  } else {
    d.lo0 = _mm512_load_si512(kFp8Tables.lo), d.lo1 = _mm512_load_si512(kFp8Tables.lo + 64);
    d.hi0 = _mm512_load_si512(kFp8Tables.hi), d.hi1 = _mm512_load_si512(kFp8Tables.hi + 64);
    d.sign = _mm512_set1_epi8(static_cast<char>(0x80));
  }
  const float unscale = std::ldexp(1.0f, (kGfni ? 120 : 0) - x_shift);
  const float* scales = static_cast<const float*>(w.scale);
  const int64_t scale_cols = w.scale_cols();
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* row[R];
    const float* row_scales[R];  // each row's block scales: no division in the loop (see Fp8Decode)
    for (int i = 0; i < R; ++i) {
      row[i] = static_cast<const uint8_t*>(w.data) + (r + i) * K;
      row_scales[i] = scales + (r + i) / w.block_rows * scale_cols;
    }
    const int64_t far = kFarPasses * R * K;
    __m512 tot[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) tot[i][t] = _mm512_setzero_ps();
    for (int64_t k0 = 0, block = 0; k0 < K; k0 += bc, ++block) {
      const int64_t end = std::min(K, k0 + bc);
      // One token: two chains of sums per row (a line's two halves), added at the block's end.
      __m512 acc[R][T], acc2[R];
      for (int i = 0; i < R; ++i) {
        acc2[i] = _mm512_setzero_ps();
        for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
      }
      for (int64_t k = k0; k < end; k += 64) {
        __m512bh x0[T], x1[T];
        for (int t = 0; t < T; ++t) {
          x0[t] = (__m512bh)_mm512_loadu_si512(xb + t * K + k);
          x1[t] = (__m512bh)_mm512_loadu_si512(xb + t * K + k + 32);
        }
        for (int i = 0; i < R; ++i) {
          if constexpr (kStream) {
            _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + kPrefetchStreamBytes, _MM_HINT_T1);
          } else {
            _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + kNear, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + far, _MM_HINT_T1);
          }
          __m512bh w0, w1;
          DecodeFp8Line<kGfni>(d, _mm512_loadu_si512(row[i] + k), w0, w1);
          if constexpr (T == 1) {
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, x0[0]);
            acc2[i] = _mm512_dpbf16_ps(acc2[i], w1, x1[0]);
          } else {
            for (int t = 0; t < T; ++t) acc[i][t] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[i][t], w0, x0[t]), w1, x1[t]);
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        if constexpr (T == 1) acc[i][0] = _mm512_add_ps(acc[i][0], acc2[i]);
        const __m512 s = _mm512_set1_ps(row_scales[i][block]);
        for (int t = 0; t < T; ++t) tot[i][t] = _mm512_fmadd_ps(acc[i][t], s, tot[i][t]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) y[t * w.rows + r + i] = _mm512_reduce_add_ps(tot[i][t]) * unscale;
  }
  if constexpr (R > 1) {
    if (r < r1) GemvFp8<T, 1, kStream, kGfni>(w, xb, x_shift, y, r, r1);
  }
}

// bf16: T tokens (bf16 activations in column order), R rows at a time, one vdpbf16ps per
// token and 32 weights.
template <int T, int R, bool kStream>
void GemvBf16(const LinearWeight& w, const uint16_t* xb, float* y, int64_t r0, int64_t r1) {
  const int64_t K = w.cols;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint16_t* row[R];
    for (int i = 0; i < R; ++i) row[i] = static_cast<const uint16_t*>(w.data) + (r + i) * K;
    const int64_t far = kFarPasses * R * K * 2;
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
      __m512bh xv[T];
      for (int t = 0; t < T; ++t) xv[t] = (__m512bh)_mm512_loadu_si512(xb + t * K + k);
      for (int i = 0; i < R; ++i) {
        if constexpr (kStream) {
          _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + kPrefetchStreamBytes, _MM_HINT_T1);
        } else {
          _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + kNear, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(row[i] + k) + far, _MM_HINT_T1);
        }
        const __m512bh wv = (__m512bh)_mm512_loadu_si512(row[i] + k);
        for (int t = 0; t < T; ++t) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv, xv[t]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) y[t * w.rows + r + i] = _mm512_reduce_add_ps(acc[i][t]);
  }
  if constexpr (R > 1) {
    if (r < r1) GemvBf16<T, 1, kStream>(w, xb, y, r, r1);
  }
}

// Runs kernel<T, R> (R rows a pass), or kernel<T, 1> where DecodeOneRow() says so (Zen 5,
// linear.h), there with the L2-only prefetch where DecodeRowPrefetch() says so.
template <int T, int R, class Kernel>
bool Pass(const Kernel& kernel) {
  if (T <= kDecodeOneRowTokens && DecodeOneRow()) {
    if (DecodeRowPrefetch() == RowPrefetch::kL2Stream) kernel.template operator()<T, 1, true>();
    else kernel.template operator()<T, 1, false>();
  } else {
    kernel.template operator()<T, R, false>();
  }
  return true;
}

}  // namespace
}  // namespace m2::avx512bf16gemv

namespace m2 {

bool GemvBf16Supports(const LinearWeight& w, bool vbmi_and_gfni) {
  if (w.cols % 64 != 0) return false;
  if (w.format == WeightFormat::kBF16) return true;
  return w.format == WeightFormat::kFp8Block && vbmi_and_gfni && w.block_cols % 64 == 0;
}

int PackGemvBf16Avx512(const float* x, int64_t n, int64_t K, bool fp8_order, uint16_t* out) {
  // Word j of the first vector of a 64-column group (j = 8L + i, L the 128-bit lane) is
  // column 16L + i, of the second 16L + 8 + i: the order vpunpcklbw / vpunpckhbw give the
  // FP8 weights' bytes.
  alignas(64) static constexpr short kFirst[32] = {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23,
                                                   32, 33, 34, 35, 36, 37, 38, 39, 48, 49, 50, 51, 52, 53, 54, 55};
  alignas(64) static constexpr short kSecond[32] = {8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31,
                                                    40, 41, 42, 43, 44, 45, 46, 47, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i first = _mm512_load_si512(kFirst), second = _mm512_load_si512(kSecond);
  // FP8 order: scaled by 2^shift so the largest |x| lands in [2^63, 2^64) (shift clamped
  // to [-7, 127]: the multiplier and the kernels' 2^(120 - shift) stay finite). Both ways
  // of decoding the weights keep their products inside fp32's normal range: the GFNI
  // weights (value x 2^-120) give products up to 2^-47 or so, the table's (value) 2^73.
  int shift = 0;
  if (fp8_order) {
    __m512 amax = _mm512_setzero_ps();
    for (int64_t i = 0; i < n * K; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    const float m = _mm512_reduce_max_ps(amax);
    if (m > 0.0f && std::isfinite(m)) {  // zeros: any shift; inf or NaN: it stays so
      int e = 0;
      std::frexp(m, &e);  // m in [2^(e-1), 2^e)
      shift = std::clamp(64 - e, -7, 127);
    }
  }
  const __m512 up = _mm512_set1_ps(std::ldexp(1.0f, shift));
  for (int64_t t = 0; t < n; ++t) {
    const float* src = x + t * K;
    uint16_t* dst = out + t * K;
    for (int64_t k = 0; k < K; k += 64) {
      const auto in = [&](int64_t j) { return _mm512_mul_ps(_mm512_loadu_ps(src + k + j), up); };
      // cvtne2ps_pbh(hi, lo): lo's 16 values, then hi's.
      const __m512i a = (__m512i)_mm512_cvtne2ps_pbh(in(16), in(0));
      const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(in(48), in(32));
      if (fp8_order) {
        _mm512_storeu_si512(dst + k, _mm512_permutex2var_epi16(a, first, b));
        _mm512_storeu_si512(dst + k + 32, _mm512_permutex2var_epi16(a, second, b));
      } else {
        _mm512_storeu_si512(dst + k, a);
        _mm512_storeu_si512(dst + k + 32, b);
      }
    }
  }
  return shift;
}

bool GemvRowsBf16Avx512(const LinearWeight& w, const uint16_t* xb, int x_shift, int64_t n, float* y, int64_t r0,
                        int64_t r1) {
  using namespace avx512bf16gemv;
  if (w.format == WeightFormat::kFp8Block) {
    const bool gfni = Fp8GemvGfni();
    const auto fp8 = [&]<int T, int R, bool kStream>() {
      if (gfni) GemvFp8<T, R, kStream, true>(w, xb, x_shift, y, r0, r1);
      else GemvFp8<T, R, kStream, false>(w, xb, x_shift, y, r0, r1);
    };
    switch (n) {
      case 1: return Pass<1, 4>(fp8);
      case 2: return Pass<2, 4>(fp8);
      case 3: return Pass<3, 2>(fp8);
      case 4: return Pass<4, 2>(fp8);
      default: return false;
    }
  }
  if (w.format == WeightFormat::kBF16) {
    const auto bf16 = [&]<int T, int R, bool kStream>() { GemvBf16<T, R, kStream>(w, xb, y, r0, r1); };
    switch (n) {
      case 1: return Pass<1, 4>(bf16);
      case 2: return Pass<2, 4>(bf16);
      case 3: return Pass<3, 4>(bf16);
      case 4: return Pass<4, 2>(bf16);
      default: return false;
    }
  }
  return false;
}

}  // namespace m2
