// m2 generate: greedy decoding from token ids (text prompts arrive with the tokenizer).
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "model/model.h"

namespace m2::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::string ids;
  int max_tokens = 16;
  bool ignore_eos = false;
};

int32_t Argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

int Run(const GenerateOptions& o) {
  auto ids = ParseIdList(o.ids);
  if (!ids.ok()) return Fail(ids.status());
  auto model = Model::Load(o.model);
  if (!model.ok()) return Fail(model.status());
  Model& m = **model;
  const int64_t V = m.config().vocab_size;

  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch batch;
  for (size_t i = 0; i < ids->size(); ++i) batch.Add((*ids)[i], 0, i + 1 == ids->size());
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = m.Forward(batch, caches, logits);
  if (!st.ok()) return Fail(st);
  const auto t1 = std::chrono::steady_clock::now();

  std::vector<int32_t> out;
  for (int i = 0; i < o.max_tokens; ++i) {
    const int32_t next = Argmax(logits.data(), V);
    out.push_back(next);
    std::printf("%s%d", i ? "," : "", next);
    std::fflush(stdout);
    bool eos = false;
    for (int64_t e : m.config().eos_token_ids) eos |= (e == next);
    if ((eos && !o.ignore_eos) || i + 1 == o.max_tokens) break;
    batch = ForwardBatch();
    batch.Add(next, 0, true);
    logits.clear();
    st = m.Forward(batch, caches, logits);
    if (!st.ok()) return Fail(st);
  }
  std::printf("\n");
  std::fflush(stdout);
  const auto t2 = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s (%.1f tok/s)\n",
               ids->size(), prefill_s, ids->size() / prefill_s, out.size(), decode_s,
               out.size() > 1 ? (out.size() - 1) / decode_s : 0.0);
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Runner& run) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens greedily from a prompt given as token ids.");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors)")->required();
  cmd->add_option("--ids", o->ids, "Prompt token ids, comma separated (e.g. 1,2,3)")->required();
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Number of tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
