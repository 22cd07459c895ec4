// m2 bench --spec lookup: speculative decoding against plain decoding on the same
// prompts, through the serving engine: code to continue, a chat answer, and an edit task
// (the model asked to reproduce a given file with a small change), each at temperature 0
// and 1 (seeded). Per case: tokens/s of both, mean tokens per verification step, drafts
// accepted, and whether the outputs are the same (they must be: speculative.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_spec.h"
#include "model/kv_cache.h"
#include "runtime/engine.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct Task {
  const char* name;
  std::string prompt;
};

std::vector<Task> Tasks() {
  const std::string file =
      "import json\nimport os\n\n\nclass Store:\n    def __init__(self, path):\n        self.path = path\n"
      "        self.items = {}\n\n    def load(self):\n        if os.path.exists(self.path):\n"
      "            with open(self.path) as f:\n                self.items = json.load(f)\n\n"
      "    def save(self):\n        with open(self.path, \"w\") as f:\n            json.dump(self.items, f)\n\n"
      "    def get(self, key, default=None):\n        return self.items.get(key, default)\n\n"
      "    def put(self, key, value):\n        self.items[key] = value\n        self.save()\n";
  return {
      {"code", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"},
      {"chat", "]~b]user\nWhat does a hash map do, and when would I use one instead of a list?[e~[\n]~b]ai\n"},
      {"edit", "Here is store.py:\n```python\n" + file +
                   "```\nRewrite store.py with the method `put` renamed to `set`. Reply with the whole file.\n"
                   "```python\n"},
  };
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The cost of verification: one forward pass of k tokens (the last id and k - 1 drafts,
// logits for each) for one sequence at context 128, against k = 1 (plain decoding). On a
// memory-bound MoE the extra tokens cost little weight traffic except the experts they
// add: distinct experts per layer are counted.
nlohmann::json VerifyCost(Model& m, int max_draft, int repeats) {
  const ModelConfig& c = m.config();
  constexpr int64_t kContext = 128;
  KvBlockPool pool(m.cache_layout(16, false, KvDtype::kBf16), (kContext + max_draft + 32) / 16 + 2);
  SequenceCache cache(&pool);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  ForwardBatch b;
  for (int64_t i = 0; i < kContext; ++i) b.Add(tok(rng), 0, i + 1 == kContext);
  std::vector<float> logits;
  SequenceCache* caches[] = {&cache};
  if (Status st = m.Forward(b, caches, logits); !st.ok()) return {{"error", st.message()}};
  nlohmann::json rows = nlohmann::json::array();
  std::vector<int> ks = {1, 2, 3, 5, max_draft + 1};
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  double one = 0;
  for (int k : ks) {
    if (k > max_draft + 1) continue;
    std::fprintf(stderr, "verification cost: %d tokens at context %lld...\n", k, (long long)kContext);
    std::vector<double> times;
    double experts = 0;
    for (int r = 0; r < repeats + 1; ++r) {
      ForwardBatch v;
      for (int i = 0; i < k; ++i) v.Add(tok(rng), 0, true);
      logits.clear();
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = m.Forward(v, caches, logits); !st.ok()) return {{"error", st.message()}};
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) times.push_back(s), experts += static_cast<double>(m.experts_run_last_forward());  // r = 0 warms up
      if (Status st = cache.Truncate(kContext); !st.ok()) return {{"error", st.message()}};
    }
    const double t = MedianOf(times);
    if (k == 1) one = t;
    rows.push_back({{"tokens", k},
                    {"seconds", t},
                    {"relative_to_one", one > 0 ? t / one : 0},
                    {"experts_per_layer", experts / repeats / c.num_hidden_layers}});
  }
  return rows;
}

}  // namespace

int RunSpecBench(Model& m, const std::string& model_dir, const runtime::SpecOptions& spec, int tokens, bool json) {
  const nlohmann::json cost = VerifyCost(m, spec.draft, 5);
  if (cost.is_object()) {
    std::fprintf(stderr, "error: the verification-cost run FAILED: %s\n", cost.dump().c_str());
    return 1;
  }
  auto print_cost = [&] {
    std::printf("verification cost at context 128 (one sequence; %lld experts per token of %lld):\n%-8s %12s %14s %16s\n",
                (long long)m.config().num_experts_per_tok, (long long)m.config().num_local_experts, "tokens",
                "ms", "vs 1 token", "experts/layer");
    for (const auto& r : cost)
      std::printf("%-8d %12.2f %13.2fx %16.1f\n", r["tokens"].get<int>(), 1e3 * r["seconds"].get<double>(),
                  r["relative_to_one"].get<double>(), r["experts_per_layer"].get<double>());
    std::printf("speedup of a verification step that yields T tokens: T / (cost of draft + 1 tokens vs 1)\n");
  };
  auto tok = text::Tokenizer::Load(model_dir);
  if (!tok.ok()) {
    // A benchmark slice has no tokenizer: the verification cost alone.
    if (json) std::printf("%s\n", nlohmann::json{{"verification_cost", cost}}.dump(2).c_str());
    else print_cost(), std::printf("(no tokenizer in %s: the acceptance runs need one; %s)\n", model_dir.c_str(),
                                   tok.status().message().c_str());
    return 0;
  }
  runtime::EngineOptions eo;
  eo.prefix_cache = false;
  eo.spec = spec;  // (mtp: the pool holds the modules' caches)
  auto engine = runtime::Engine::Create(m, tok->get(), eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return 1;
  }
  nlohmann::json rows = nlohmann::json::array();
  bool all_same = true;
  for (const Task& t : Tasks()) {
    const std::vector<int32_t> ids = (*tok)->Encode(t.prompt, true);
    for (double temp : {0.0, 1.0}) {
      std::fprintf(stderr, "speculative decoding: %s at temperature %.0f...\n", t.name, temp);
      runtime::GenerationResult res[2];
      for (int with = 0; with < 2; ++with) {
        runtime::Request r;
        r.prompt = ids;
        r.sampling.temperature = temp;
        r.sampling.seed = 7;
        r.options.max_new_tokens = tokens;
        r.options.ignore_eos = true;
        runtime::SpecOptions s = spec;
        if (with == 0) s.mode = runtime::SpecMode::kOff;
        r.spec = s;
        auto out = (*engine)->Generate(std::move(r));
        if (!out.ok()) {
          std::fprintf(stderr, "error: the %s run FAILED: %s\n", t.name, out.status().message().c_str());
          return 1;
        }
        res[with] = std::move(*out);
      }
      const auto& p = res[0].stats;
      const auto& s = res[1].stats;
      const bool same = res[0].tokens == res[1].tokens;
      all_same = all_same && same;
      rows.push_back({{"task", t.name},
                      {"temperature", temp},
                      {"plain_tokens_per_s", p.decode_tokens_per_second()},
                      {"spec_tokens_per_s", s.decode_tokens_per_second()},
                      {"speedup", p.decode_tokens_per_second() > 0 ? s.decode_tokens_per_second() / p.decode_tokens_per_second() : 0},
                      {"tokens_per_step", s.decode_steps > 0 ? double(s.generated_tokens - 1) / double(s.decode_steps) : 0},
                      {"drafted", s.draft_tokens},
                      {"accepted", s.accepted_tokens},
                      {"same_output", same}});
    }
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"speculative", {{"mode", runtime::SpecModeName(spec.mode)}, {"draft", spec.draft},
                                                         {"tokens", tokens}, {"cases", rows}}},
                                        {"verification_cost", cost}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("speculative decoding (%s, draft %d), %d tokens per case, against plain decoding:\n",
                runtime::SpecModeName(spec.mode), spec.draft, tokens);
    std::printf("%-6s %5s %12s %12s %9s %14s %16s %6s\n", "task", "temp", "plain tok/s", "spec tok/s", "speedup",
                "tokens/step", "accepted/drafted", "same");
    for (const auto& r : rows)
      std::printf("%-6s %5.0f %12.1f %12.1f %8.2fx %14.2f %8lld/%-7lld %6s\n", r["task"].get<std::string>().c_str(),
                  r["temperature"].get<double>(), r["plain_tokens_per_s"].get<double>(),
                  r["spec_tokens_per_s"].get<double>(), r["speedup"].get<double>(), r["tokens_per_step"].get<double>(),
                  (long long)r["accepted"].get<int64_t>(), (long long)r["drafted"].get<int64_t>(),
                  r["same_output"].get<bool>() ? "yes" : "NO");
    print_cost();
  }
  if (!all_same) {
    std::fprintf(stderr, "error: speculative decoding changed an output (see the table): this is a bug\n");
    return 1;
  }
  return 0;
}

}  // namespace m2::cli
