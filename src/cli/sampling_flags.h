// Sampling flags shared by `m2 generate` and `m2 chat`, and how they combine with the
// model folder's generation_config.json: a flag given wins, else the file's value, else
// the engine's default (greedy when the file does not ask for sampling, as transformers).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "runtime/sampler.h"

namespace m2::cli {

struct SamplingFlags {
  double temperature = 0, top_p = 1, min_p = 0, repeat_penalty = 1;
  int64_t top_k = 0, max_tokens = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Which were given.
  CLI::Option *temperature_opt = nullptr, *top_p_opt = nullptr, *min_p_opt = nullptr, *repeat_penalty_opt = nullptr,
              *top_k_opt = nullptr, *max_tokens_opt = nullptr, *seed_opt = nullptr;
};

// Registers --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --seed,
// -n/--max-tokens, --stop (repeatable), --ignore-eos. `max_tokens_help` says what -n counts.
void AddSamplingFlags(CLI::App* cmd, SamplingFlags& flags, const std::string& max_tokens_help);

struct ResolvedSampling {
  runtime::SamplingParams params;
  int64_t max_tokens = 256;
  std::vector<int32_t> eos_ids;
  bool seed_given = false;
};

// Flags over generation_config.json (in `model_dir`, if there) over defaults; eos ids
// from generation_config.json, else config.json. Errors name the flag or field.
Result<ResolvedSampling> ResolveSampling(const SamplingFlags& flags, const std::string& model_dir,
                                         const ModelConfig& config);

// "temperature 0.7, top-k 40, top-p 0.95, seed 123" - for the stats line, so a run can be
// repeated.
std::string DescribeSampling(const runtime::SamplingParams& p);

}  // namespace m2::cli
