// The MoE of decode chunks (up to kMaxGemvTokens tokens) on several threads runs every
// used expert's W1 / W3 rows as one pool job and every W2 row as a second
// (ExpertsByRows in moe.cpp). Its output must be the bits of the one-thread path (whole
// experts, whole matrices) for every weight format and activation mode the experts can
// have, for one token and for batches, on 2, 3 and 5 threads, and with the scratch reused
// from call to call; and a prefill chunk (more tokens) still takes the other paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/quantize.h"
#include "model/layers.h"

namespace m2 {
namespace {

// A weight's bytes, kept alive beside its LinearWeight.
struct Stored {
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> q_scales;
  std::vector<float> block_scales;
};

LinearWeight Random(WeightFormat f, int64_t rows, int64_t cols, ActivationMode mode, std::mt19937& rng, Stored& st) {
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& e : v) e = nd(rng);
  LinearWeight w;
  w.format = f, w.rows = rows, w.cols = cols, w.activations = mode;
  switch (f) {
    case WeightFormat::kF32:
      st.bytes.resize(v.size() * 4);
      std::memcpy(st.bytes.data(), v.data(), st.bytes.size());
      break;
    case WeightFormat::kBF16:
      st.bytes.resize(v.size() * 2);
      for (size_t k = 0; k < v.size(); ++k) {
        const uint16_t h = F32ToBf16(v[k]);
        std::memcpy(&st.bytes[2 * k], &h, 2);
      }
      break;
    case WeightFormat::kFp8Block:
      st.bytes.resize(v.size());
      for (size_t k = 0; k < v.size(); ++k) st.bytes[k] = F32ToFp8E4M3(v[k] * 40.0f);
      st.block_scales.assign(static_cast<size_t>(w.scale_rows() * w.scale_cols()), 1.0f / 40.0f);
      for (size_t k = 0; k < st.block_scales.size(); ++k) st.block_scales[k] *= 1.0f + 0.1f * static_cast<float>(k % 5);
      w.scale = st.block_scales.data();
      break;
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: {
      const bool q4 = f == WeightFormat::kQ4;
      const int64_t row_bytes = q4 ? cols / 2 : cols;
      st.bytes.resize(static_cast<size_t>(rows * row_bytes));
      st.q_scales.resize(static_cast<size_t>(rows * cols / kQuantGroup));
      for (int64_t r = 0; r < rows; ++r) {
        uint8_t* out = &st.bytes[static_cast<size_t>(r * row_bytes)];
        uint16_t* sc = &st.q_scales[static_cast<size_t>(r * cols / kQuantGroup)];
        if (q4) QuantizeRowQ4(&v[static_cast<size_t>(r * cols)], cols, out, sc);
        else QuantizeRowQ8(&v[static_cast<size_t>(r * cols)], cols, reinterpret_cast<int8_t*>(out), sc);
      }
      w.scale = st.q_scales.data();
      break;
    }
    case WeightFormat::kF16: ADD_FAILURE() << "not used here"; break;
  }
  w.data = st.bytes.data();
  return w;
}

struct Moe {
  ModelConfig cfg;
  MoeWeights w;
  std::vector<Stored> stored;
  std::vector<float> router;
};

// E experts of width I over hidden Hd, top K, every expert matrix in format f / mode.
Moe MakeMoe(WeightFormat f, ActivationMode mode, int64_t Hd, int64_t I, int64_t E, int64_t K, uint32_t seed) {
  Moe m;
  m.cfg.hidden_size = Hd, m.cfg.intermediate_size = I, m.cfg.num_local_experts = E, m.cfg.num_experts_per_tok = K;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  m.router.resize(static_cast<size_t>(E * Hd));
  for (float& e : m.router) e = nd(rng);
  m.w.gate.format = WeightFormat::kF32, m.w.gate.rows = E, m.w.gate.cols = Hd, m.w.gate.data = m.router.data();
  m.stored.resize(static_cast<size_t>(3 * E));  // sized once: the weights point into it
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights ex;
    ex.w1 = Random(f, I, Hd, mode, rng, m.stored[static_cast<size_t>(3 * e)]);
    ex.w3 = Random(f, I, Hd, mode, rng, m.stored[static_cast<size_t>(3 * e + 1)]);
    ex.w2 = Random(f, Hd, I, mode, rng, m.stored[static_cast<size_t>(3 * e + 2)]);
    m.w.experts.push_back(ex);
  }
  return m;
}

std::vector<float> RunMoe(const Moe& m, const std::vector<float>& x, int64_t n, ThreadPool& pool, Scratch& s) {
  std::vector<float> out(static_cast<size_t>(n * m.cfg.hidden_size), std::nanf(""));
  MoeForward(m.cfg, m.w, 0, x.data(), n, out.data(), s, pool, nullptr, nullptr);
  return out;
}

struct Case {
  WeightFormat format;
  ActivationMode mode;
  int64_t I;
  const char* name;
};

TEST(MoeRows, DecodeChunksGiveTheOneThreadBits) {
  const Case cases[] = {
      {WeightFormat::kBF16, ActivationMode::kExact, 100, "bf16 exact, width 100 (rows not in 16s)"},
      {WeightFormat::kFp8Block, ActivationMode::kExact, 160, "fp8 exact"},
      {WeightFormat::kFp8Block, ActivationMode::kBf16Prefill, 160, "fp8 bf16 (the bf16 decode kernel where it runs)"},
      {WeightFormat::kQ8, ActivationMode::kInt16Decode, 160, "q8 int16 decode"},
      {WeightFormat::kQ8, ActivationMode::kInt8Decode, 160, "q8 int8 decode"},
      {WeightFormat::kQ4, ActivationMode::kInt8Decode, 160, "q4 int8 decode"},
      {WeightFormat::kQ4, ActivationMode::kExact, 160, "q4 exact"},
  };
  const int64_t Hd = 256, E = 16, K = 4;
  ThreadPool one(1), two(2), three(3), five(5);
  ThreadPool* many[] = {&two, &three, &five};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : cases) {
    const Moe m = MakeMoe(c.format, c.mode, Hd, c.I, E, K, 11);
    Scratch s1, sm[3];
    // 1 token, batches of 3 and 8 (one-pass chunks), 12 (a prefill chunk); again 1 and 3
    // with the scratch as the bigger calls left it.
    for (int64_t n : {1, 3, 8, 12, 1, 3}) {
      std::vector<float> x(static_cast<size_t>(n * Hd));
      for (float& e : x) e = nd(rng);
      const std::vector<float> ref = RunMoe(m, x, n, one, s1);
      for (float v : ref) ASSERT_TRUE(std::isfinite(v)) << c.name;
      for (int k = 0; k < 3; ++k) {
        const std::vector<float> got = RunMoe(m, x, n, *many[k], sm[k]);
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
            << c.name << ", " << n << " tokens, " << many[k]->size() << " threads";
      }
    }
  }
}

// The chunk's experts really ran: a token's output is its experts' weighted sum, so
// routing it to other experts (another router) changes it.
TEST(MoeRows, OutputDependsOnTheRouting) {
  Moe m = MakeMoe(WeightFormat::kQ4, ActivationMode::kInt8Decode, 256, 160, 16, 4, 5);
  std::vector<float> x(256);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& e : x) e = nd(rng);
  ThreadPool two(2);
  Scratch s;
  const std::vector<float> a = RunMoe(m, x, 1, two, s);
  for (float& e : m.router) e = -e;
  const std::vector<float> b = RunMoe(m, x, 1, two, s);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace m2
