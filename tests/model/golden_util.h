// Loading the golden files written by tools/make_golden.py.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace m2::testing {

inline const std::vector<std::string>& GoldenModels() {
  static const std::vector<std::string> names = {"tiny-f32-gqa6", "tiny-f32-hf-layout", "tiny-bf16-sharded",
                                                 "tiny-fp8"};
  return names;
}

// The Lightning hybrids (tools/make_golden_minimax.py): released Text-01 naming with
// softmax last, released M1 naming in bf16 shards with softmax first, transformers' own
// naming and fused experts with alternating layers.
inline const std::vector<std::string>& HybridGoldenModels() {
  static const std::vector<std::string> names = {"tiny-hybrid-text01", "tiny-hybrid-m1", "tiny-hybrid-hf"};
  return names;
}

// A model name as a test-name suffix ("tiny-fp8" -> "tiny_fp8").
inline std::string ModelParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

inline std::string GoldenDir(const std::string& name) { return "testdata/golden/" + name; }

struct Golden {
  std::vector<int32_t> prompt, greedy;
  int64_t vocab = 0;
  double logit_scale = 0;
  std::unique_ptr<SafetensorsFile> tensors;

  // Row-major fp32 tensor by name.
  std::vector<float> Get(const std::string& name) const {
    const SafetensorsEntry* e = tensors->Find(name);
    EXPECT_NE(e, nullptr) << name;
    if (e == nullptr) return {};
    const TensorView v = tensors->View(*e);
    return std::vector<float>(v.as<float>(), v.as<float>() + v.numel());
  }
};

inline Golden LoadGolden(const std::string& name) {
  Golden g;
  auto j = ReadJsonFile(GoldenDir(name) + "/golden.json");
  EXPECT_TRUE(j.ok()) << j.status().message();
  for (const auto& v : (*j)["prompt_ids"]) g.prompt.push_back(v.get<int32_t>());
  for (const auto& v : (*j)["greedy_ids"]) g.greedy.push_back(v.get<int32_t>());
  g.vocab = (*j)["vocab_size"].get<int64_t>();
  g.logit_scale = (*j)["logit_scale"].get<double>();
  auto f = SafetensorsFile::Open(GoldenDir(name) + "/golden.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().message();
  g.tensors = std::move(f).value();
  return g;
}

inline double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline int32_t Argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

}  // namespace m2::testing
