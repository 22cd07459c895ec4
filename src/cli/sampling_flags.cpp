#include "cli/sampling_flags.h"

#include <cstring>
#include <random>

#include <fmt/format.h>

#include "runtime/generation_config.h"

namespace m2::cli {

void AddSamplingFlags(CLI::App* cmd, SamplingFlags& f, const std::string& max_tokens_help) {
  f.temperature_opt = cmd->add_option("--temperature", f.temperature,
                                      "Sampling temperature; 0 = greedy (default: generation_config.json, else 0)");
  f.top_k_opt = cmd->add_option("--top-k", f.top_k, "Keep the K most probable tokens; 0 = off");
  f.top_p_opt = cmd->add_option("--top-p", f.top_p, "Nucleus sampling: keep the most probable tokens up to P; 1 = off");
  f.min_p_opt = cmd->add_option("--min-p", f.min_p, "Drop tokens below P times the most probable one; 0 = off");
  f.repeat_penalty_opt = cmd->add_option(
      "--repeat-penalty", f.repeat_penalty,
      "Repetition penalty over prompt and generated tokens (positive logits / R, negative * R); 1 = off");
  f.seed_opt = cmd->add_option("--seed", f.seed, "Random seed (default: a random one, printed at the end)");
  f.max_tokens_opt = cmd->add_option("-n,--max-tokens", f.max_tokens, max_tokens_help)->check(CLI::Range(1, 1 << 24));
  // Repeatable: each use appends one string (one argument each, so a stop may start with '-' only as --stop=-x).
  cmd->add_option("--stop", f.stop, "Stop when this text appears (not printed); repeatable")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  cmd->add_flag("--ignore-eos", f.ignore_eos, "Keep generating after an end-of-sequence token");
}

Result<ResolvedSampling> ResolveSampling(const SamplingFlags& f, const std::string& model_dir,
                                         const ModelConfig& config) {
  M2_ASSIGN_OR_RETURN(runtime::GenerationConfig g, runtime::LoadGenerationConfig(model_dir));
  ResolvedSampling r;
  r.params = g.ToSamplingParams();
  if (f.temperature_opt->count()) r.params.temperature = f.temperature;
  if (f.top_k_opt->count()) r.params.top_k = f.top_k;
  if (f.top_p_opt->count()) r.params.top_p = f.top_p;
  if (f.min_p_opt->count()) r.params.min_p = f.min_p;
  if (f.repeat_penalty_opt->count()) r.params.repetition_penalty = f.repeat_penalty;
  if (Status s = r.params.Validate(); !s.ok()) {
    // Name the flag spelling of the field.
    std::string msg = s.message();
    for (auto [field, flag] : {std::pair{"temperature", "--temperature"}, {"top_k", "--top-k"}, {"top_p", "--top-p"},
                               {"min_p", "--min-p"}, {"repetition_penalty", "--repeat-penalty"}})
      if (msg.rfind(field, 0) == 0) msg = std::string(flag) + " (or generation_config.json " + field + ")" + msg.substr(std::strlen(field));
    return Status::Error(msg);
  }
  r.seed_given = f.seed_opt->count() > 0;
  r.params.seed = r.seed_given ? f.seed : std::random_device{}();
  r.max_tokens = f.max_tokens_opt->count() ? f.max_tokens : g.max_new_tokens.value_or(256);
  if (!g.eos_token_ids.empty()) {
    r.eos_ids = g.eos_token_ids;
  } else {
    for (int64_t e : config.eos_token_ids) r.eos_ids.push_back(static_cast<int32_t>(e));
  }
  return r;
}

std::string DescribeSampling(const runtime::SamplingParams& p) {
  if (p.temperature == 0) {
    return p.repetition_penalty != 1 ? fmt::format("greedy, repeat-penalty {}", p.repetition_penalty) : "greedy";
  }
  std::string s = fmt::format("temperature {}", p.temperature);
  if (p.top_k > 0) s += fmt::format(", top-k {}", p.top_k);
  if (p.top_p < 1) s += fmt::format(", top-p {}", p.top_p);
  if (p.min_p > 0) s += fmt::format(", min-p {}", p.min_p);
  if (p.repetition_penalty != 1) s += fmt::format(", repeat-penalty {}", p.repetition_penalty);
  return s + fmt::format(", seed {}", p.seed);
}

}  // namespace m2::cli
