// generation_config.json: a model's default sampling settings, as transformers'
// GenerationConfig reads them. Command-line flags override each field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "runtime/sampler.h"

namespace m2::runtime {

// The fields the engine uses; each is unset when the file does not give it.
struct GenerationConfig {
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::vector<int32_t> eos_token_ids;  // eos_token_id: an integer or a list; empty if absent

  // Sampling settings from these defaults. transformers samples only with do_sample true
  // (its default is false, i.e. greedy), so an unset or false do_sample gives
  // temperature 0 whatever "temperature" says. A field set to null counts as unset.
  SamplingParams ToSamplingParams() const;
};

// Parses the JSON of a generation_config.json; `what` names it in errors. Unknown fields
// are ignored (the file carries many the engine has no use for); fields it uses must
// have the right type and range.
Result<GenerationConfig> ParseGenerationConfig(const nlohmann::json& j, const std::string& what);

// DIR/generation_config.json. A folder without one has no defaults (not an error); a
// file that is there but unreadable or invalid is.
Result<GenerationConfig> LoadGenerationConfig(const std::string& model_dir);

}  // namespace m2::runtime
