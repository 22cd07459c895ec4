// A model folder for runtime tests: a golden tiny model (random weights, vocab 300-384)
// with a tokenizer.json small enough for its vocabulary, made from our tokenizer
// (testdata/tokenizer/ours) by keeping its 256 byte symbols and first merges and moving
// the MiniMax special tokens ("]~b]", "[e~[", "<think>", ...) right after them.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace m2::testing {

// Ids 0..kSmallVocab-1 are vocab entries; the special tokens follow.
inline constexpr int kSmallVocab = 270;

inline nlohmann::json SmallTokenizerJson() {
  auto ours = ReadJsonFile("testdata/tokenizer/ours/tokenizer.json");
  EXPECT_TRUE(ours.ok()) << ours.status().message();
  nlohmann::json t = *ours;
  nlohmann::json vocab = nlohmann::json::object();
  std::set<std::string> kept;
  for (auto it = t["model"]["vocab"].begin(); it != t["model"]["vocab"].end(); ++it) {
    if (it.value().get<int>() < kSmallVocab) {
      vocab[it.key()] = it.value();
      kept.insert(it.key());
    }
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : t["model"]["merges"]) {
    const std::string a = m[0], b = m[1];
    if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
  }
  t["model"]["vocab"] = vocab;
  t["model"]["merges"] = merges;
  nlohmann::json added = nlohmann::json::array();
  int id = kSmallVocab;
  for (auto a : t["added_tokens"]) {
    if (id >= kSmallVocab + 9) break;  // ]!p~[ ]~b] [e~[ ]!d~[ ]~!b[ <think> </think> <minimax:tool_call> </...>
    a["id"] = id++;
    added.push_back(a);
  }
  t["added_tokens"] = added;
  return t;
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// When the tests of this process end, removes its files and folders under the test temp dir
// (named m2_rt_..._<pid>... by MakeTestModel and the CLI tests: the pid stands between
// underscores or before a dot or the end, so another test process's are left alone).
class RemoveTestFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    namespace fs = std::filesystem;
    const std::string pid = std::to_string(getpid());
    std::error_code ec;
    std::vector<fs::path> mine;
    for (const auto& e : fs::directory_iterator(::testing::TempDir(), ec)) {
      const std::string f = e.path().filename().string();
      if (f.rfind("m2_rt_", 0) != 0) continue;
      for (size_t at = f.find(pid); at != std::string::npos; at = f.find(pid, at + 1)) {
        const size_t end = at + pid.size();
        if (f[at - 1] == '_' && (end == f.size() || f[end] == '_' || f[end] == '.')) {
          mine.push_back(e.path());
          break;
        }
      }
    }
    for (const auto& p : mine) fs::remove_all(p, ec);
  }
};
inline ::testing::Environment* const kRemoveTestFiles = ::testing::AddGlobalTestEnvironment(new RemoveTestFiles);

// A fresh folder `name` under the test temp dir with the golden model's files, the small
// tokenizer (unless with_tokenizer is false) and, when given, generation_config.json.
inline std::string MakeTestModel(const std::string& name, const std::string& golden = "tiny-f32-gqa6",
                                 const std::string& generation_config = "", bool with_tokenizer = true) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("m2_rt_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator("testdata/golden/" + golden)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("golden", 0) == 0) continue;
    fs::copy_file(e.path(), dir / f);
  }
  if (with_tokenizer) WriteFile((dir / "tokenizer.json").string(), SmallTokenizerJson().dump());
  if (!generation_config.empty()) WriteFile((dir / "generation_config.json").string(), generation_config);
  return dir.string();
}

// The bundled model (models/m2-tiny) and its tokenizer, loaded once per test binary.
inline Model& BundledModel() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::Load("models/m2-tiny", {.progress = false});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : nullptr;
  }();
  return *m;
}

inline const text::Tokenizer& BundledTokenizer() {
  static std::unique_ptr<text::Tokenizer> t = [] {
    auto r = text::Tokenizer::Load("models/m2-tiny");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : nullptr;
  }();
  return *t;
}

}  // namespace m2::testing
