// The int8 prefill GEMM (linear_int8.h, `--activations int8+int8`), compiled with AVX-512
// F/BW/VL and VNNI. The layout follows the bf16 GEMM (linear_bf16_avx512.cpp): tokens are
// the vector dimension, a panel of kR rows is unpacked once per chunk of kKC columns into
// unsigned bytes (q4: the nibble u as it is; q8: w + 128), and the micro-kernel broadcasts
// 4 adjacent weights of a row (one 32-bit element, folded into vpdpbusd as an embedded
// broadcast) against 16 tokens' 4 adjacent activations: 64 multiply-adds per instruction,
// against 32 for vdpbf16ps and 16 for an fp32 FMA.
//
// Per group of 32 columns each (row, token) lane collects the exact integer dot of the
// group; its accumulator starts at -offset x sum(q) (offset 8 for q4, 128 for q8, which
// undoes the unsigned weights: sum((w + off) q) - off sum(q) = sum(w q)). Then, as the
// portable reference LinearInt8RowsReference does, total += float(dot) * (s x d) with the
// product and the sum rounded separately, groups in column order: the same bits as the
// reference (this file is built with -ffp-contract=off so no step is fused), for any tile
// and any batch.
#include <immintrin.h>

#include <cstring>

#include "kernels/linear_int8.h"

namespace m2::int8gemm {
namespace {

constexpr int kR = 12;          // rows per panel (6 x 2 or 12 x 1 token vectors of accumulators)
constexpr int64_t kKC = 256;    // columns per chunk (at most)
constexpr int64_t kGroups = kKC / kQuantGroup;

// Per-thread scratch; plain new[] (see FloatScratch in linear_simd.inc: no inline std::
// templates in an ISA-specific object).
template <class T>
struct Scratch {
  T* p = nullptr;
  size_t n = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { delete[] p; }
  T* Get(size_t m) {
    if (m > n) {
      delete[] p;
      p = new T[m];
      n = m;
    }
    return p;
  }
};

// RR panel rows (bytes, row stride kKC; their group scales gs, row stride kGroups) times TV
// vectors of 16 tokens over the kc columns of a chunk. xq: the chunk's quads [kc / 4][xs],
// ns: -sum(q) [kc / 32][xs], xd: the activation scales [kc / 32][xs]. ct rows (stride ntp)
// get the totals (first chunk) or continue them.
template <int TV, int RR, int kShift>
void Micro(const uint8_t* wd, const float* gs, int64_t kc, const uint32_t* xq, const int32_t* ns, const float* xd,
           int64_t xs, float* ct, int64_t ntp, bool first) {
  __m512 tot[RR][TV];
  for (int r = 0; r < RR; ++r)
    for (int v = 0; v < TV; ++v) tot[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(ct + r * ntp + v * 16);
  for (int64_t g = 0; g < kc / kQuantGroup; ++g) {
    __m512i acc[RR][TV];
    for (int v = 0; v < TV; ++v) {
      const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(ns + g * xs + v * 16), kShift);
      for (int r = 0; r < RR; ++r) acc[r][v] = corr;
    }
#pragma GCC unroll 8
    for (int j = 0; j < kQuantGroup / 4; ++j) {
      __m512i xv[TV];
      for (int v = 0; v < TV; ++v) xv[v] = _mm512_loadu_si512(xq + (g * 8 + j) * xs + v * 16);
      for (int r = 0; r < RR; ++r) {
        int32_t quad;
        std::memcpy(&quad, wd + r * kKC + g * kQuantGroup + 4 * j, 4);
        const __m512i wv = _mm512_set1_epi32(quad);
        for (int v = 0; v < TV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], wv, xv[v]);
      }
    }
    __m512 dv[TV];
    for (int v = 0; v < TV; ++v) dv[v] = _mm512_loadu_ps(xd + g * xs + v * 16);
    for (int r = 0; r < RR; ++r) {
      const __m512 sb = _mm512_set1_ps(gs[r * kGroups + g]);
      for (int v = 0; v < TV; ++v)
        tot[r][v] = _mm512_add_ps(tot[r][v], _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][v]), _mm512_mul_ps(sb, dv[v])));
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int v = 0; v < TV; ++v) _mm512_storeu_ps(ct + r * ntp + v * 16, tot[r][v]);
}

// Row `r`, columns [k0, k0 + kc) (multiples of 32), into dst as unsigned bytes in column
// order: q4's nibbles u, q8's w + 128.
template <bool kQ4>
void UnpackRow(const LinearWeight& w, int64_t r, int64_t k0, int64_t kc, uint8_t* dst) {
  if constexpr (kQ4) {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2) + k0 / 2;
    const __m128i nib = _mm_set1_epi8(0x0f);
    int64_t k = 0;
    // Four groups (64 bytes) at a time: the low and high nibbles of every byte, then each
    // group's 16 low values followed by its 16 high ones (128-bit lanes interleaved).
    const __m512i nib4 = _mm512_set1_epi8(0x0f);
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (; k + 4 * kQuantGroup <= kc; k += 4 * kQuantGroup) {
      const __m512i b = _mm512_loadu_si512(p + k / 2);
      const __m512i lo = _mm512_and_si512(b, nib4), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib4);
      _mm512_storeu_si512(dst + k, _mm512_permutex2var_epi64(lo, first, hi));
      _mm512_storeu_si512(dst + k + 64, _mm512_permutex2var_epi64(lo, second, hi));
    }
    for (; k < kc; k += kQuantGroup) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k / 2));
      const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), nib), _mm_and_si128(b, nib));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), u);
    }
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * w.cols + k0;
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int64_t k = 0; k < kc; k += kQuantGroup)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k)), flip));
  }
}

template <bool kQ4>
void Gemm(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1) {
  constexpr int kShift = kQ4 ? 3 : 7;  // offset 8 or 128
  const int64_t K = w.cols, G = K / kQuantGroup, ntp = x.ntp, n = x.n;
  thread_local Scratch<uint8_t> wd_buf;
  thread_local Scratch<float> ct_buf;
  uint8_t* wd = wd_buf.Get(static_cast<size_t>(kR * kKC));
  float* ct = ct_buf.Get(static_cast<size_t>(kR * ntp));
  float gs[kR * kGroups];
  const int64_t row_bytes = kQ4 ? K / 2 : K;
  for (int64_t p0 = r0; p0 < r1; p0 += kR) {
    const int64_t nr = r1 - p0 < kR ? r1 - p0 : kR;
    const int64_t next_nr = r1 - (p0 + kR) < kR ? r1 - (p0 + kR) : kR;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = K - k0 < kKC ? K - k0 : kKC;
      for (int64_t i = 0; i < kR; ++i) {
        if (i < next_nr) {  // the next panel's chunk into L2 while this one computes
          const char* a = static_cast<const char*>(w.data) + (p0 + kR + i) * row_bytes + (kQ4 ? k0 / 2 : k0);
          for (int64_t o = 0; o < (kQ4 ? kc / 2 : kc); o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
        }
        if (i >= nr) {
          std::memset(wd + i * kKC, 0, static_cast<size_t>(kc));
          for (int64_t g = 0; g < kGroups; ++g) gs[i * kGroups + g] = 0.0f;
          continue;
        }
        UnpackRow<kQ4>(w, p0 + i, k0, kc, wd + i * kKC);
        const uint16_t* s = static_cast<const uint16_t*>(w.scale) + (p0 + i) * G + k0 / kQuantGroup;
        int64_t g = 0;
        if (kc == kKC) {  // the 8 scales of a whole chunk at once
          _mm256_storeu_ps(gs + i * kGroups, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))));
          g = kGroups;
        }
        for (; g < kc / kQuantGroup; ++g) gs[i * kGroups + g] = _cvtsh_ss(s[g]);
      }
      for (int64_t tile = 0; tile < ntp; tile += kTokenTile) {
        const int64_t tw = ntp - tile < kTokenTile ? ntp - tile : kTokenTile;
        const uint32_t* xq = x.q + tile * K / 4 + k0 / 4 * tw;
        const int32_t* ns = x.negsum + tile * G + k0 / kQuantGroup * tw;
        const float* xd = x.d + tile * G + k0 / kQuantGroup * tw;
        int64_t t = 0;
        for (; t + 32 <= tw; t += 32)
          for (int r = 0; r < kR; r += 6)
            Micro<2, 6, kShift>(wd + r * kKC, gs + r * kGroups, kc, xq + t, ns + t, xd + t, tw, ct + r * ntp + tile + t,
                                ntp, k0 == 0);
        for (; t < tw; t += 16)
          Micro<1, kR, kShift>(wd, gs, kc, xq + t, ns + t, xd + t, tw, ct + tile + t, ntp, k0 == 0);
      }
    }
    // Token by token, as the other GEMMs write back (adjacent stores per token).
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < nr; ++i) y[t * w.rows + p0 + i] = ct[i * ntp + t];
  }
}

}  // namespace
}  // namespace m2::int8gemm

namespace m2 {

void PackTokensInt8Avx512(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                          int32_t* negsum, float* d) {
  const int64_t G = K / kQuantGroup;
  const __m512 max_finite = _mm512_set1_ps(3.40282347e+38f);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t tile = t / kTokenTile * kTokenTile, tw = ntp - tile < kTokenTile ? ntp - tile : kTokenTile;
    const int64_t lane = t - tile;
    uint32_t* qt = q + tile * K / 4 + lane;
    int32_t* st = negsum + tile * G + lane;
    float* dt = d + tile * G + lane;
    if (t >= n) {  // padding: contributes nothing
      for (int64_t p = 0; p < K / 4; ++p) qt[p * tw] = 0;
      for (int64_t g = 0; g < G; ++g) st[g * tw] = 0, dt[g * tw] = 0.0f;
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      // The operations of QuantizeActivationsInt8, value by value: amax, 127 / amax, the
      // product rounded to nearest even (vcvtps2dq), d = amax / 127.
      const float* xg = x + t * K + g * kQuantGroup;
      const __m512 v0 = _mm512_loadu_ps(xg), v1 = _mm512_loadu_ps(xg + 16);
      const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
      const __mmask16 ok = _mm512_cmp_ps_mask(a0, max_finite, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, max_finite, _CMP_LE_OQ);
      if (ok != 0xffff) {  // NaN or infinity: q = 0, d = NaN, so the outputs are NaN
        for (int j = 0; j < 8; ++j) qt[(g * 8 + j) * tw] = 0;
        st[g * tw] = 0;
        dt[g * tw] = __builtin_nanf("");
        continue;
      }
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
      const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      alignas(32) uint32_t quads[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(quads), _mm512_cvtepi32_epi8(i0));  // |values| <= 127: exact
      _mm_store_si128(reinterpret_cast<__m128i*>(quads + 4), _mm512_cvtepi32_epi8(i1));
      for (int j = 0; j < 8; ++j) qt[(g * 8 + j) * tw] = quads[j];
      st[g * tw] = -_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
      dt[g * tw] = amax / 127.0f;
    }
  }
}

double Int8DotBurstAvx512Vnni(int64_t iters) {
  constexpr int kChains = 12;
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = _mm512_setzero_si512();
  for (int i = 0; i < kChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return 2.0 * 64 * kChains * static_cast<double>(iters);
}

bool GemmRowsInt8Avx512Vnni(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kQ4) int8gemm::Gemm<true>(w, x, y, r0, r1);
  else if (w.format == WeightFormat::kQ8) int8gemm::Gemm<false>(w, x, y, r0, r1);
  else return false;
  return true;
}

}  // namespace m2
