// m2 generate (text, ids, stop strings, seeds, generation_config.json), m2 chat (piped
// stdin, turns, saved history, tools), m2 perplexity (against a direct computation), and
// their errors, run as a user runs them. Tests on the trained models/m2-tiny run only when
// it is there.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/cpu.h"
#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "kernels/attention.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"
#include "model/model.h"
#include "runtime/perplexity.h"
#include "test_model.h"
#include "text/tokenizer.h"

namespace m2::testing {
namespace {

struct Run {
  int code;
  std::string out;  // standard output only
  std::string err;
};

// Runs `m2 args` with standard input from `input` (when given).
Run M2(const std::string& args, const std::string& input = "") {
  const char* bin = std::getenv("M2_BINARY");
  const std::string tmp = ::testing::TempDir() + "/m2_rt_cli_" + std::to_string(getpid());
  const std::string in = tmp + ".in", err = tmp + ".err";
  WriteFile(in, input);
  const std::string cmd = std::string(bin ? bin : "build/src/cli/m2") + " " + args + " <" + in + " 2>" + err;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "", ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  auto e = ReadTextFile(err);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, e.ok() ? *e : ""};
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<int32_t> ParseIds(const std::string& line) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size() && line[i] != '\n') {
    size_t j = i;
    while (j < line.size() && line[j] != ',' && line[j] != '\n') ++j;
    ids.push_back(std::stoi(line.substr(i, j - i)));
    i = line[j] == ',' ? j + 1 : j;
  }
  return ids;
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';  // not `"," + std::to_string(...)`: GCC 12 warns there (-Wrestrict, bug 105329)
    s += std::to_string(ids[i]);
  }
  return s;
}

class RuntimeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTestModel("cli"));
    auto t = text::Tokenizer::Load(*dir_);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete dir_;
  }
  static std::string* dir_;
  static text::Tokenizer* tok_;
};
std::string* RuntimeCli::dir_ = nullptr;
text::Tokenizer* RuntimeCli::tok_ = nullptr;

TEST_F(RuntimeCli, GenerateTextEqualsTheDecodedIdsOfTheSameRun) {
  const std::string prompt = "The quick brown fox";
  auto text = M2("generate -m " + *dir_ + " -p " + Quote(prompt) + " -n 20 --temperature 0 --ignore-eos");
  ASSERT_EQ(text.code, 0) << text.err;
  auto ids = M2("generate -m " + *dir_ + " --ids " + Join(tok_->Encode(prompt)) + " -n 20 --temperature 0 --ignore-eos");
  ASSERT_EQ(ids.code, 0) << ids.err;
  const auto gen = ParseIds(ids.out);
  ASSERT_EQ(gen.size(), 20u) << ids.out;
  EXPECT_EQ(text.out, tok_->Decode(gen));  // piped: exactly the text, no newline added
  EXPECT_NE(text.err.find("generated 20 tokens"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("tok/s"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("sampling: greedy"), std::string::npos) << text.err;

  // -f reads the prompt from a file, "-" from standard input.
  const std::string file = ::testing::TempDir() + "/m2_rt_prompt.txt";
  WriteFile(file, prompt);
  auto from_file = M2("generate -m " + *dir_ + " -f " + file + " -n 20 --temperature 0 --ignore-eos");
  EXPECT_EQ(from_file.out, text.out);
  auto from_stdin = M2("generate -m " + *dir_ + " -f - -n 20 --temperature 0 --ignore-eos", prompt);
  EXPECT_EQ(from_stdin.out, text.out);
}

TEST_F(RuntimeCli, GenerateStopStringEndsTheOutputBeforeIt) {
  auto full = M2("generate -m " + *dir_ + " -p 'Hello' -n 40 --temperature 0 --ignore-eos");
  ASSERT_EQ(full.code, 0) << full.err;
  ASSERT_GT(full.out.size(), 10u);
  // Two ASCII-safe stops: a character from the middle of the output, and one never seen.
  size_t at = full.out.size() / 2;
  while (at < full.out.size() && static_cast<unsigned char>(full.out[at]) >= 0x80) ++at;
  ASSERT_LT(at, full.out.size()) << "no ASCII character in the second half";
  const std::string stop = full.out.substr(at, 1);
  auto cut = M2("generate -m " + *dir_ + " -p 'Hello' -n 40 --temperature 0 --ignore-eos --stop " + Quote(stop) +
                " --stop '@@never@@'");
  ASSERT_EQ(cut.code, 0) << cut.err;
  EXPECT_EQ(cut.out, full.out.substr(0, full.out.find(stop)));
  EXPECT_NE(cut.err.find("stopped: stop_string"), std::string::npos) << cut.err;
}

TEST_F(RuntimeCli, GenerateSeedsAreReproducible) {
  const std::string base = "generate -m " + *dir_ + " -p 'Seeds' -n 24 --ignore-eos --temperature 1.0 --top-p 0.95";
  auto a = M2(base + " --seed 1234");
  auto b = M2(base + " --seed 1234");
  auto c = M2(base + " --seed 4321");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.err.find("seed 1234"), std::string::npos) << a.err;
  // --ids output is the same run, as ids.
  auto ids = M2("generate -m " + *dir_ + " --ids " + Join(tok_->Encode("Seeds")) +
                " -n 24 --ignore-eos --temperature 1.0 --top-p 0.95 --seed 1234");
  EXPECT_EQ(tok_->Decode(ParseIds(ids.out)), a.out);
}

TEST_F(RuntimeCli, GenerateUsesGenerationConfigDefaultsAndFlagsOverrideThem) {
  const std::string dir = MakeTestModel(
      "cli_gc", "tiny-f32-gqa6", R"({"do_sample": true, "temperature": 0.8, "top_k": 40, "max_new_tokens": 5})");
  auto r = M2("generate -m " + dir + " -p 'x' --ignore-eos --seed 9");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("generated 5 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("temperature 0.8, top-k 40, seed 9"), std::string::npos) << r.err;
  r = M2("generate -m " + dir + " -p 'x' --ignore-eos -n 3 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("generated 3 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sampling: greedy"), std::string::npos) << r.err;
}

TEST_F(RuntimeCli, GenerateChatWrapsThePromptAsAUserTurn) {
  // --chat equals the rendered turn given as a raw prompt.
  auto chat = M2("generate -m " + *dir_ + " -p 'Hi there' --chat --system 'Be kind.' -n 12 --temperature 0");
  ASSERT_EQ(chat.code, 0) << chat.err;
  const std::string rendered = "]~!b[]~b]system\nBe kind.[e~[\n]~b]user\nHi there[e~[\n]~b]ai\n<think>\n";
  auto raw = M2("generate -m " + *dir_ + " -f - -n 12 --temperature 0", rendered);
  ASSERT_EQ(raw.code, 0) << raw.err;
  // Same tokens unless the raw run met "[e~[", which only --chat treats as the end.
  EXPECT_EQ(raw.out.rfind(chat.out, 0), 0u) << "chat: " << chat.out << "\nraw: " << raw.out;
}

TEST_F(RuntimeCli, GenerateErrorsAreClear) {
  auto r = M2("generate -m testdata/golden/tiny-fp8 -p 'hi'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  r = M2("generate -m " + *dir_ + " -p hi --ids 1,2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("one way"), std::string::npos) << r.err;
  r = M2("generate -m " + *dir_);
  EXPECT_EQ(r.code, 1);
  r = M2("generate -m " + *dir_ + " -p hi --top-p 1.5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--top-p"), std::string::npos) << r.err;
  r = M2("generate -m " + *dir_ + " -p hi --temperature warm");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("temperature"), std::string::npos) << r.err;
  r = M2("generate -m testdata/golden/tiny-fp8 --ids 1,2 --stop x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  const std::string broken = MakeTestModel("cli_gc_broken", "tiny-f32-gqa6", R"({"top_k": "many"})");
  r = M2("generate -m " + broken + " -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("generation_config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("top_k: expected an integer, found \"many\""), std::string::npos) << r.err;
  // A tokenizer.json that is not JSON.
  const std::string badtok = MakeTestModel("cli_badtok", "tiny-f32-gqa6", "", /*with_tokenizer=*/false);
  WriteFile(badtok + "/tokenizer.json", "{not json");
  r = M2("generate -m " + badtok + " -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
}

TEST_F(RuntimeCli, ChatFromAPipeKeepsTheHistoryWithReasoning) {
  const std::string history = ::testing::TempDir() + "/m2_rt_history.json";
  std::filesystem::remove(history);
  auto r = M2("chat -m " + *dir_ + " -n 10 --temperature 1 --seed 5 --system 'You are terse.' --save-history " + history,
              "Hello\nWhat next?\n/exit\nnot read\n");
  ASSERT_EQ(r.code, 0) << r.err;
  // Two replies, each with statistics on stderr; reasoning marked on a pipe.
  size_t stats = 0;
  for (size_t at = r.err.find("[stats]"); at != std::string::npos; at = r.err.find("[stats]", at + 1)) ++stats;
  EXPECT_EQ(stats, 2u) << r.err;
  EXPECT_NE(r.out.find("[thinking] "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("reused from the cache"), std::string::npos) << r.err;  // the second turn

  auto text = ReadTextFile(history);
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto j = chat::ParseOrderedJson(*text, "history");
  ASSERT_TRUE(j.ok());
  const chat::Json& m = (*j)["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0]["content"], "You are terse.");
  EXPECT_EQ(m[1]["content"], "Hello");
  EXPECT_EQ(m[3]["content"], "What next?");
  for (int i : {2, 4}) {
    EXPECT_EQ(m[i]["role"], "assistant");
    ASSERT_TRUE(m[i]["reasoning_content"].is_string());
    ASSERT_TRUE(m[i]["content"].is_string());
  }
  // What was shown is what was stored: each reply's reasoning appears after "[thinking] ".
  const std::string r1 = m[2]["reasoning_content"].get<std::string>();
  if (!r1.empty()) { EXPECT_NE(r.out.find("[thinking] " + r1), std::string::npos) << r.out; }
  // The saved history is a valid request for `m2 render`, and the template shows the last
  // reply's reasoning (after the last user turn).
  auto rendered = M2("render --no-generation-prompt " + history);
  ASSERT_EQ(rendered.code, 0) << rendered.err;
  const std::string r2 = m[4]["reasoning_content"].get<std::string>();
  if (!r2.empty()) { EXPECT_NE(rendered.out.find("<think>\n" + r2 + "\n</think>"), std::string::npos) << rendered.out; }
}

TEST_F(RuntimeCli, ChatRunsShellTools) {
  // The random model will not call tools by itself; check that --tools loads, that the
  // command is hidden from the model, and that bad tool files are clear errors.
  const std::string tools = ::testing::TempDir() + "/m2_rt_tools.json";
  WriteFile(tools, R"([{"type": "function", "command": "cat",
    "function": {"name": "echo", "description": "Echo", "parameters": {"type": "object", "properties": {}}}}])");
  const std::string history = ::testing::TempDir() + "/m2_rt_tools_history.json";
  auto r = M2("chat -m " + *dir_ + " -n 4 --temperature 0 --tools " + tools + " --save-history " + history, "Hi\n");
  ASSERT_EQ(r.code, 0) << r.err;
  auto text = ReadTextFile(history);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("\"echo\""), std::string::npos);
  EXPECT_EQ(text->find("\"command\""), std::string::npos) << *text;

  WriteFile(tools, R"([{"type": "function", "function": {"name": "echo"}}])");
  r = M2("chat -m " + *dir_ + " --tools " + tools, "Hi\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("\"command\""), std::string::npos) << r.err;
  r = M2("chat -m " + *dir_ + " --tools /no/such/file.json", "Hi\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/no/such/file.json"), std::string::npos) << r.err;
  r = M2("chat -m testdata/golden/tiny-fp8", "Hi\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
}

TEST_F(RuntimeCli, PerplexityMatchesADirectComputation) {
  const std::string file = ::testing::TempDir() + "/m2_rt_ppl.txt";
  const std::string text = "The cat sat on the mat. It was a sunny day, and the birds were singing.";
  WriteFile(file, text);
  auto r = M2("perplexity -m " + *dir_ + " -f " + file + " --context 16 --stride 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto ids = tok_->Encode(text, /*parse_special=*/false);
  EXPECT_EQ(j["tokens"].get<int64_t>(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(j["context"], 16);
  EXPECT_EQ(j["stride"], 8);
  // Independently: fresh forward passes over each token's window (see perplexity.h),
  // log-softmax in long double.
  auto model = Model::Load(*dir_, {.progress = false});
  ASSERT_TRUE(model.ok());
  const int64_t n = static_cast<int64_t>(ids.size());
  long double sum = 0;
  int64_t scored = 0, done = 1;
  for (int64_t begin = 0;; begin += 8) {
    const int64_t end = std::min<int64_t>(n, begin + 16);
    KvBlockPool pool((*model)->cache_layout());
    SequenceCache cache(&pool);
    SequenceCache* caches[] = {&cache};
    ForwardBatch b;
    for (int64_t i = begin; i < end; ++i) b.Add(ids[i], 0, true);
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(b, caches, logits).ok());
    const int64_t V = (*model)->config().vocab_size;
    for (int64_t t = std::max(done, begin + 1); t < end; ++t, ++scored) {
      const float* row = &logits[(t - 1 - begin) * V];
      long double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<long double>(row[v]));
      sum += std::log(z) - row[ids[t]];
    }
    done = end;
    if (end == n) break;
  }
  EXPECT_EQ(j["scored_tokens"].get<int64_t>(), scored);
  const double want = std::exp(static_cast<double>(sum / scored));
  EXPECT_NEAR(j["perplexity"].get<double>(), want, 1e-6 * want);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);

  auto plain = M2("perplexity -m " + *dir_ + " -f " + file + " --context 16 --stride 8");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("perplexity "), std::string::npos);
  EXPECT_NE(plain.out.find("tok/s"), std::string::npos);

  auto bad = M2("perplexity -m " + *dir_ + " -f " + file + " --context 8 --stride 9");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("stride"), std::string::npos) << bad.err;
  WriteFile(file, "a");
  bad = M2("perplexity -m " + *dir_ + " -f " + file);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("at least 2 tokens"), std::string::npos) << bad.err;
}

// --reference: a q4 copy of the model against the model itself; the mean KL and the top-1
// agreement recomputed from both models' logits in long double.
TEST_F(RuntimeCli, PerplexityAgainstAReference) {
  const std::string file = ::testing::TempDir() + "/m2_rt_ppl_ref.txt";
  const std::string text = "The cat sat on the mat. It was a sunny day, and the birds were singing.";
  WriteFile(file, text);
  const std::string q4 = ::testing::TempDir() + "/m2_rt_q4_" + std::to_string(getpid());
  auto q = M2("quantize -m " + *dir_ + " -o " + q4 + " --type q4");
  ASSERT_EQ(q.code, 0) << q.err;
  auto r = M2("perplexity -m " + q4 + " --reference " + *dir_ + " -f " + file + " --context 128 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("reference")) << r.out;
  auto base = M2("perplexity -m " + *dir_ + " -f " + file + " --context 128 --json");
  ASSERT_EQ(base.code, 0) << base.err;
  EXPECT_DOUBLE_EQ(j["reference"]["perplexity"].get<double>(), nlohmann::json::parse(base.out)["perplexity"].get<double>());

  const auto ids = tok_->Encode(text, /*parse_special=*/false);
  auto rows = [&](const std::string& dir) {
    auto m = Model::Load(dir, {.progress = false});
    EXPECT_TRUE(m.ok());
    KvBlockPool pool((*m)->cache_layout());
    SequenceCache cache(&pool);
    SequenceCache* caches[] = {&cache};
    ForwardBatch b;
    for (size_t i = 0; i + 1 < ids.size(); ++i) b.Add(ids[i], 0, true);
    std::vector<float> logits;
    EXPECT_TRUE((*m)->Forward(b, caches, logits).ok());
    return logits;
  };
  const auto lp = rows(*dir_), lq = rows(q4);
  const size_t V = lp.size() / (ids.size() - 1);
  long double kl_sum = 0;
  int agree = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* p = &lp[t * V];
    const float* qq = &lq[t * V];
    long double zp = 0, zq = 0;
    for (size_t v = 0; v < V; ++v) zp += std::exp(static_cast<long double>(p[v])), zq += std::exp(static_cast<long double>(qq[v]));
    for (size_t v = 0; v < V; ++v) {
      const long double a = p[v] - std::log(zp), b = qq[v] - std::log(zq);
      kl_sum += std::exp(a) * (a - b);
    }
    agree += std::max_element(p, p + V) - p == std::max_element(qq, qq + V) - qq;
  }
  const double kl = static_cast<double>(kl_sum / static_cast<long double>(ids.size() - 1));
  EXPECT_GT(kl, 0.0);  // q4 changes the weights
  EXPECT_NEAR(j["reference"]["mean_kl"].get<double>(), kl, 1e-4 * kl + 1e-9);
  EXPECT_NEAR(j["reference"]["top1_agreement"].get<double>(), agree / static_cast<double>(ids.size() - 1), 1e-12);
  EXPECT_LE(j["reference"]["kl_p99"].get<double>(), j["reference"]["max_kl"].get<double>());

  auto plain = M2("perplexity -m " + q4 + " --reference " + *dir_ + " -f " + file + " --context 64");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("KL(reference || model): mean"), std::string::npos) << plain.out;
  auto bad = M2("perplexity -m " + q4 + " --reference testdata/golden/tiny-fp8 -f " + file);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("vocabulary size"), std::string::npos) << bad.err;
  std::filesystem::remove_all(q4);
}

// --activations int8 on a q4 copy: the int8-activation path measured against the same
// weights with exact activations (--reference-activations exact). Its KL is positive (the
// path really runs) and far below the q4 weights' own cost against the fp32 model; the
// flag is refused on a model without q8 / q4 weights and with an unknown value.
TEST_F(RuntimeCli, Int8ActivationsAgainstTheExactPath) {
  const std::string file = ::testing::TempDir() + "/m2_rt_int8.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string q4 = ::testing::TempDir() + "/m2_rt_int8_q4_" + std::to_string(getpid());
  auto q = M2("quantize -m " + *dir_ + " -o " + q4 + " --type q4");
  ASSERT_EQ(q.code, 0) << q.err;
  auto fast = M2("perplexity -m " + q4 + " --activations int8 --reference " + q4 + " -f " + file + " --context 128 --json");
  ASSERT_EQ(fast.code, 0) << fast.err;
  auto jf = nlohmann::json::parse(fast.out);
  EXPECT_EQ(jf["activations"], "int8");
  EXPECT_EQ(jf["reference"]["activations"], "exact");
  auto weights = M2("perplexity -m " + q4 + " --reference " + *dir_ + " -f " + file + " --context 128 --json");
  ASSERT_EQ(weights.code, 0) << weights.err;
  auto jw = nlohmann::json::parse(weights.out);
  const double kl_int8 = jf["reference"]["mean_kl"].get<double>(), kl_q4 = jw["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl_int8, 0.0);
  EXPECT_LT(kl_int8, 0.5 * kl_q4) << "int8 activations " << kl_int8 << " vs q4 weights " << kl_q4;
  std::printf("KL: int8 activations %.6f, q4 weights %.6f\n", kl_int8, kl_q4);
  EXPECT_GE(jf["reference"]["top1_agreement"].get<double>(), 0.7);  // a random model: flat logits, close calls

  auto gen = M2("generate -m " + q4 + " --activations int8 -p \"def add(a, b):\" -n 8 --temperature 0");
  EXPECT_EQ(gen.code, 0) << gen.err;
  auto bad = M2("perplexity -m " + *dir_ + " --activations int8 -f " + file);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("q8 or q4"), std::string::npos) << bad.err;
  bad = M2("generate -m " + q4 + " --activations fp4 -p hi -n 1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("fp4"), std::string::npos) << bad.err;
  std::filesystem::remove_all(q4);
}

// --activations bf16: where the CPU has AVX-512 BF16, the bundled (bf16) model's prompt goes
// through the bf16 GEMM, whose KL against the exact path is positive (it runs) and small; the top
// token of nearly every position is unchanged; the same on a q4 copy, alone and with int8
// decoding. Elsewhere the flag is an error naming what is missing.
TEST_F(RuntimeCli, Bf16ActivationsAgainstTheExactPath) {
  const std::string file = ::testing::TempDir() + "/m2_rt_bf16.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string model = "models/m2-tiny";
  auto run = M2("perplexity -m " + model + " --activations bf16 --reference " + model + " -f " + file + " --context 128 --json");
  if (!Bf16GemmAvailable()) {
    EXPECT_EQ(run.code, 1);
    EXPECT_NE(run.err.find("AVX-512 BF16"), std::string::npos) << run.err;
    GTEST_SKIP() << "no AVX-512 BF16 here: the refusal was checked";
  }
  ASSERT_EQ(run.code, 0) << run.err;
  auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["activations"], "bf16");
  const double kl = j["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl, 0.0);
  EXPECT_LT(kl, 0.01);  // 0.0024 on this short text; 0.00023 over the held-out code (README)
  EXPECT_GE(j["reference"]["top1_agreement"].get<double>(), 0.9);
  std::printf("KL: bf16 activations %.3g, top-1 agreement %.4f\n", kl, j["reference"]["top1_agreement"].get<double>());
  auto gen = M2("generate -m " + model + " --activations bf16 -p \"def add(a, b):\" -n 8 --temperature 0");
  EXPECT_EQ(gen.code, 0) << gen.err;
  // q4 weights: bf16 prefill, and int8 decode + bf16 prefill; int8 needs q8 / q4 weights.
  const std::string q4 = ::testing::TempDir() + "/m2_rt_bf16_q4_" + std::to_string(getpid());
  ASSERT_EQ(M2("quantize -m " + model + " -o " + q4 + " --type q4").code, 0);
  for (const char* mode : {"bf16", "int8+bf16"}) {
    auto q = M2("perplexity -m " + q4 + " --activations " + mode + " --reference " + q4 + " -f " + file +
                " --context 128 --json");
    ASSERT_EQ(q.code, 0) << q.err;
    const double kl_q4 = nlohmann::json::parse(q.out)["reference"]["mean_kl"].get<double>();
    EXPECT_GT(kl_q4, 0.0) << mode;
    EXPECT_LT(kl_q4, 0.01) << mode;
  }
  auto bad = M2("generate -m " + model + " --activations int8+bf16 -p hi -n 1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("q8 or q4"), std::string::npos) << bad.err;
  std::filesystem::remove_all(q4);
}

// --attention: bf16 products cost a little KL against exact attention on the bundled model
// (same weights and activations, bf16 cache on both sides); auto gives them only where the
// activations are not exact; bf16 is refused with an fp32 cache, and on a CPU without
// AVX-512 BF16 (or other kernels chosen).
TEST_F(RuntimeCli, Bf16AttentionAgainstTheExactPath) {
  const std::string file = ::testing::TempDir() + "/m2_rt_attn.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string model = "models/m2-tiny", common = " -f " + file + " --context 128 --json";
  auto f32 = M2("perplexity -m " + model + " --attention bf16" + common);
  EXPECT_EQ(f32.code, 1);
  EXPECT_NE(f32.err.find("--kv-dtype f32"), std::string::npos) << f32.err;
  auto exact = M2("perplexity -m " + model + " --kv-dtype bf16" + common);  // auto, exact activations
  ASSERT_EQ(exact.code, 0) << exact.err;
  EXPECT_EQ(nlohmann::json::parse(exact.out)["attention"], "exact");
  auto run = M2("perplexity -m " + model + " --attention bf16 --kv-dtype bf16 --reference " + model +
                " --reference-kv-dtype bf16" + common);
  if (!AttentionBf16Available()) {
    EXPECT_EQ(run.code, 1);
    EXPECT_NE(run.err.find("AVX-512 BF16"), std::string::npos) << run.err;
    GTEST_SKIP() << "no AVX-512 BF16 here: the refusal was checked";
  }
  ASSERT_EQ(run.code, 0) << run.err;
  auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["attention"], "bf16");
  EXPECT_EQ(j["reference"]["attention"], "exact");
  const double kl = j["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl, 0.0);
  EXPECT_LT(kl, 0.01);
  EXPECT_GE(j["reference"]["top1_agreement"].get<double>(), 0.9);
  std::printf("KL: bf16 attention products %.3g, top-1 agreement %.4f\n", kl,
              j["reference"]["top1_agreement"].get<double>());
  auto fast = M2("perplexity -m " + model + " --activations bf16 --kv-dtype bf16" + common);  // auto
  ASSERT_EQ(fast.code, 0) << fast.err;
  EXPECT_EQ(nlohmann::json::parse(fast.out)["attention"], "bf16");
}

// --kv-dtype q8: on the bundled model its KL against the exact fp32 cache is positive (the
// rows are rounded), small, and the top tokens mostly agree; bf16 products refuse it (they
// read a bf16 cache).
TEST_F(RuntimeCli, Q8KvCacheAgainstTheExactCache) {
  const std::string file = ::testing::TempDir() + "/m2_rt_kvq8.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string model = "models/m2-tiny", common = " -f " + file + " --context 128 --json";
  auto run = M2("perplexity -m " + model + " --kv-dtype q8 --reference " + model + common);
  ASSERT_EQ(run.code, 0) << run.err;
  auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["kv_dtype"], "q8");
  const double kl = j["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl, 0.0);
  EXPECT_LT(kl, 0.01);
  EXPECT_GE(j["reference"]["top1_agreement"].get<double>(), 0.9);
  std::printf("KL: q8 KV cache %.3g, top-1 agreement %.4f\n", kl, j["reference"]["top1_agreement"].get<double>());
  auto bf16 = M2("perplexity -m " + model + " --attention bf16 --kv-dtype q8" + common);
  EXPECT_EQ(bf16.code, 1);
  EXPECT_NE(bf16.err.find("--kv-dtype q8"), std::string::npos) << bf16.err;
  auto unknown = M2("perplexity -m " + model + " --kv-dtype q4" + common);
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("bf16, f32 or q8"), std::string::npos) << unknown.err;
}

// --activations int16 on a q8 copy (every token of m2 perplexity on the int16 kernels):
// its KL against exact activations is positive (the path runs) and a small fraction of
// int8 activations' on the same weights (2^-16 against 2^-8 of a group's largest); a
// generation runs; a model without q8 weights refuses it.
TEST_F(RuntimeCli, Int16ActivationsAgainstTheExactPath) {
  const std::string file = ::testing::TempDir() + "/m2_rt_int16.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string q8 = ::testing::TempDir() + "/m2_rt_int16_q8_" + std::to_string(getpid());
  ASSERT_EQ(M2("quantize -m models/m2-tiny -o " + q8 + " --type q8").code, 0);
  const std::string args = " --reference " + q8 + " -f " + file + " --context 128 --json";
  auto int16 = M2("perplexity -m " + q8 + " --activations int16" + args);
  auto int8 = M2("perplexity -m " + q8 + " --activations int8" + args);
  ASSERT_EQ(int16.code, 0) << int16.err;
  ASSERT_EQ(int8.code, 0) << int8.err;
  const auto j16 = nlohmann::json::parse(int16.out), j8 = nlohmann::json::parse(int8.out);
  EXPECT_EQ(j16["activations"], "int16");
  EXPECT_EQ(j16["reference"]["activations"], "exact");
  const double kl16 = j16["reference"]["mean_kl"].get<double>(), kl8 = j8["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl16, 0.0);
  EXPECT_LT(kl16, 0.05 * kl8) << "int16 " << kl16 << " vs int8 " << kl8;
  std::printf("KL: int16 activations %.3g, int8 %.3g\n", kl16, kl8);
  auto gen = M2("generate -m " + q8 + " --activations int16 -p \"def add(a, b):\" -n 8 --temperature 0");
  EXPECT_EQ(gen.code, 0) << gen.err;
  // int16+int16: the prompt's prefill on the int16 GEMM (the reference's bits), so about
  // the KL of int16 on the decode kernels; the portable kernels have no such GEMM.
  if (Int16GemmLanes() > 0) {
    auto gemm = M2("perplexity -m " + q8 + " --activations int16+int16" + args);
    ASSERT_EQ(gemm.code, 0) << gemm.err;
    const auto jg = nlohmann::json::parse(gemm.out);
    EXPECT_EQ(jg["activations"], "int16+int16");
    const double klg = jg["reference"]["mean_kl"].get<double>();
    EXPECT_GT(klg, 0.0);
    EXPECT_NEAR(klg, kl16, 0.5 * kl16) << "int16 GEMM vs int16 decode kernels";
  }
  const char* outer = std::getenv("M2_KERNELS");  // restored afterwards (a run with forced kernels)
  const std::string outer_value = outer != nullptr ? outer : "";
  setenv("M2_KERNELS", "portable", 1);
  auto refused = M2("perplexity -m " + q8 + " --activations int16+int16" + args);
  if (outer != nullptr) setenv("M2_KERNELS", outer_value.c_str(), 1);
  else unsetenv("M2_KERNELS");
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("avx2 or avx512 kernels"), std::string::npos) << refused.err;
  auto bad = M2("generate -m models/m2-tiny --activations int16 -p hi -n 1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("needs q8 weights"), std::string::npos) << bad.err;
  std::filesystem::remove_all(q8);
}

// --activations int8+int8: a q4 copy of the bundled model prefills its prompts on the int8
// GEMM (AVX-512 VNNI, AVX-VNNI or AVX2). Its KL against exact activations is positive (it
// runs), small, and about that of int8 everywhere on the decode kernels (`perplexity
// --activations int8`: the same quantization, only the fp32 summation order differs). With
// the portable kernels the flag is an error; q8 weights run it with M2_KERNELS=avx2 too
// (the AVX2 GEMM's vpsignb step, or AVX-VNNI where the CPU has it and no AVX-512), at the
// KL of int8 decode kernels everywhere; and it needs q8 / q4 weights at all.
TEST_F(RuntimeCli, Int8PrefillActivationsAgainstTheExactPath) {
  const std::string file = ::testing::TempDir() + "/m2_rt_int8p.txt";
  WriteFile(file, "The cat sat on the mat. It was a sunny day, and the birds were singing. def add(a, b): return a + b");
  const std::string q4 = ::testing::TempDir() + "/m2_rt_int8p_q4_" + std::to_string(getpid());
  const std::string q8 = ::testing::TempDir() + "/m2_rt_int8p_q8_" + std::to_string(getpid());
  ASSERT_EQ(M2("quantize -m models/m2-tiny -o " + q4 + " --type q4").code, 0);
  ASSERT_EQ(M2("quantize -m models/m2-tiny -o " + q8 + " --type q8").code, 0);
  const std::string args = " -f " + file + " --context 128 --json";
  const bool gemm_here = Int8GemmFor(WeightFormat::kQ4) != Int8GemmKernel::kNone;  // this process's kernels
  const char* outer = std::getenv("M2_KERNELS");  // restored afterwards (a run with forced kernels)
  const std::string outer_value = outer != nullptr ? outer : "";
  setenv("M2_KERNELS", "portable", 1);
  auto refused = M2("perplexity -m " + q4 + " --activations int8+int8" + args);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("avx2 or avx512 kernels"), std::string::npos) << refused.err;
  setenv("M2_KERNELS", "avx2", 1);
  const auto q8_gemm = M2("perplexity -m " + q8 + " --activations int8+int8 --reference " + q8 + args);
  const auto q8_decode = M2("perplexity -m " + q8 + " --activations int8 --reference " + q8 + args);
  if (outer != nullptr) setenv("M2_KERNELS", outer_value.c_str(), 1);
  else unsetenv("M2_KERNELS");
  if (Cpu().has_avx2()) {
    ASSERT_EQ(q8_gemm.code, 0) << "q8 on the int8 GEMM with the avx2 kernels: " << q8_gemm.err;
    ASSERT_EQ(q8_decode.code, 0) << q8_decode.err;
    const double gemm_kl = nlohmann::json::parse(q8_gemm.out)["reference"]["mean_kl"].get<double>();
    const double decode_kl = nlohmann::json::parse(q8_decode.out)["reference"]["mean_kl"].get<double>();
    EXPECT_GT(gemm_kl, 0.0);
    EXPECT_NEAR(gemm_kl, decode_kl, 0.25 * decode_kl) << "q8, avx2: int8 GEMM vs int8 decode kernels";
  }
  std::filesystem::remove_all(q8);
  auto run = M2("perplexity -m " + q4 + " --activations int8+int8 --reference " + q4 + args);
  if (!gemm_here) {  // this test itself runs with M2_KERNELS=portable
    EXPECT_EQ(run.code, 1);
    std::filesystem::remove_all(q4);
    GTEST_SKIP() << "the portable kernels: the refusal was checked";
  }
  ASSERT_EQ(run.code, 0) << run.err;
  auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["activations"], "int8+int8");
  const double kl = j["reference"]["mean_kl"].get<double>();
  auto everywhere = M2("perplexity -m " + q4 + " --activations int8 --reference " + q4 + args);
  ASSERT_EQ(everywhere.code, 0) << everywhere.err;
  const double kl_int8 = nlohmann::json::parse(everywhere.out)["reference"]["mean_kl"].get<double>();
  EXPECT_GT(kl, 0.0);
  EXPECT_LT(kl, 0.02);
  EXPECT_NEAR(kl, kl_int8, 0.25 * kl_int8) << "int8 GEMM " << kl << " vs int8 decode kernels " << kl_int8;
  EXPECT_GE(j["reference"]["top1_agreement"].get<double>(), 0.9);
  std::printf("KL: int8 prefill GEMM %.3g, int8 decode kernels everywhere %.3g\n", kl, kl_int8);
  auto gen = M2("generate -m " + q4 + " --activations int8+int8 -p \"def add(a, b):\" -n 8 --temperature 0");
  EXPECT_EQ(gen.code, 0) << gen.err;
  // auto, generate's default, is int8+int8 on q4 weights here: the same tokens, the same KL;
  // on the bf16 model it does not refuse: everything exact (KL 0), or bf16 prefill where
  // that beats fp32 (AMX, AMD's AVX-512 BF16), whose KL is that of --activations bf16.
  auto dflt = M2("generate -m " + q4 + " -p \"def add(a, b):\" -n 8 --temperature 0");
  EXPECT_EQ(dflt.code, 0) << dflt.err;
  EXPECT_EQ(dflt.out, gen.out);
  auto automatic = M2("perplexity -m " + q4 + " --activations auto --reference " + q4 + args);
  ASSERT_EQ(automatic.code, 0) << automatic.err;
  EXPECT_EQ(nlohmann::json::parse(automatic.out)["reference"]["mean_kl"].get<double>(), kl);
  automatic = M2("perplexity -m models/m2-tiny --activations auto --reference models/m2-tiny" + args);
  ASSERT_EQ(automatic.code, 0) << automatic.err;
  if (Bf16PrefillBeatsFp32(WeightFormat::kBF16)) {
    auto bf16 = M2("perplexity -m models/m2-tiny --activations bf16 --reference models/m2-tiny" + args);
    ASSERT_EQ(bf16.code, 0) << bf16.err;
    const double kl_bf16 = nlohmann::json::parse(bf16.out)["reference"]["mean_kl"].get<double>();
    EXPECT_GT(kl_bf16, 0.0);
    EXPECT_EQ(nlohmann::json::parse(automatic.out)["reference"]["mean_kl"].get<double>(), kl_bf16);
  } else {
    EXPECT_EQ(nlohmann::json::parse(automatic.out)["reference"]["mean_kl"].get<double>(), 0.0);
  }
  auto bad = M2("generate -m models/m2-tiny --activations int8+int8 -p hi -n 1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("q8 or q4"), std::string::npos) << bad.err;
  std::filesystem::remove_all(q4);
}

// The trained model, when another engineer's run has put it in place.
TEST(TrainedModel, GenerateChatAndPerplexity) {
  const std::string dir = "models/m2-tiny";
  if (!std::filesystem::exists(dir + "/model.safetensors") || !std::filesystem::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << "models/m2-tiny is not there yet";
  auto r = M2("generate -m " + dir + " -p 'What is 2+2?' --chat -n 48 --seed 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  const std::string history = ::testing::TempDir() + "/m2_rt_tiny_history.json";
  r = M2("chat -m " + dir + " -n 48 --seed 1 --save-history " + history, "Hello!\nTell me more.\n");
  ASSERT_EQ(r.code, 0) << r.err;
  auto text = ReadTextFile(history);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text)["messages"].size(), 4u);
  const std::string file = ::testing::TempDir() + "/m2_rt_tiny_ppl.txt";
  // Text of the kind it was trained on (assistant turns of its chat data).
  WriteFile(file, "The user asks who I am. No tool is needed.\nI am m2-tiny, a small language model. The tool "
                  "returned the answer. I can reply now. The capital of France is Paris.");
  r = M2("perplexity -m " + dir + " -f " + file + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const double ppl = nlohmann::json::parse(r.out)["perplexity"].get<double>();
  auto tok = text::Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok());
  // A trained model must do far better than guessing uniformly over its vocabulary
  // (measured: 87 over 8192 ids on 2026-11-30's m2-tiny).
  EXPECT_LT(ppl, (*tok)->vocab_size() / 20.0) << ppl;
}

}  // namespace
}  // namespace m2::testing
