// m2 quantize end to end: the q8 / q4 folder loads, and the engine computes with exactly
// the values the packed weights stand for. The check builds a plain fp32 twin of the
// quantized model (every packed matrix replaced by its DequantizeRow values) and needs the
// two to agree to fp32 rounding. (Comparing with the unquantized model instead would mostly
// measure routing flips: a small change in a hidden state can pick another expert.)
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "../model/golden_util.h"
#include "kernels/linear.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"

namespace m2::testing {
namespace {

namespace fs = std::filesystem;

int Shell(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<float> Logits(const std::string& dir, const std::vector<int32_t>& ids) {
  auto m = Model::Load(dir, {.progress = false});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return {};
  KvBlockPool pool((*m)->cache_layout());
  SequenceCache c(&pool);
  SequenceCache* cs[] = {&c};
  ForwardBatch b;
  for (int32_t id : ids) b.Add(id, 0, true);
  std::vector<float> out;
  EXPECT_TRUE((*m)->Forward(b, cs, out).ok());
  return out;
}

TEST(QuantizeCliTest, QuantizedModelComputesWithItsPackedValues) {
  const char* bin = std::getenv("M2_BINARY");
  Golden g = LoadGolden("tiny-bf16-sharded");
  for (const std::string type : {"q8", "q4"}) {
    const fs::path out = fs::path(::testing::TempDir()) / ("m2_quant_" + type);
    fs::remove_all(out);
    ASSERT_EQ(Shell(std::string(bin ? bin : "build/src/cli/m2") + " quantize -m " + GoldenDir("tiny-bf16-sharded") +
                    " -o " + out.string() + " --type " + type + " --lm-head q8 >/dev/null 2>&1"),
              0);
    auto model = Model::Load(out.string(), {.progress = false});
    ASSERT_TRUE(model.ok()) << model.status().message();
    const WeightFormat want = type == "q8" ? WeightFormat::kQ8 : WeightFormat::kQ4;
    EXPECT_EQ((*model)->weights().layers[0].attn.q.format, want);
    EXPECT_EQ((*model)->weights().layers[2].moe.experts[5].w2.format, want);
    EXPECT_EQ((*model)->weights().lm_head.format, WeightFormat::kQ8);
    EXPECT_EQ((*model)->weights().layers[0].moe.gate.format, WeightFormat::kBF16);  // never quantized
    EXPECT_EQ((*model)->weights().embed.format, WeightFormat::kBF16);
    // The library's default stays exact; --activations auto (the CLI's default) gives q4
    // weights int8 decode and prefill where this CPU runs the int8 kernels, q8 weights int16
    // decode steps where it runs the int16 kernels (the avx2 / avx512 families) and bf16
    // prefill where that beats the fp32 GEMM (AMD's AVX-512 BF16), else int16 prefill on the
    // int16 GEMM; the router stays exact,
    // the q8 lm_head's prefill too (its decode steps as the other q8 weights').
    EXPECT_EQ((*model)->weights().layers[0].attn.q.activations, ActivationMode::kExact);
    {
      auto automatic = Model::Load(out.string(), {.progress = false, .activations = ActivationMode::kAuto});
      ASSERT_TRUE(automatic.ok()) << automatic.status().message();
      const ModelWeights& aw = (*automatic)->weights();
      const bool int8 = type == "q4" && Int8GemmFor(WeightFormat::kQ4) != Int8GemmKernel::kNone;
      const bool int16 = Int16KernelsAvailable();
      const bool bf16 = type == "q8" && Bf16PrefillBeatsFp32(WeightFormat::kQ8);
      ActivationMode want_mode = int8 ? ActivationMode::kInt8DecodeInt8Prefill
                                 : bf16 ? ActivationMode::kBf16Prefill
                                        : ActivationMode::kExact;
      if (type == "q8" && int16)
        want_mode = bf16                   ? ActivationMode::kInt16DecodeBf16Prefill
                    : Int16GemmLanes() > 0 ? ActivationMode::kInt16DecodeInt16Prefill
                                           : ActivationMode::kInt16Decode;
      EXPECT_EQ(aw.layers[0].attn.q.activations, want_mode) << type;
      EXPECT_EQ(aw.layers[2].moe.experts[5].w2.activations, want_mode) << type;
      EXPECT_EQ(aw.lm_head.activations, int16 ? ActivationMode::kInt16Decode : ActivationMode::kExact) << type;
      EXPECT_EQ(aw.layers[0].moe.gate.activations, ActivationMode::kExact) << type;
    }

    // The fp32 twin.
    const fs::path twin = fs::path(::testing::TempDir()) / ("m2_quant_twin_" + type);
    fs::remove_all(twin);
    fs::create_directories(twin);
    fs::copy_file(GoldenDir("tiny-bf16-sharded") + "/config.json", twin / "config.json");
    auto store = TensorStore::Open(out.string());
    ASSERT_TRUE(store.ok());
    std::vector<std::vector<float>> keep;
    std::vector<SafetensorsTensorOut> tensors;
    const auto add_linear = [&](const std::string& name, const LinearWeight& w) {
      keep.emplace_back(static_cast<size_t>(w.rows * w.cols));
      for (int64_t r = 0; r < w.rows; ++r) DequantizeRow(w, r, keep.back().data() + r * w.cols);
      tensors.push_back({name, DType::kF32, {w.rows, w.cols}, keep.back().data()});
    };
    const ModelWeights& mw = (*model)->weights();
    for (const auto& name : (*store)->Names()) {
      if (name.find("_qscale") != std::string::npos) continue;
      const TensorView v = (*store)->Get(name).value();
      if (v.dtype != DType::kI8 && v.dtype != DType::kU8) {
        tensors.push_back({name, v.dtype, v.shape, v.data});
        continue;
      }
      // Find the bound LinearWeight of this name.
      const LinearWeight* lw = name == "lm_head.weight" ? &mw.lm_head : nullptr;
      for (size_t l = 0; l < mw.layers.size() && lw == nullptr; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const auto& L = mw.layers[l];
        if (name == p + "self_attn.q_proj.weight") lw = &L.attn.q;
        if (name == p + "self_attn.k_proj.weight") lw = &L.attn.k;
        if (name == p + "self_attn.v_proj.weight") lw = &L.attn.v;
        if (name == p + "self_attn.o_proj.weight") lw = &L.attn.o;
        for (size_t e = 0; e < L.moe.experts.size(); ++e) {
          const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
          if (name == x + "w1.weight") lw = &L.moe.experts[e].w1;
          if (name == x + "w2.weight") lw = &L.moe.experts[e].w2;
          if (name == x + "w3.weight") lw = &L.moe.experts[e].w3;
        }
      }
      ASSERT_NE(lw, nullptr) << name;
      add_linear(name, *lw);
    }
    ASSERT_TRUE(WriteSafetensors((twin / "model.safetensors").string(), tensors).ok());

    const auto a = Logits(out.string(), g.prompt), b = Logits(twin.string(), g.prompt);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    EXPECT_LE(MaxAbsDiff(a.data(), b.data(), a.size()), 1e-4 * g.logit_scale) << type;
  }
}

}  // namespace
}  // namespace m2::testing
