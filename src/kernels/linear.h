// The matmul seam: every linear layer of the model goes through Linear(), which picks
// the kernel for the weight's format and the CPU (AVX-512, AVX2 or portable), and
// spreads the rows over the thread pool. Weights are used where they lie (a mapped
// checkpoint) without conversion.
#pragma once

#include <cstdint>
#include <vector>

#include "base/cpu.h"

namespace m2 {

class ThreadPool;

enum class WeightFormat : uint8_t {
  kF32,
  kBF16,
  kF16,
  kFp8Block,  // float8_e4m3fn, one fp32 scale per [block_rows x block_cols] block
  kQ8,        // int8, one f16 scale per 32 consecutive columns of a row (m2 quantize)
  kQ4,        // 4-bit, one f16 scale per 32 columns; see kQ4 layout below (m2 quantize)
};
const char* WeightFormatName(WeightFormat f);

// Up to this many tokens Linear() uses the decode kernels (weights as the vector
// dimension, linear_simd.inc); more go to the GEMM.
inline constexpr int64_t kMaxGemvTokens = 8;

// How a weight meets its activations. kInt8Decode (kQ8 / kQ4; linear_int8.h): int8 for
// products of up to kMaxGemvTokens tokens (decode steps, where it is faster: gemv_bench
// --int8), fp32 for prefill (where the fp32 GEMM is faster, and exact). kInt8: int8 for
// every token count (m2 perplexity, so that its KL covers every token). kBf16Prefill (bf16,
// FP8, q8, q4 weights on CPUs with AVX-512 BF16; linear_bf16.h): activations rounded to
// bf16 in the prefill GEMM (more than kMaxGemvTokens tokens), and in FP8 decode steps where
// the bf16 decode kernel runs (AMD with AVX-512 VBMI and GFNI); exact kernels for other decode steps.
// kInt8DecodeBf16Prefill (q8 / q4): int8 for decode, bf16 for prefill.
// kInt8DecodeInt8Prefill (q8 / q4 on CPUs with AVX-512 VNNI): int8 for decode and for
// prefill, there on the int8 GEMM (linear_int8.h), which gives the reference's bits.
// kInt8Prefill (FP8 weights whose blocks hold whole 32-column groups, on the avx2 / avx512
// kernels): exact decode steps, and prefill on that int8 GEMM with each 32-column group of
// a row requantized to int8 (one fp32 scale, the activations' rule) as the GEMM unpacks it:
// what `--activations int8+int8` gives FP8 weights (no int8 decode kernel reads FP8).
// kInt16Decode (kQ8; linear_int16.h): int16 activations (per 32 columns) for products of
// up to kMaxGemvTokens tokens, exact prefill; kInt16DecodeBf16Prefill: the same with bf16
// prefill; kInt16DecodeInt16Prefill: int16 for prefill too, on the int16 GEMM; kInt16:
// int16 for every token count on the decode kernels (m2 perplexity, so that its KL covers
// every token).
// kInt16Prefill (FP8 weights whose blocks hold whole 32-column groups, on the avx2 / avx512
// kernels): exact decode steps, and prefill on the int16 GEMM with each group of a row
// converted to int16 with a power-of-two step (Fp8GroupToInt16: exact within 7 binades of
// the group's largest) as the GEMM unpacks it: what `--activations int16+int16` gives FP8
// weights, and what auto gives them where bf16 prefill is not the faster.
// kAuto is a load-time choice only (LoadOptions::activations, `--activations auto`): the
// model resolves it weight by weight (model.cpp, SetActivations: int8 for q4 weights, int16
// for q8 ones, bf16 prefill where it beats fp32, exact otherwise); no weight carries it, and
// Linear() refuses one that does.
enum class ActivationMode : uint8_t {
  kExact,
  kInt8Decode,
  kInt8,
  kBf16Prefill,
  kInt8DecodeBf16Prefill,
  kInt8DecodeInt8Prefill,
  kInt8Prefill,
  kInt16Decode,
  kInt16DecodeBf16Prefill,
  kInt16DecodeInt16Prefill,
  kInt16,
  kInt16Prefill,
  kAuto
};

// Whether fp32 subnormal operands cost a microcode assist on this CPU (Intel's: kernels that
// would make subnormals on the way to exact products, the exact FP8 GEMV's integer decode,
// take another route there); the ISA-specific kernels ask here rather than include base/cpu.h.
bool SubnormalsAreSlow();
// Tests only: SubnormalsAreSlow() answers true on any CPU while on, so the Intel routes run
// (and are checked) on AMD too.
void SetSubnormalsSlowForTesting(bool on);
// Whether the one-token FP8 GEMV with AVX-512 takes 8 rows a pass (Intel) rather than 4.
bool Fp8GemvEightRows();
// Whether the bf16-activation FP8 decode kernel (linear_bf16_gemv_avx512.cpp) turns the
// codes into bf16 with GFNI bit moves (every CPU that runs it has GFNI) rather than byte-table
// lookups. Not quite the same numbers: the moves drop subnormal codes (|w| < 2^-6 of the
// block scale) from the sums, the lookups keep them; the rest is the same bits. Why: per
// byte the lookups cost the kernel more than the memory's speed, the moves do not (figures
// at GemvFp8). M2_FP8_DECODE=gfni or table (base/cpu.h) sets it for a run.
// SetFp8GemvGfniForTesting: 1 forces the moves (on a CPU with GFNI), 0 the lookups, -1 (the
// start) follows M2_FP8_DECODE, or the moves where that is unset.
bool Fp8GemvGfni();
void SetFp8GemvGfniForTesting(int mode);
// Whether the one-token bf16 GEMV takes more rows a pass (Intel: 6) rather than 4: more
// streams in flight from memory. The same bits either way (each row has its own two chains
// of sums). SetBf16GemvWideRowsForTesting: 1 forces the wide passes
// on any CPU, 0 forbids them, -1 (the start) follows the CPU.
bool Bf16GemvWideRows();
void SetBf16GemvWideRowsForTesting(int mode);

// Whether the decode kernels (up to kDecodeOneRowTokens tokens) take one row a pass, so each
// thread reads one stream of weights, rather than their own counts (2 to 8 rows, each chosen
// on Zen 3, Zen 4 or Intel, where more streams in flight read faster). On by default on
// AMD's family 0x1A (Zen 5) and later: there every one-token kernel read about 88-92% of a
// plain read with one row against 72-80% with its own count, and at 2-4 tokens one row was
// ahead or level in every kernel (`gemv_bench --turns 1024 "" TOKENS`, which takes turns
// between the two). The exact kernels at 3-8 tokens (GemvBatchRows) have passes of their
// own and do not ask. The same bits either way (each row has its own chain of sums).
// M2_DECODE_ROWS=1 or own (base/cpu.h) sets it for a run, on any CPU.
// SetDecodeOneRowForTesting: 1 forces one row, 0 forbids it, -1 (the start) follows
// M2_DECODE_ROWS, or the CPU where that is unset.
bool DecodeOneRow();
// The token counts up to which DecodeOneRow() applies (the int8 q4 tiles of 512 bits follow it
// at every count; the 256-bit ones keep 2 rows at 4 tokens, linear_int8_simd.inc).
inline constexpr int kDecodeOneRowTokens = 4;
void SetDecodeOneRowForTesting(int mode);

// How the decode kernels prefetch the rows they stream from memory: the int8 and int16
// ones (linear_int8.h, linear_int16.h), the bf16-activation ones (linear_bf16.h) and, when
// they take one row a pass, the exact ones (linear_simd.inc). kNearAndFar: into L1 (the
// int8 / int16 kernels 3 KiB ahead, the others 1-3 KiB) and into L2 (16 KiB or two passes
// ahead), chosen on Zen 3, Zen 4 and Intel. kL2Stream: into L2 only, kPrefetchStreamBytes ahead, where
// DecodeOneRow() (Zen 5: one stream per thread, which the core's own prefetchers carry into
// L1). kNone: none (tiles after the first, over rows already in L2). On the Zen 5 VM the L1
// prefetch cost reads in the minutes its memory was fast: `gemv_bench --turns 1024` (one row
// a pass, 2 threads, turns split by the reads around them, fast >= 65 GB/s, slow <= 58), L2
// 8 KiB against L1 + L2, fast / slow: q8 int16 82 / 92% of the read against 76 / 88%, q8
// int8 80 / 93% against 81 / 89%, q4 int8 70 / 88% against 72 / 86% (L2 4 KiB / 12 KiB / 16
// KiB for q4 in fast minutes: 74-76 / 78 / 77-78%, 8 KiB 79-80%). The whole model (`m2 bench
// --context 128`, alternating): q8 copy 88.9% against 81.6% in fast minutes, 94.6% against
// 91.4% in slow ones; q4 copy 94.7% against 91.4% (slow). The bf16-activation FP8 kernel
// and the exact bf16 one followed later, each measured alone in `gemv_bench --turns`
// (figures at GemvFp8 in linear_bf16_gemv_avx512.cpp and GemvRows in linear_simd.inc); a
// first try on the whole FP8 slice had read 73% with it against 78% in one fast minute.
enum class RowPrefetch : uint8_t { kNone, kNearAndFar, kL2Stream };
inline constexpr int64_t kPrefetchStreamBytes = 8192;
// kL2Stream where DecodeOneRow(), else kNearAndFar; M2_DECODE_PREFETCH=l2 or l1+l2
// (base/cpu.h) sets it for a run. SetRowPrefetchForTesting: 0 forces kNearAndFar, 1
// kL2Stream (whatever the rows a pass), -1 (the start) follows M2_DECODE_PREFETCH, or
// DecodeOneRow() where that is unset.
RowPrefetch DecodeRowPrefetch();
void SetRowPrefetchForTesting(int mode);

// Whether decode products (and the decode MoE's row jobs, model/moe.cpp) hand their row
// chunks to the threads spread (ThreadPool::Order::kSpread) rather than in order: on unless
// a test says otherwise (why: linear.cpp, DecodeChunkOrder). SetDecodeChunkOrderForTesting:
// 1 spread, 0 in order, -1 (the start) the default.
bool DecodeChunksSpread();
void SetDecodeChunkOrderForTesting(int mode);

// Columns per scale in kQ8 / kQ4.
inline constexpr int64_t kQuantGroup = 32;

// A weight matrix W [rows = out_features, cols = in_features], row-major.
//  kFp8Block: `scale` is fp32 [ceil(rows/block_rows), ceil(cols/block_cols)]; edge blocks
//    are partial. Despite the checkpoint's name (weight_scale_inv) the scale multiplies:
//    W[i, j] = fp8(Wq[i, j]) * scale[i / block_rows, j / block_cols].
//  kQ8: data int8 [rows, cols], scale f16 [rows, cols/32]; W[i, j] = q[i, j] * s[i, j/32].
//  kQ4: data uint8 [rows, cols/2], scale f16 [rows, cols/32]. Group g of row i is 16
//    bytes; byte b holds column 32g+b in its low nibble and column 32g+16+b in its high
//    nibble, each an unsigned value u with W = (u - 8) * s[i, g]. (Low and high halves
//    unpack straight into SIMD lanes.)
//  kQ8 / kQ4 need cols % 32 == 0.
struct LinearWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const void* scale = nullptr;
  int64_t block_rows = 128, block_cols = 128;
  // How this weight meets its activations (ActivationMode above): exact fp32, int8 per 32
  // columns (linear_int8.h) or bf16 (linear_bf16.h). Set by the model on load when asked.
  ActivationMode activations = ActivationMode::kExact;

  int64_t scale_cols() const {
    return format == WeightFormat::kFp8Block ? (cols + block_cols - 1) / block_cols : cols / kQuantGroup;
  }
  int64_t scale_rows() const { return format == WeightFormat::kFp8Block ? (rows + block_rows - 1) / block_rows : rows; }
  bool valid() const { return data != nullptr && rows > 0 && cols > 0; }
  // Bytes of weights (and scales) one pass over the matrix reads.
  int64_t bytes() const;
  // Bytes of the weights alone, at `data` (without the scales).
  int64_t data_bytes() const;
};

// y[n, rows] = x[n, cols] * W^T, fp32 activations and accumulation, rows spread over
// `pool`'s threads (the model passes its own pool). PRECONDITIONS: x holds n*cols floats,
// y room for n*rows; no aliasing.
void LinearOnPool(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool& pool);
// The same on the process-wide ThreadPool::Global() (tests, gemv_bench; not the model).
void Linear(const LinearWeight& w, const float* x, int64_t n, float* y);

// How far ahead the GEMV kernels prefetch weights into L2 (linear_simd.inc); the
// bandwidth probe's prefetching read (probe.h) uses the same distance.
inline constexpr int64_t kPrefetchFarBytes = 16384;

// The prefetch into L2 of the bf16 / f16 / f32 decode GEMV (GemvRows, linear_simd.inc): a
// pass reads R rows side by side, R x row bytes (pass_bytes), so a fixed distance shorter
// than a pass lands in rows being read already; instead the same column of the next two
// passes (the bf16 decode kernel of linear_bf16_gemv_avx512.cpp prefetches passes ahead
// too). `gemv_bench --turns` (kernel and read probe taking turns over the same bytes, 2
// threads, Zen 4 VM in its fast-memory minutes, reads 55-67 GB/s), bf16 8192 x 3072, one
// token: AVX-512 (4 rows a pass) 64-69% of the read with 16 KiB ahead -> 86-98% (one pass
// ahead alone 72-79%, three no better, without the L1 prefetch less steady); AVX2 52% ->
// 68%, and 76% with 4 rows a pass instead of 2. In its slow minutes (35-38 GB/s) 91-92% ->
// 94-97%. The FP8, q8 and q4 decode GEMVs measured the same either way (fast minutes: FP8
// on the bf16 kernel 78%, q8 exact and int8 71-72%, AVX2 FP8 exact 53-55%: their own speed
// binds there) and keep their distances.
inline void PrefetchNextPasses(const void* p, int64_t pass_bytes) {
  __builtin_prefetch(static_cast<const char*>(p) + pass_bytes, 0, 2);  // 2: prefetcht1, into L2
  __builtin_prefetch(static_cast<const char*>(p) + 2 * pass_bytes, 0, 2);
}

// Linear on the calling thread only, for callers that spread work over the pool at a
// coarser grain (the MoE gives each thread whole experts).
void LinearOnThisThread(const LinearWeight& w, const float* x, int64_t n, float* y);

// One-pass products (decode steps: 1..kMaxGemvTokens tokens) cut by rows, for a caller
// that spreads several products' rows over the pool as one job (the MoE runs all its
// chosen experts' W1 and W3 rows as one job, then all their W2 rows as another, so that no
// thread waits at the end for another's whole expert). Prepare() readies x [n, w.cols] on
// the calling thread as LinearOn would for this weight and n (quantized per group to int8
// or int16, rounded to bf16, or the fp32 kept by address: x must then outlive the calls
// to Rows), and Rows() runs rows [r0, r1) on any thread, writing y[t * w.rows + r] for
// every token t. The same bits as LinearOnPool on any pool: each row is computed whole by
// one kernel call, with r0 and r1 multiples of 16 as the pool's chunks are (or the end).
class RowsInput {
 public:
  static bool Applies(int64_t n) { return n >= 1 && n <= kMaxGemvTokens; }
  void Prepare(const LinearWeight& w, const float* x, int64_t n);
  // Grows the buffers Prepare(w, x, n) needs, so that a later Prepare of up to n tokens
  // for a weight like w allocates nothing (warm decode steps allocate nothing).
  void Reserve(const LinearWeight& w, int64_t n);
  // Whether this preparation serves w as well (the same format, activation mode and
  // width): W1 and W3 share their input.
  bool Serves(const LinearWeight& w) const;
  void Rows(const LinearWeight& w, float* y, int64_t r0, int64_t r1) const;

  // The kernel LinearOn takes for (w, n) where it reads prepared input by rows: int8 or
  // int16 activations (any n in the modes that give them to every token), the bf16 decode
  // kernel, the fp32 one-pass kernels (up to kMaxGemvTokens tokens); kNone otherwise.
  enum class Kind : uint8_t { kNone, kInt8, kInt16, kBf16, kExact };
  static Kind KindFor(const LinearWeight& w, int64_t n);

 private:
  Kind kind_ = Kind::kNone;
  WeightFormat format_ = WeightFormat::kF32;
  ActivationMode mode_ = ActivationMode::kExact;
  int64_t cols_ = 0, n_ = 0;
  KernelIsa isa_ = KernelIsa::kPortable;
  const float* x_ = nullptr;
  std::vector<int8_t> q8_;
  std::vector<int16_t> q16_;
  std::vector<float> d_;  // group scales (int8: then the groups' sums, at d_ + n * groups)
  std::vector<uint16_t> xb_;
  int xb_shift_ = 0;  // xb_ is x times 2^xb_shift_ (PackGemvBf16Avx512)
};

// Chunks per thread for a product of `bytes` of weights cut into chunks of about
// chunk_bytes: at least ThreadPool::kChunksPerThread, at most 64.
int RowChunksPerThread(int64_t bytes, int threads, int64_t chunk_bytes);

// ya = x a^T and yb = x b^T, the same bits as two calls; where both weights take the int8
// prefill GEMM (one format, one input width) the tokens are quantized and packed once for
// both (the MoE's W1 and W3 share their input). PRECONDITIONS as LinearOnPool's, for each.
void LinearPairOnPool(const LinearWeight& a, const LinearWeight& b, const float* x, int64_t n, float* ya, float* yb,
                      ThreadPool& pool);
// ys[i] = x ws[i]^T for each of up to kMaxLinearGroup weights on one input (attention's q,
// k and v): the same bits as one LinearOnPool each. In a decode step, where every weight
// takes prepared input by rows (RowsInput::KindFor: int8, int16 or bf16 activations), one
// pool job over all their rows (why: linear.cpp, LinearGroupOn); otherwise one product each.
// PRECONDITIONS as LinearOnPool's, for each; ws and ys of one length.
inline constexpr int kMaxLinearGroup = 4;
void LinearGroupOnPool(const LinearWeight* const* ws, float* const* ys, int count, const float* x, int64_t n,
                       ThreadPool& pool);
void LinearPairOnThisThread(const LinearWeight& a, const LinearWeight& b, const float* x, int64_t n, float* ya,
                            float* yb);

// The portable reference for every format, on the calling thread only: each row is
// dequantized to fp32, then dotted with every token. Tests compare the SIMD kernels to it.
void LinearReference(const LinearWeight& w, const float* x, int64_t n, float* y);

// Row `row` of W, dequantized to fp32: out[cols]. Used for embedding lookups.
void DequantizeRow(const LinearWeight& w, int64_t row, float* out);
// Columns [c0, c1) of row `row`, dequantized: out[c1 - c0].
void DequantizeColumns(const LinearWeight& w, int64_t row, int64_t c0, int64_t c1, float* out);

// The SIMD kernels behind Linear() (linear_avx512.cpp, linear_avx2.cpp): rows [r0, r1).
// Return false if they cannot handle this weight (then the reference is used).
bool LinearRowsAvx512(const LinearWeight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
bool LinearRowsAvx2(const LinearWeight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);

// Prefill kernels on tokens already transposed in tiles: ntp (a multiple of the vector
// width, 16 for AVX-512 and 8 for AVX2; zero
// padded past n) tokens in tiles of kTokenTile; tile j (tokens [32j, 32j + w), w =
// min(32, ntp - 32j)) starts at xt + 32j * cols and holds [cols][w]. The kernel then
// reads each tile's columns in order. Rows [r0, r1).
inline constexpr int64_t kTokenTile = 32;
bool GemmRowsTransposedAvx512(const LinearWeight& w, const float* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                              int64_t r1);
bool GemmRowsTransposedAvx2(const LinearWeight& w, const float* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                            int64_t r1);

}  // namespace m2
