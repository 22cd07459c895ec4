// The m2 program as a user runs it: exit codes, output, and errors for bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../model/golden_util.h"

namespace m2::testing {
namespace {

struct RunResult {
  int code;
  std::string out;  // stdout and stderr together
};

// `env`: assignments put before the command, e.g. "M2_KERNELS=avx2 ".
RunResult RunM2(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("M2_BINARY");
  const std::string cmd = env + std::string(bin ? bin : "build/src/cli/m2") + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';  // not `"," + std::to_string(...)`: GCC 12 warns there (-Wrestrict, bug 105329)
    s += std::to_string(ids[i]);
  }
  return s;
}

TEST(CliTest, HelpExplainsTheSubcommands) {
  auto r = RunM2("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"inspect", "generate", "logits"}) EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  r = RunM2("generate --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--max-tokens"), std::string::npos);
  r = RunM2("");
  EXPECT_NE(r.code, 0);
}

TEST(CliTest, InspectCountsParameters) {
  auto r = RunM2("inspect -m testdata/golden/tiny-fp8 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  // tiny-fp8: hidden 200, vocab 300, 2 layers, 6x32 q, 2x32 kv, 4 experts of 160, top-2.
  const int64_t H = 200, V = 300, L = 2, Q = 192, KV = 64, E = 4, I = 160;
  const int64_t per_layer_dense = 2 * H + Q * H + 2 * KV * H + H * Q + Q + KV + E * H + E;
  const int64_t experts = L * E * 3 * H * I;
  const int64_t total = 2 * V * H + H + L * per_layer_dense + experts;
  EXPECT_EQ(j["parameters_total"].get<int64_t>(), total);
  EXPECT_EQ(j["parameters_active_per_token"].get<int64_t>(), total - experts + experts * 2 / 4);
  EXPECT_TRUE(j["fp8"].get<bool>());
  EXPECT_GT(j["bytes_by_dtype"]["F8_E4M3"].get<int64_t>(), experts);  // + the attention projections
  r = RunM2("inspect -m testdata/golden/tiny-bf16-sharded --verify");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("GQA 4:1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("non-finite     0 values"), std::string::npos) << r.out;
}

// With exact activations (generate's default, auto, rounds FP8 and bf16 models' activations
// to bf16 where that is faster: AMX, AMD's AVX-512 BF16).
TEST(CliTest, GenerateMatchesTransformersGreedy) {
  for (const char* name : {"tiny-bf16-sharded", "tiny-fp8"}) {
    Golden g = LoadGolden(name);
    auto r = RunM2("generate -m testdata/golden/" + std::string(name) + " --ids " + Join(g.prompt) +
                   " -n 16 --ignore-eos --activations exact");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(Join(g.greedy) + "\n"), std::string::npos) << name << ": " << r.out;
  }
}

TEST(CliTest, LogitsJsonMatchesGoldenAndDumpsIntermediates) {
  Golden g = LoadGolden("tiny-f32-gqa6");
  const std::string dump = ::testing::TempDir() + "/m2_dump.safetensors";
  auto r = RunM2("logits -m testdata/golden/tiny-f32-gqa6 --ids " + Join(g.prompt) + " --dump " + dump);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find("{\"ids\"")));
  const auto want = g.Get("prompt_logits");
  ASSERT_EQ(j["logits"].size(), g.prompt.size());
  double worst = 0;
  for (size_t t = 0; t < g.prompt.size(); ++t)
    for (int64_t v = 0; v < g.vocab; ++v)
      worst = std::max(worst, std::fabs(j["logits"][t][v].get<double>() - want[t * g.vocab + v]));
  EXPECT_LE(worst, 1e-4 * g.logit_scale);
  auto f = SafetensorsFile::Open(dump);
  ASSERT_TRUE(f.ok()) << f.status().message();
  for (const char* n : {"embed", "layers.0.attn_norm", "layers.0.q", "layers.1.router_logits", "layers.1.out", "logits"})
    EXPECT_NE((*f)->Find(n), nullptr) << n;
}

TEST(CliTest, BadInputGivesClearErrors) {
  auto r = RunM2("generate -m testdata/no-such-model --ids 1,2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;
  r = RunM2("generate -m testdata/golden/tiny-fp8 --ids 1,x,3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'x'"), std::string::npos) << r.out;
  r = RunM2("logits -m testdata/golden/tiny-fp8 --ids 1,100000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
  r = RunM2("inspect -m testdata/golden/tiny-fp8/golden.json");  // a file that is not a config
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("architectures"), std::string::npos) << r.out;
}

// Arguments the benchmark cannot use are errors naming the flag, before any work.
TEST(CliTest, BenchArgumentErrors) {
  auto r = RunM2("bench -m models/m2-tiny --context 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--context: each decode context length must be at least 1, found 0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("check failed"), std::string::npos) << r.out;
  r = RunM2("bench -m models/m2-tiny --prefill 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--prefill: each prompt length must be at least 1, found 0"), std::string::npos) << r.out;
  r = RunM2("bench -m models/m2-tiny --prefill 128,x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--prefill: expected prompt lengths as positive integers"), std::string::npos) << r.out;
  r = RunM2("bench -m models/m2-tiny --competing-load -t 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("give -t 2 or more"), std::string::npos) << r.out;
  r = RunM2("bench --prefill 8");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("m2 bench needs a model folder: -m DIR"), std::string::npos) << r.out;
  r = RunM2("bench --probe -m models/m2-tiny");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("drop -m models/m2-tiny"), std::string::npos) << r.out;
}

// m2 bench --probe: the read probe alone, no model (what the llama.cpp comparison reads
// around each llama.cpp run).
TEST(CliTest, BenchProbeMeasuresTheMemoryAlone) {
  auto r = RunM2("bench --probe --json -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string key = "\"read_bandwidth_bytes_per_s\": ";
  const size_t at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(at + key.size())), 1e8) << r.out;  // more than 0.1 GB/s
  EXPECT_NE(r.out.find("\"threads\": 1"), std::string::npos) << r.out;
  r = RunM2("bench --probe -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("read bandwidth: "), std::string::npos) << r.out;
}

// m2 bench compares each decode step with reads of the weights just before and after it
// (--step-reads MiB of the output matrix, 256 by default): a small model's matrix holds
// less than the default and is not read (it would be read from the caches); asked for
// 1 MiB, every step gets its ratio.
TEST(CliTest, BenchReadsTheWeightsBetweenDecodeSteps) {
  const std::string args = "bench -m models/m2-tiny --prefill 8 --context 16,32 --decode-steps 3 --repeats 1 --no-scaling -t 2";
  auto r = RunM2(args + " --step-reads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("against reads of the weights between the steps (1 MiB of the output matrix"), std::string::npos)
      << r.out;
  for (const char* ctx : {"context 16: ", "context 32: "}) {
    const size_t at = r.out.find(std::string(ctx) + "");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("% of the read (median of 3 steps"), std::string::npos) << line;
    EXPECT_EQ(line.find("nan"), std::string::npos) << line;
  }
  r = RunM2(args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("against reads of the weights"), std::string::npos) << r.out;
  r = RunM2("bench -m models/m2-tiny --step-reads -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--step-reads"), std::string::npos) << r.out;
}

// A bad M2_KERNELS is an error that names the choices, whatever the command.
TEST(CliTest, UnknownKernelsValueIsAnError) {
  auto r = RunM2("logits -m testdata/golden/tiny-fp8 --ids 1,2", "M2_KERNELS=avx3 ");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("M2_KERNELS: expected portable, avx2, avxvnni or avx512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'avx3'"), std::string::npos) << r.out;
  r = RunM2("logits -m testdata/golden/tiny-fp8 --ids 1,2", "M2_KERNELS=portable ");
  EXPECT_EQ(r.code, 0) << r.out;
}

// -t/--threads on every command that runs the model.
TEST(CliTest, EveryModelCommandTakesThreads) {
  for (const char* cmd : {"generate", "chat", "serve", "bench", "perplexity", "logits", "quantize"}) {
    auto r = RunM2(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.out.find("-t,--threads"), std::string::npos) << cmd << ":\n" << r.out;
  }
  auto one = RunM2("logits -m testdata/golden/tiny-fp8 --ids 1,2,3 -t 1");
  auto three = RunM2("logits -m testdata/golden/tiny-fp8 --ids 1,2,3 --threads 3");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.out, three.out);
}

}  // namespace
}  // namespace m2::testing
