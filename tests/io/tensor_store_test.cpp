// Sharded models, and the errors a broken model folder must give (never a crash).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/tensor_store.h"
#include "model/model.h"
#include "st_builder.h"

namespace m2::testing {
namespace {

namespace fs = std::filesystem;

// A copy of a golden model folder that a test may damage.
std::string CopyModel(const std::string& name, const std::string& tag) {
  const fs::path dst = fs::path(::testing::TempDir()) / ("m2_" + tag);
  fs::remove_all(dst);
  fs::copy("testdata/golden/" + name, dst, fs::copy_options::recursive);
  return dst.string();
}

void WriteText(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(TensorStoreTest, OpensShardedModelThroughTheIndex) {
  auto s = TensorStore::Open("testdata/golden/tiny-bf16-sharded");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->num_files(), 3u);
  EXPECT_TRUE((*s)->Has("model.embed_tokens.weight"));
  auto v = (*s)->Get("model.embed_tokens.weight", {DType::kBF16}, {384, 64});
  EXPECT_TRUE(v.ok()) << v.status().message();
}

// --no-mmap: every shard read into anonymous memory holds the bytes the mapping shows, the
// progress callback counts every byte once, and auto reads a model this small.
TEST(TensorStoreTest, ReadIntoMemoryHoldsWhatTheMappingHolds) {
  auto mapped = TensorStore::Open("testdata/golden/tiny-bf16-sharded");
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  EXPECT_FALSE((*mapped)->read_into_memory());
  uint64_t last = 0, total = 0, calls = 0;
  auto read = TensorStore::Open("testdata/golden/tiny-bf16-sharded", {}, WeightMemory::kRead,
                                [&](uint64_t done, uint64_t all) {
                                  EXPECT_GT(done, last);
                                  last = done, total = all, ++calls;
                                });
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_TRUE((*read)->read_into_memory());
  uint64_t file_bytes = 0;
  for (const auto& f : (*read)->files()) file_bytes += f->file_size();
  EXPECT_EQ(total, file_bytes);
  EXPECT_EQ(last, file_bytes);
  EXPECT_GE(calls, (*read)->num_files());
  for (const std::string& name : (*mapped)->Names()) {
    auto a = (*mapped)->Get(name);
    auto b = (*read)->Get(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    ASSERT_EQ(a->nbytes, b->nbytes) << name;
    EXPECT_NE(a->data, b->data) << name;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name;
  }
  auto automatic = TensorStore::Open("testdata/golden/tiny-bf16-sharded", {}, WeightMemory::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_TRUE((*automatic)->read_into_memory()) << "a 1 MiB model should fit in the memory available";
}

// A shard that cannot be read in full is an error naming it, as with the mapping.
TEST(TensorStoreTest, ReadIntoMemoryNamesABrokenShard) {
  const std::string dir = CopyModel("tiny-bf16-sharded", "read_broken_shard");
  const fs::path shard = fs::path(dir) / "model-00002-of-00003.safetensors";
  fs::resize_file(shard, 7);
  auto s = TensorStore::Open(dir, {}, WeightMemory::kRead);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("model-00002-of-00003.safetensors"), std::string::npos) << s.status().message();
}

TEST(TensorStoreTest, ChecksDtypeAndShape) {
  auto s = TensorStore::Open("testdata/golden/tiny-f32-gqa6");
  ASSERT_TRUE(s.ok());
  auto v = (*s)->Get("model.norm.weight", {DType::kF32}, {97});
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("expected shape [97], found [96]"), std::string::npos) << v.status().message();
  v = (*s)->Get("model.norm.weight", {DType::kBF16}, {96});
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("expected dtype BF16, found F32"), std::string::npos) << v.status().message();
  v = (*s)->Get("no.such.tensor");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("no.such.tensor"), std::string::npos);
}

TEST(TensorStoreTest, MissingShardIsNamed) {
  const std::string dir = CopyModel("tiny-bf16-sharded", "missing_shard");
  fs::remove(fs::path(dir) / "model-00002-of-00003.safetensors");
  auto s = TensorStore::Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("model-00002-of-00003.safetensors"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("missing"), std::string::npos);
}

TEST(TensorStoreTest, IndexThatLiesIsAnError) {
  const std::string dir = CopyModel("tiny-bf16-sharded", "lying_index");
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  WriteText(index, R"({"weight_map": {"model.norm.weight": "model-00001-of-00003.safetensors",
                                       "ghost.weight": "model-00001-of-00003.safetensors"}})");
  auto s = TensorStore::Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("ghost.weight"), std::string::npos) << s.status().message();
  WriteText(index, R"({"weight_map": {"x": "../../etc/passwd"}})");
  s = TensorStore::Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("inside the model folder"), std::string::npos) << s.status().message();
  WriteText(index, R"({"weight_map": 5})");
  EXPECT_FALSE(TensorStore::Open(dir).ok());
  WriteText(index, "{not json");
  s = TensorStore::Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not valid JSON"), std::string::npos) << s.status().message();
}

TEST(TensorStoreTest, TruncatedWeightsFileIsAnErrorWhenLoadingTheModel) {
  const std::string dir = CopyModel("tiny-f32-gqa6", "truncated");
  const fs::path f = fs::path(dir) / "model.safetensors";
  fs::resize_file(f, fs::file_size(f) - 100);
  auto m = Model::Load(dir, {.progress = false});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
}

TEST(TensorStoreTest, MissingTensorOrScaleIsNamedWhenLoadingTheModel) {
  // Rewrite the fp8 model without one expert's scale tensor.
  const std::string dir = CopyModel("tiny-fp8", "no_scale");
  auto src = SafetensorsFile::Open("testdata/golden/tiny-fp8/model.safetensors");
  ASSERT_TRUE(src.ok());
  std::vector<SafetensorsTensorOut> keep;
  const std::string dropped = "model.layers.1.block_sparse_moe.experts.3.w2.weight_scale_inv";
  for (const auto& e : (*src)->header().tensors) {
    if (e.name == dropped) continue;
    TensorView v = (*src)->View(e);
    keep.push_back({e.name, e.dtype, e.shape, v.data});
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", keep).ok());
  auto m = Model::Load(dir, {.progress = false});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(dropped), std::string::npos) << m.status().message();
}

TEST(TensorStoreTest, WrongShapeForTheConfigIsAnError) {
  const std::string dir = CopyModel("tiny-f32-gqa6", "wrong_config");
  std::ifstream in(dir + "/config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), {});
  const auto pos = cfg.find("\"intermediate_size\": 32");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, 23, "\"intermediate_size\": 48");
  WriteText(dir + "/config.json", cfg);
  auto m = Model::Load(dir, {.progress = false});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("expected shape [48, 96], found [32, 96]"), std::string::npos)
      << m.status().message();
}

TEST(TensorStoreTest, NotAModelFolder) {
  auto s = TensorStore::Open("testdata/does-not-exist");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("does not exist"), std::string::npos);
  const fs::path empty = fs::path(::testing::TempDir()) / "m2_empty_dir";
  fs::create_directories(empty);
  s = TensorStore::Open(empty.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace m2::testing
