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
    double p;  // a logit until softmax, then a probability
    int32_t id;
  };
  // Steps 1-6: fills candidates_ with the kept tokens and their renormalized
  // probabilities, most probable first (greedy: the one chosen token with p = 1).
  void Filter(std::span<const float> logits, std::span<const int32_t> context);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  std::vector<uint8_t> seen_;  // per id: already penalized this step
};

}  // namespace m2::runtime
