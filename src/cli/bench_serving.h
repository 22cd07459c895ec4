// m2 bench's serving sections (through runtime::Engine): batched decode of several
// streams, the prefix cache on a scripted multi-turn conversation, and the cost of
// sampling at the model's vocabulary.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_util.h"
#include "kernels/attention.h"
#include "model/model.h"

namespace m2::cli {

// For each stream count S: S sequences at `context` tokens decode together; the median
// of `steps` steps. Reports aggregate and per-stream tokens/s and the bytes a step reads
// (shared weights once, each expert run once, every stream's KV) against `bandwidth`.
nlohmann::json BenchStreams(Model& m, const Costs& costs, const std::vector<int32_t>& streams, int64_t context,
                            int steps, KvDtype dtype, double bandwidth);
// A conversation of `turns` turns on a `system_tokens` prefix (each turn adds ~60 tokens
// and a 16-token reply), time to first token per turn with the prefix cache on and off;
// then a second conversation sharing only the system prefix.
nlohmann::json BenchPrefixCache(Model& m, int64_t system_tokens, int turns, KvDtype dtype);
// Microseconds per Sampler::Sample at the model's vocabulary, per setting, and as a share
// of `decode_step_seconds`.
nlohmann::json BenchSampling(int64_t vocab, double decode_step_seconds);

}  // namespace m2::cli
