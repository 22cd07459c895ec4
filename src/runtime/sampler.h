// Choosing the next token from a row of logits.
//
// The steps, in the order Hugging Face transformers applies them in generate() (logits
// processors first, then the warpers in the order _get_logits_processor adds them):
//   1. repetition penalty over the distinct tokens of the context (prompt + generated):
//      a positive logit is divided by the penalty, a negative one multiplied (CTRL paper;
//      transformers' RepetitionPenaltyLogitsProcessor);
//   2. temperature 0: greedy, the largest penalized logit (lowest id on ties); stop here;
//   3. logits / temperature, softmax in double;
//   4. top-k: the k most probable tokens;
//   5. top-p (nucleus): the smallest set of most probable tokens whose probability,
//      renormalized over what top-k kept, sums to at least top_p (within 1e-6, so a
//      boundary hit exactly in exact arithmetic does not depend on float rounding);
//   6. min-p: drops tokens whose probability is below min_p times the largest one;
//   7. a draw from what is left, renormalized.
// Ties in probability are ordered by id (lower first), so which token a cutoff keeps is
// defined, not left to the sort.
//
// The random draw uses std::mt19937_64 and our own mapping to [0, 1) (the top 53 bits),
// not std::uniform_real_distribution, whose algorithm the standard leaves to the library:
// the same seed gives the same tokens with any standard library.
//
// The row is never sorted whole: a cutoff or a draw depends only on the order around the
// token where it falls. Top-k keeps the k largest logits with a rising bound; min-p
// collects the tokens within ln(min_p) of the largest. Top-p alone and plain sampling take
// the softmax over the row in one pass (a polynomial exp, relative error < 1e-14) that
// also collects the few thousand largest tokens; the cutoff or the draw falls among them
// or, deeper, in a band placed from every (n / 1024)-th token, the mass above the band
// summed in one more pass. Only tokens around a crossing are sorted. The whole-row sum is
// taken in id order, not in probability order, so probabilities can differ from a
// sort-everything implementation in the last bits, and a draw only where the random
// number falls that close to a boundary.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/status.h"

namespace m2::runtime {

struct SamplingParams {
  double temperature = 1.0;        // 0: greedy
  int64_t top_k = 0;               // 0: off
  double top_p = 1.0;              // 1: off
  double min_p = 0.0;              // 0: off
  double repetition_penalty = 1.0; // 1: off
  uint64_t seed = 0;

  // Names the first field outside its range (temperature >= 0, top_k >= 0,
  // top_p in (0, 1], min_p in [0, 1], repetition_penalty > 0, all finite).
  Status Validate() const;
};

class Sampler {
 public:
  // `params` must pass Validate() (checked: a bad value here is a caller's bug).
  explicit Sampler(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }

  // The next token. `logits`: one row of vocab floats; `context`: the tokens the
  // repetition penalty looks at (ids outside the row are ignored).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> context);

  // The distribution step 7 draws from, over the whole row (zeros for dropped tokens);
  // for greedy, 1 at the chosen token. Does not advance the random state.
  std::vector<double> Distribution(std::span<const float> logits, std::span<const int32_t> context);

  // Restarts the random sequence as if freshly built with this seed.
  void Reseed(uint64_t seed);

 private:
  struct Candidate {
    double x;  // penalized logit / temperature: larger first, then lower id, is the order
    double p;  // a probability (unnormalized until the first normalization)
    int32_t id;
  };
  // Steps 1-6: fills candidates_ with the kept tokens and their renormalized
  // probabilities, in no particular order (greedy: the one chosen token with p = 1); or
  // sets prefix_: the kept tokens are those in order up to last_ (all with no filter),
  // with p = E(id) / sum_ / kept_mass_.
  void Filter(std::span<const float> logits, std::span<const int32_t> context);
  // Step 1: the row to scan, with NaN at penalized tokens (their values go to penalized_).
  const float* Penalize(std::span<const float> logits, std::span<const int32_t> context);
  int32_t Greedy() const;
  // all_: every token with its x, in id order (for temperatures where the float row is not
  // in the order of x, and for rows too odd for the collecting paths).
  void BuildAll();
  // candidates_ = the tokens with x >= threshold / all, with p set.
  void Collect(double threshold);
  void CollectAll();
  // candidates_ = the k first tokens; false if the row is too odd for the float scan.
  bool CollectTopK(int64_t k);
  void SetP();
  void Normalize();
  // Reorders candidates_ so that those up to the one where base + the cumulative p, in
  // order, first reaches `target` come first (that one last); returns their count, 0 if
  // the sum never reaches it. *cum: the sum there (or at the end).
  size_t PrefixReaching(double target, double base = 0, double* cum = nullptr);
  // The softmax pass (by_row_): x_max_, top_, exp_ and the block scales, sum_, heavy_.
  void Softmax(bool collect_heavy);
  // exp(x - x_max) of token `id` (have_exp_).
  double E(int64_t id) const;
  // heavy_: the tokens with x > heavy_bound_, kept to at most kHeavyCap by raising the
  // bound; HeavyBound() starts it where about half that many exceed it in sample_, the x
  // of every sample_step_-th token.
  double HeavyBound();
  void AddHeavy(int32_t id, double x);
  // candidates_ = the tokens with x in [x_low, x_high], with p set; *above: the sum of
  // exp(x - x_max) over those with x > x_high (have_exp_).
  void CollectBand(double x_low, double x_high, double* above);
  // Over the whole row (exp_ set): the first token in order whose cumulative p reaches
  // `target` into *at, the sum there into *cum; false if the sum never reaches it.
  bool Crossing(double target, Candidate* at, double* cum);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  std::vector<uint8_t> seen_;  // per id: already penalized this step
  // Per-step state.
  const float* row_ = nullptr;  // the logits, or keys_ when a token is penalized
  int64_t n_ = 0;
  bool by_row_ = false;  // x = row_[i] / temperature keeps the order of row_ (else all_)
  bool have_exp_ = false;  // exp_ and sum_ hold the softmax over the whole row
  bool prefix_ = false, whole_ = false;  // kept: the prefix up to last_ (whole_: every token)
  Candidate last_{};
  double kept_mass_ = 1;
  double x_max_ = 0, sum_ = 0;
  int32_t top_ = 0;
  std::vector<float> keys_;
  std::vector<Candidate> penalized_;  // p: the penalized logit, x: it over temperature
  std::vector<Candidate> all_;
  std::vector<double> exp_;    // per id: exp(x - x_max) / scale_ of its block of 1024
  std::vector<double> scale_;  // per block
  std::vector<double> block_ref_, block_sum_;
  std::vector<float> block_key_max_;
  std::vector<double> sample_;
  int64_t sample_step_ = 1;
  bool sample_sorted_ = false;
  std::vector<Candidate> heavy_;  // filled by the softmax pass
  double heavy_bound_ = 0, heavy_mass_ = 0;
  std::vector<int32_t> heap_;  // CollectTopK's buffer
};

}  // namespace m2::runtime
