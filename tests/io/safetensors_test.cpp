#include <gtest/gtest.h>

#include <filesystem>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "st_builder.h"

namespace m2::testing {
namespace {

// Header padded to a multiple of 8 so the data section is aligned.
std::string Pad(std::string h) {
  while ((8 + h.size()) % 8) h.push_back(' ');
  return h;
}

TEST(SafetensorsTest, ParsesAValidHeader) {
  const auto bytes = MakeSafetensors(
      Pad(R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
          R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"e":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[28,28]}})"),
      28);
  auto h = ParseSafetensorsHeader(bytes);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");  // sorted by offset
  EXPECT_EQ(h->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->data_offset % 8, 0u);
}

struct Bad {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* message_part;
};

TEST(SafetensorsTest, EveryLieIsAClearError) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<Bad> cases = {
      {"empty file", {}, "8-byte header length"},
      {"short file", {1, 2, 3}, "8-byte header length"},
      {"absurd header length", MakeSafetensors("{}", 0, 1ull << 40), "at most"},
      {"truncated header", MakeSafetensors("{}", 0, 100), "truncated"},
      {"bad json", MakeSafetensors(Pad("{\"a\":"), 0), "not valid JSON"},
      {"not an object", MakeSafetensors(Pad("[1,2]"), 0), "JSON object"},
      {"entry not object", MakeSafetensors(Pad(R"({"a":3})"), 0), "expected an object"},
      {"missing dtype", MakeSafetensors(Pad(R"({"a":{"shape":[1],"data_offsets":[0,4]}})"), 4), "dtype"},
      {"unknown dtype", MakeSafetensors(Pad(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})"), 4),
       "unsupported dtype"},
      {"negative dim", MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"), 4),
       "non-negative"},
      {"float dim", MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})"), 4),
       "non-negative"},
      {"huge shape",
       MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})"), 4),
       "too large"},
      {"size mismatch", MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"), 8),
       "needs 12 bytes"},
      {"end before begin", MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})"), 8),
       "end before begin"},
      {"offsets past the end", MakeSafetensors(Pad("{" + ok_entry + "}"), 4), "past the end"},
      {"overlap",
       MakeSafetensors(Pad("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"), 12),
       "overlap"},
      {"misaligned", MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})"), 8),
       "aligned"},
      {"offsets wrong type",
       MakeSafetensors(Pad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":"0-4"}})"), 4), "data_offsets"},
      {"metadata not strings", MakeSafetensors(Pad(R"({"__metadata__":{"x":1}})"), 0), "__metadata__"},
  };
  for (const auto& c : cases) {
    auto h = ParseSafetensorsHeader(c.bytes);
    ASSERT_FALSE(h.ok()) << c.what;
    EXPECT_NE(h.status().message().find(c.message_part), std::string::npos) << c.what << ": " << h.status().message();
  }
}

TEST(SafetensorsTest, WriterRoundTripsThroughTheMappedReader) {
  const std::string path = ::testing::TempDir() + "/roundtrip.safetensors";
  const float f[3] = {1.5f, -2.0f, 3.25f};
  const uint16_t h[2] = {0x3f80, 0xc000};
  const uint8_t q[5] = {0x38, 0x40, 0x00, 0x7e, 0xff};
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"q", DType::kF8E4M3, {5}, q}, {"h", DType::kBF16, {1, 2}, h}, {"f", DType::kF32, {3}, f}},
                               {{"who", "test"}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const auto* e = (*file)->Find("f");
  ASSERT_NE(e, nullptr);
  TensorView v = (*file)->View(*e);
  EXPECT_EQ(v.as<float>()[2], 3.25f);
  EXPECT_EQ(Bf16ToF32((*file)->View(*(*file)->Find("h")).as<uint16_t>()[1]), -2.0f);
  EXPECT_EQ((*file)->View(*(*file)->Find("q")).data[3], 0x7e);
  EXPECT_EQ((*file)->header().metadata.at("who"), "test");
  EXPECT_EQ((*file)->Find("nope"), nullptr);
}

TEST(SafetensorsTest, OpenNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/truncated.safetensors";
  WriteBytes(path, MakeSafetensors("{}", 0, 64));
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated.safetensors"), std::string::npos);
  EXPECT_FALSE(SafetensorsFile::Open(::testing::TempDir() + "/missing.safetensors").ok());
  EXPECT_FALSE(SafetensorsFile::Open(::testing::TempDir()).ok());  // a directory
}

}  // namespace
}  // namespace m2::testing

namespace m2::testing {
namespace {

// Found by fuzz/fuzz_model_config: nlohmann throws on a number that overflows a double
// even in its non-throwing mode.
TEST(JsonTest, NumberOverflowIsAnErrorNotAnException) {
  auto j = ParseJson(R"({"rms_norm_eps": 1e706})", "config");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("not valid JSON"), std::string::npos) << j.status().message();
  auto h = ParseSafetensorsHeader(MakeSafetensors(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", 4));
  EXPECT_FALSE(h.ok());
}

}  // namespace
}  // namespace m2::testing
