// The bf16-activation prefill GEMM on AMX (linear_bf16.h, GemmRowsBf16Amx): the same
// products as the AVX-512 BF16 GEMM (weights exact, activations rounded to bf16, fp32
// sums, FP8 block partial sums scaled in fp32), multiplied by the tile unit.
//
// Why: one TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one, 8192 multiply-adds,
// where a 512-bit vdpbf16ps does 32; the tile unit sustains about one every 16 cycles, some
// 8x the vector units' rate. A prefill's GEMMs then stop being bound by multiplying and
// become bound by decoding FP8 and moving tiles.
//
// Layout. The weights are the A operand: a tile is 16 weight rows x 32 columns, which for
// bf16 weights is the matrix itself (a row stride of 2K bytes), and for FP8 a panel of 32
// rows decoded once per chunk of tokens into a buffer of such tiles (exactly, by two byte
// table lookups per 64 codes, as the bf16 decode kernel does). The activations are the B
// operand, in the pairs layout of PackTokensBf16Avx512: row p of a tile holds 16 tokens'
// columns 2p and 2p + 1, which is how the tile unit wants B. C = 16 rows x 16 tokens:
// each pass keeps four C tiles (32 rows x 32 tokens) in the unit, two A and two B tiles
// beside them. FP8: after each scale block (block_cols columns) the C tiles are stored,
// scaled by their block's scale and added to fp32 totals; bf16 weights need no scaling.
// The results go to y transposed (y is [token][row]).
#include "kernels/simd_intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/fp8_bf16_tables.h"
#include "kernels/isa_scratch.h"
#include "kernels/linear_bf16.h"
#include "kernels/probe.h"

namespace m2::amxbf16 {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// tmm0-3: C (rows 0-15 x tokens 0-15, rows 0-15 x 16-31, rows 16-31 x 0-15, rows 16-31 x
// 16-31); tmm4, 5: A (rows 0-15, 16-31); tmm6, 7: B (tokens 0-15, 16-31). All 16 x 64 bytes.
void ConfigureTiles() {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

constexpr const Fp8Bf16Tables& kTables = kFp8Bf16Tables;

// Decodes rows [r, r + nr) (nr = 16 or 32) of an FP8 weight, all K columns, into tiles:
// tile (s, h) = columns [32s, 32s + 32) of rows r + 16h .. + 15, at out + (s * 2 + h) * 512
// (16 rows of 32 bf16 values, 64 bytes each). K a multiple of 64.
void DecodeFp8Panel(const LinearWeight& w, int64_t r, int nr, uint16_t* out) {
  const int64_t K = w.cols;
  const __m512i lo0 = _mm512_load_si512(kTables.lo), lo1 = _mm512_load_si512(kTables.lo + 64);
  const __m512i hi0 = _mm512_load_si512(kTables.hi), hi1 = _mm512_load_si512(kTables.hi + 64);
  const __m512i order = _mm512_load_si512(kTables.order);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int i = 0; i < nr; ++i) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + (r + i) * K;
    uint16_t* dst = out + (i / 16) * 512 + (i % 16) * 32;
    for (int64_t k = 0; k < K; k += 64) {
      const __m512i b = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(row + k));
      const __m512i lo = _mm512_permutex2var_epi8(lo0, b, lo1);  // the index's bit 7 (the sign) is ignored
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, b, hi1), b, sign, 0xf8);
      const int64_t s = k / 32;
      _mm512_store_si512(dst + s * 1024, _mm512_unpacklo_epi8(lo, hi));
      _mm512_store_si512(dst + (s + 1) * 1024, _mm512_unpackhi_epi8(lo, hi));
    }
  }
}

// y[t0 + t][r + i] = acc[i][t] for t < nt (acc: 16 rows x 16 tokens, row-major).
void StoreTransposed(const float* acc, float* y, int64_t rows, int64_t r, int64_t t0, int64_t nt) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(16));
  for (int64_t t = 0; t < nt; ++t)
    _mm512_storeu_ps(y + (t0 + t) * rows + r, _mm512_i32gather_ps(idx, acc + t, 4));
}

// Rows [r, r + 16 * NR) (NR = 1 or 2) against every token: A tiles from `a` (decoded FP8,
// tile (s, h) at a + (s * 2 + h) * 512, row stride 64 bytes) or straight from the bf16
// weight (a == nullptr); B from the packed tokens xt (linear_bf16.h: tiles of 32 tokens,
// tile j at xt + 32j * K / 2 holding [K / 2][tw]).
template <int NR>
void Panel(const LinearWeight& w, const uint16_t* a, const uint32_t* xt, int64_t ntp, int64_t n, float* y,
           int64_t r) {
  const int64_t K = w.cols;
  const bool fp8 = a != nullptr;
  const int64_t block = fp8 ? w.block_cols : K;  // columns between scalings
  const float* scales = fp8 ? static_cast<const float*>(w.scale) : nullptr;
  const int64_t scale_cols = fp8 ? w.scale_cols() : 0;
  alignas(64) float c[4][256];
  alignas(64) float tot[4][256];
  const uint16_t* wrow = static_cast<const uint16_t*>(w.data) + r * K;
  const size_t astride = fp8 ? 64 : static_cast<size_t>(2 * K);
  for (int64_t j = 0; j < ntp; j += 32) {
    const int64_t tw = std::min<int64_t>(32, ntp - j);  // 16 or 32
    const uint32_t* xtile = xt + j * K / 2;
    const size_t bstride = static_cast<size_t>(tw * 4);
    const bool two = tw == 32;
    if (fp8) std::memset(tot, 0, sizeof(tot));
    for (int64_t k0 = 0; k0 < K; k0 += block) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = k0; k < std::min(K, k0 + block); k += 32) {
        const int64_t s = k / 32;
        const void* a0 = fp8 ? static_cast<const void*>(a + s * 1024) : static_cast<const void*>(wrow + k);
        const void* a1 = fp8 ? static_cast<const void*>(a + s * 1024 + 512) : static_cast<const void*>(wrow + 16 * K + k);
        const uint32_t* b = xtile + (k / 2) * tw;
        _tile_loadd(6, b, bstride);
        _tile_loadd(4, a0, astride);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (NR == 2) {
          _tile_loadd(5, a1, astride);
          _tile_dpbf16ps(2, 5, 6);
        }
        if (two) {
          _tile_loadd(7, b + 16, bstride);
          _tile_dpbf16ps(1, 4, 7);
          if constexpr (NR == 2) _tile_dpbf16ps(3, 5, 7);
        }
      }
      if (fp8) {
        _tile_stored(0, c[0], 64);
        if (two) _tile_stored(1, c[1], 64);
        if constexpr (NR == 2) {
          _tile_stored(2, c[2], 64);
          if (two) _tile_stored(3, c[3], 64);
        }
        for (int h = 0; h < NR; ++h) {
          const __m512 sv = _mm512_set1_ps(scales[(r + 16 * h) / w.block_rows * scale_cols + k0 / w.block_cols]);
          for (int q = 0; q < (two ? 2 : 1); ++q) {
            float* tp = tot[2 * h + q];
            const float* cp = c[2 * h + q];
            for (int i = 0; i < 256; i += 16)
              _mm512_store_ps(tp + i, _mm512_fmadd_ps(_mm512_load_ps(cp + i), sv, _mm512_load_ps(tp + i)));
          }
        }
      }
    }
    if (!fp8) {
      _tile_stored(0, tot[0], 64);
      if (two) _tile_stored(1, tot[1], 64);
      if constexpr (NR == 2) {
        _tile_stored(2, tot[2], 64);
        if (two) _tile_stored(3, tot[3], 64);
      }
    }
    for (int h = 0; h < NR; ++h)
      for (int q = 0; q < (two ? 2 : 1); ++q) {
        const int64_t t0 = j + 16 * q;
        if (t0 < n) StoreTransposed(tot[2 * h + q], y, w.rows, r + 16 * h, t0, std::min<int64_t>(16, n - t0));
      }
  }
}

}  // namespace
}  // namespace m2::amxbf16

namespace m2 {

double AmxBf16Burst(int64_t iters) {
  using namespace amxbf16;
  alignas(64) static const uint16_t kOnes[512] = {};  // bf16 zeros: the unit's rate does not depend on the values
  alignas(64) float out[256];
  ConfigureTiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, kOnes, 64);
  _tile_loadd(5, kOnes, 64);
  _tile_loadd(6, kOnes, 64);
  _tile_loadd(7, kOnes, 64);
  for (int64_t it = 0; it < iters; ++it) {  // four independent accumulators
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  volatile float sink = out[0];
  (void)sink;
  _tile_release();
  return 2.0 * 16 * 16 * 32 * 4 * static_cast<double>(iters);
}

bool GemmAmxSupports(const LinearWeight& w) {
  if (w.format == WeightFormat::kBF16) return w.cols % 32 == 0;
  return w.format == WeightFormat::kFp8Block && w.cols % 64 == 0 && w.block_cols % 64 == 0 && w.block_rows % 16 == 0;
}

bool GemmRowsBf16Amx(const LinearWeight& w, const uint32_t* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                     int64_t r1) {
  using namespace amxbf16;
  if (!GemmAmxSupports(w) || ntp % 16 != 0) return false;
  const bool fp8 = w.format == WeightFormat::kFp8Block;
  thread_local IsaScratch<uint16_t> scratch;
  uint16_t* panel = nullptr;
  if (fp8) {  // 64-byte aligned
    const uintptr_t p = reinterpret_cast<uintptr_t>(scratch.Get(static_cast<size_t>(32 * w.cols + 32)));
    panel = reinterpret_cast<uint16_t*>((p + 63) & ~uintptr_t{63});
  }
  ConfigureTiles();
  int64_t r = r0;
  for (; r + 32 <= r1; r += 32) {
    if (fp8) DecodeFp8Panel(w, r, 32, panel);
    Panel<2>(w, panel, xt, ntp, n, y, r);
  }
  if (r + 16 <= r1) {
    if (fp8) DecodeFp8Panel(w, r, 16, panel);
    Panel<1>(w, panel, xt, ntp, n, y, r);
    r += 16;
  }
  _tile_release();
  if (r < r1) return GemmRowsBf16Avx512(w, xt, ntp, n, y, r, r1);
  return true;
}

}  // namespace m2
