// Lightning attention (linear attention with exponential decay) against a float64 direct
// sum, o_t = e^(-s(t+1)) q_t S0 + sum_{j<=t} e^(-s(t-j)) (q_t . k_j) v_j, for the blocked
// and the recurrent form, every kernel family this CPU has (portable, AVX2, AVX-512) and
// the dispatching entry points (which follow M2_KERNELS). Head dims 16, 24 (not a whole
// AVX-512 vector: the portable loops there; three AVX2 vectors: the one-vector tails) and
// 128; blocks 5 and 8 (partial SIMD panels) and 256.
//
// Tolerance. Each output is a sum of products, and fp32 rounding of a sum of N terms is
// bounded by N * u * (sum of the terms' magnitudes), u = 2^-24. So every element is
// compared with the float64 value within
//     tol = 2 * (D + n + 16) * u * M,
// M = the same sum over absolute values (e^(-s(t+1)) sum_d |q_t[d] S0[d][e]| + sum_j
// e^(-s(t-j)) sum_d |q_t[d] k_j[d]| |v_j[e]|): a dot product adds at most D roundings, the
// state or the blocked sums at most n (the recurrent decay r^t is t roundings too), 16
// covers the decay tables and the few scalings, and the factor 2 is margin. With the
// model-like inputs (mostly positive, like silu outputs) M is about |o|, so this allows
// ~4e-6 (D = 16, n = 1) to ~5e-5 (D = 128, n = 300) of an output. Measured on an AVX2
// machine: errors 13x below the limit at worst (the recurrent form at slope 1e-5, where
// r^t carries t roundings of r: 50 u * M at n = 300), 45x in the median. A dropped,
// doubled or misdecayed term moves an output by at least about e^(-0.917) / n of M, far
// more than tol, except at the near-zero slope, where a decay off by one step changes
// only 1e-5 of M (the other slopes catch that).
// The final states get the same treatment.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kernels/lightning.h"

namespace m2 {
namespace {

using BlockedFn = void (*)(const float*, const float*, const float*, int64_t, int64_t, int64_t, float, int64_t, float*,
                           float*, int64_t, float*);
using RecurrentFn = void (*)(const float*, const float*, const float*, int64_t, int64_t, int64_t, float, float*, float*,
                             int64_t);

struct Family {
  std::string name;
  BlockedFn blocked;
  RecurrentFn recurrent;
};

// The families this CPU runs, and the dispatching entry points.
std::vector<Family> Families() {
  std::vector<Family> f = {{"dispatch", LightningBlocked, LightningRecurrent},
                           {"portable", LightningBlockedPortable, LightningRecurrentPortable}};
  if (Cpu().has_avx2()) f.push_back({"avx2", LightningBlockedAvx2, LightningRecurrentAvx2});
  if (Cpu().has_avx512()) f.push_back({"avx512", LightningBlockedAvx512, LightningRecurrentAvx512});
  return f;
}

// The steepest slope of MiniMax-Text-01 / M1 (64 heads: 2^(-8/64), layer 0, head 0), and
// shallower ones down to a near-zero slope where the state keeps everything.
const float kSlopes[] = {0.91700404f, 0.5f, 0.01f, 1e-5f};

constexpr double kU = 1.0 / (1 << 24);

// Uniform in [-0.3, 1], about the range of silu outputs.
void Fill(std::vector<float>& x, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.3f, 1.0f);
  for (auto& f : x) f = u(rng);
}

// n tokens of q, k, v, row i of each at (q|k|v) + i * stride.
struct Tokens {
  std::vector<float> buf;
  int64_t n, D, stride;
  const float* q() const { return buf.data(); }
  const float* k() const { return buf.data() + D; }
  const float* v() const { return buf.data() + 2 * D; }
  double Q(int64_t t, int64_t d) const { return q()[t * stride + d]; }
  double K(int64_t t, int64_t d) const { return k()[t * stride + d]; }
  double V(int64_t t, int64_t d) const { return v()[t * stride + d]; }
};

Tokens MakeTokens(int64_t n, int64_t D, std::mt19937& rng) {
  Tokens t{std::vector<float>(static_cast<size_t>(n * 3 * D)), n, D, 3 * D};
  Fill(t.buf, rng);
  return t;
}

// The float64 direct sum from state s0 (D x D, S[d][e] row-major): outputs [n][D] and the
// final state, each with the sum of its terms' magnitudes.
struct Reference {
  std::vector<double> out, out_mag, state, state_mag;
};

Reference Direct(const Tokens& x, double s, const std::vector<float>& s0) {
  const int64_t n = x.n, D = x.D;
  Reference r;
  r.out.assign(static_cast<size_t>(n * D), 0.0);
  r.out_mag.assign(static_cast<size_t>(n * D), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    double* o = &r.out[t * D];
    double* m = &r.out_mag[t * D];
    const double w0 = std::exp(-s * static_cast<double>(t + 1));
    for (int64_t d = 0; d < D; ++d)
      for (int64_t e = 0; e < D; ++e) {
        const double p = x.Q(t, d) * s0[d * D + e];
        o[e] += w0 * p, m[e] += w0 * std::fabs(p);
      }
    for (int64_t j = 0; j <= t; ++j) {
      double dot = 0, adot = 0;
      for (int64_t d = 0; d < D; ++d) dot += x.Q(t, d) * x.K(j, d), adot += std::fabs(x.Q(t, d) * x.K(j, d));
      const double w = std::exp(-s * static_cast<double>(t - j));
      for (int64_t e = 0; e < D; ++e) o[e] += w * dot * x.V(j, e), m[e] += w * adot * std::fabs(x.V(j, e));
    }
  }
  r.state.assign(static_cast<size_t>(D * D), 0.0);
  r.state_mag.assign(static_cast<size_t>(D * D), 0.0);
  const double wn = std::exp(-s * static_cast<double>(n));
  for (int64_t i = 0; i < D * D; ++i) r.state[i] = wn * s0[i], r.state_mag[i] = wn * std::fabs(s0[i]);
  for (int64_t j = 0; j < n; ++j) {
    const double w = std::exp(-s * static_cast<double>(n - 1 - j));
    for (int64_t d = 0; d < D; ++d)
      for (int64_t e = 0; e < D; ++e) {
        const double p = w * x.K(j, d) * x.V(j, e);
        r.state[d * D + e] += p, r.state_mag[d * D + e] += std::fabs(p);
      }
  }
  return r;
}

double Tolerance(int64_t D, int64_t n) { return 2.0 * static_cast<double>(D + n + 16) * kU; }

// got[t * got_stride + e] against the reference outputs, and the final state.
void ExpectNear(const Reference& want, const float* got, int64_t got_stride, const std::vector<float>& state, int64_t n,
                int64_t D, const std::string& what) {
  const double tol = Tolerance(D, n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < D; ++e) {
      const double w = want.out[t * D + e], g = got[t * got_stride + e];
      ASSERT_LE(std::fabs(g - w), tol * want.out_mag[t * D + e])
          << what << ": token " << t << " column " << e << " got " << g << " want " << w << " magnitude "
          << want.out_mag[t * D + e];
    }
  for (int64_t i = 0; i < D * D; ++i)
    ASSERT_LE(std::fabs(state[i] - want.state[i]), tol * want.state_mag[i])
        << what << ": state element " << i << " got " << state[i] << " want " << want.state[i];
}

std::string Describe(const std::string& family, const char* form, int64_t D, int64_t n, int64_t block, float s) {
  return family + " " + form + ": D " + std::to_string(D) + " n " + std::to_string(n) + " block " +
         std::to_string(block) + " slope " + std::to_string(s);
}

TEST(LightningKernels, BlockedAndRecurrentMatchDirectSum) {
  struct Case {
    int64_t block, n;
  };
  const Case cases[] = {{8, 1}, {8, 7}, {8, 8}, {8, 9}, {8, 24}, {8, 37}, {5, 13}, {256, 300}};
  std::mt19937 rng(1);
  for (int64_t D : {16, 24, 128})
    for (const Case& c : cases)
      for (float s : kSlopes) {
        const Tokens x = MakeTokens(c.n, D, rng);
        const std::vector<float> zero(static_cast<size_t>(D * D), 0.0f);
        const Reference want = Direct(x, s, zero);
        for (const Family& f : Families()) {
          std::vector<float> scratch(static_cast<size_t>(LightningScratchFloats(D, c.block)), NAN);
          std::vector<float> sb = zero, sr = zero, ob(c.n * D, NAN), orr(c.n * D, NAN);
          f.blocked(x.q(), x.k(), x.v(), x.stride, c.n, D, s, c.block, sb.data(), ob.data(), D, scratch.data());
          f.recurrent(x.q(), x.k(), x.v(), x.stride, c.n, D, s, sr.data(), orr.data(), D);
          ExpectNear(want, ob.data(), D, sb, c.n, D, Describe(f.name, "blocked", D, c.n, c.block, s));
          ExpectNear(want, orr.data(), D, sr, c.n, D, Describe(f.name, "recurrent", D, c.n, c.block, s));
          if (HasFatalFailure()) return;
        }
      }
}

// Prefill in blocks, decode a few tokens, then another blocked chunk, from a non-zero
// state: the same outputs and final state as one recurrent pass (and the direct sum).
TEST(LightningKernels, BlockedRecurrentBlockedContinuesState) {
  std::mt19937 rng(2);
  const int64_t n1 = 37, n2 = 5, n3 = 50, n = n1 + n2 + n3, block = 16;
  for (int64_t D : {24, 128})
    for (float s : kSlopes) {
      const Tokens x = MakeTokens(n, D, rng);
      std::vector<float> s0(static_cast<size_t>(D * D));
      Fill(s0, rng);
      const Reference want = Direct(x, s, s0);
      for (const Family& f : Families()) {
        std::vector<float> scratch(static_cast<size_t>(LightningScratchFloats(D, block)));
        std::vector<float> mixed = s0, whole = s0, om(n * D, NAN), ow(n * D, NAN);
        const auto at = [&](int64_t t) { return t * x.stride; };
        f.blocked(x.q(), x.k(), x.v(), x.stride, n1, D, s, block, mixed.data(), om.data(), D, scratch.data());
        f.recurrent(x.q() + at(n1), x.k() + at(n1), x.v() + at(n1), x.stride, n2, D, s, mixed.data(),
                    om.data() + n1 * D, D);
        f.blocked(x.q() + at(n1 + n2), x.k() + at(n1 + n2), x.v() + at(n1 + n2), x.stride, n3, D, s, block,
                  mixed.data(), om.data() + (n1 + n2) * D, D, scratch.data());
        f.recurrent(x.q(), x.k(), x.v(), x.stride, n, D, s, whole.data(), ow.data(), D);
        const std::string what = f.name + " D " + std::to_string(D) + " slope " + std::to_string(s);
        ExpectNear(want, om.data(), D, mixed, n, D, what + " blocked+recurrent+blocked");
        ExpectNear(want, ow.data(), D, whole, n, D, what + " recurrent");
        // And with each other (both within tol of the same float64 values).
        const double tol = 2 * Tolerance(D, n);
        for (int64_t i = 0; i < n * D; ++i)
          ASSERT_LE(std::fabs(om[i] - ow[i]), tol * want.out_mag[i]) << what << " output element " << i;
        for (int64_t i = 0; i < D * D; ++i)
          ASSERT_LE(std::fabs(mixed[i] - whole[i]), tol * want.state_mag[i]) << what << " state element " << i;
      }
    }
}

// q, k, v of H heads interleaved per token as [q|k|v] of head 0, then head 1, ...
// (stride 3*D*H), outputs interleaved by head with a gap (out_stride > H*D): each head
// gives bit for bit what it gives on its own contiguous rows, and nothing outside the
// output rows is written. The heads run in parallel on the thread pool, each thread with
// its own scratch, as the model runs them.
TEST(LightningKernels, InterleavedHeadsAndStrides) {
  std::mt19937 rng(3);
  const int64_t D = 32, H = 3, n = 45, block = 16, stride = 3 * D * H, out_stride = H * D + 7;
  std::vector<float> buf(static_cast<size_t>(n * stride));
  Fill(buf, rng);
  ThreadPool& pool = ThreadPool::Global();
  for (const Family& f : Families())
    for (bool blocked : {true, false}) {
      std::vector<float> out(static_cast<size_t>(n * out_stride), -7.0f), states(H * D * D, 0.0f);
      std::vector<float> scratch(static_cast<size_t>(pool.size() * LightningScratchFloats(D, block)));
      pool.ParallelFor(H, 1, [&](int64_t h0, int64_t h1, int th) {
        for (int64_t h = h0; h < h1; ++h) {
          const float* q = buf.data() + h * 3 * D;
          float* state = states.data() + h * D * D;
          if (blocked)
            f.blocked(q, q + D, q + 2 * D, stride, n, D, 0.3f + 0.2f * h, block, state, out.data() + h * D, out_stride,
                      scratch.data() + th * LightningScratchFloats(D, block));
          else
            f.recurrent(q, q + D, q + 2 * D, stride, n, D, 0.3f + 0.2f * h, state, out.data() + h * D, out_stride);
        }
      });
      for (int64_t h = 0; h < H; ++h) {
        // The head on its own: contiguous q, k, v (stride D) and output rows.
        std::vector<float> q(n * D), k(n * D), v(n * D), want(n * D), state(D * D, 0.0f);
        std::vector<float> s1(static_cast<size_t>(LightningScratchFloats(D, block)));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t d = 0; d < D; ++d) {
            const float* row = buf.data() + t * stride + h * 3 * D;
            q[t * D + d] = row[d], k[t * D + d] = row[D + d], v[t * D + d] = row[2 * D + d];
          }
        if (blocked)
          f.blocked(q.data(), k.data(), v.data(), D, n, D, 0.3f + 0.2f * h, block, state.data(), want.data(), D,
                    s1.data());
        else
          f.recurrent(q.data(), k.data(), v.data(), D, n, D, 0.3f + 0.2f * h, state.data(), want.data(), D);
        for (int64_t t = 0; t < n; ++t)
          ASSERT_EQ(0, std::memcmp(&out[t * out_stride + h * D], &want[t * D], D * sizeof(float)))
              << f.name << (blocked ? " blocked" : " recurrent") << " head " << h << " token " << t;
        ASSERT_EQ(0, std::memcmp(&states[h * D * D], state.data(), D * D * sizeof(float))) << f.name << " head " << h;
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = H * D; i < out_stride; ++i) ASSERT_EQ(out[t * out_stride + i], -7.0f) << "gap written";
    }
  // One head, [q|k|v] per token (stride 3*D), against the direct sum.
  const Tokens x = MakeTokens(n, D, rng);
  const std::vector<float> zero(D * D, 0.0f);
  const Reference want = Direct(x, 0.5f, zero);
  for (const Family& f : Families()) {
    std::vector<float> scratch(static_cast<size_t>(LightningScratchFloats(D, block)));
    std::vector<float> state = zero, out(n * (D + 3), NAN);
    f.blocked(x.q(), x.k(), x.v(), x.stride, n, D, 0.5f, block, state.data(), out.data(), D + 3, scratch.data());
    ExpectNear(want, out.data(), D + 3, state, n, D, f.name + " [q|k|v] rows");
  }
}

TEST(LightningKernels, NoTokensLeavesStateAlone) {
  const int64_t D = 16;
  std::vector<float> state(D * D, 0.25f), scratch(static_cast<size_t>(LightningScratchFloats(D, 8))), out(D, -1.0f);
  for (const Family& f : Families()) {
    f.blocked(out.data(), out.data(), out.data(), D, 0, D, 0.5f, 8, state.data(), out.data(), D, scratch.data());
    f.recurrent(out.data(), out.data(), out.data(), D, 0, D, 0.5f, state.data(), out.data(), D);
    for (float x : state) ASSERT_EQ(x, 0.25f) << f.name;
    for (float x : out) ASSERT_EQ(x, -1.0f) << f.name;
  }
}

}  // namespace
}  // namespace m2
