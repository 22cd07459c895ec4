// Exactness against Hugging Face `tokenizers`: every document of testdata/tokenizer/corpus
// (1.4 MB: English, Chinese, Japanese, code, emoji/ZWJ, odd whitespace, numbers,
// contractions, every added token, invalid UTF-8) is encoded by each test tokenizer, with
// special tokens parsed and as plain text, and decoded; counts and hashes must equal
// those in testdata/tokenizer/expected/<name>.tsv, written by
// tools/tokenizer/make_expected.py. tools/tokenizer/diff_ids.py shows a difference.
#include <gtest/gtest.h>

#include <dirent.h>

#include <fstream>
#include <map>
#include <sstream>

#include "base/mapped_file.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace m2::text {
namespace {

struct Case {
  const char* name;
  std::string path;
  bool round_trips;  // no normalizer and no prefix space: Decode(Encode(x)) == x
};

std::string ThirdParty(const char* name) {
  return std::string(M2_TOKENIZER_THIRD_PARTY_DIR) + "/" + name + "/tokenizer.json";
}

std::vector<Case> Cases() {
  return {
      {"ours", "testdata/tokenizer/ours/tokenizer.json", true},
      {"variant_a", "testdata/tokenizer/variants/a.json", false},
      {"variant_b", "testdata/tokenizer/variants/b.json", false},
      {"variant_c", "testdata/tokenizer/variants/c.json", false},
      {"olmo2", ThirdParty("olmo2"), true},
      {"deepseek_v3", ThirdParty("deepseek_v3"), true},
      {"claude", ThirdParty("claude"), false},
  };
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// FNV-1a 64 of the ids as little-endian uint32, as tools/tokenizer/common.py ids_hash.
std::string IdsHash(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    uint8_t le[4] = {uint8_t(id), uint8_t(id >> 8), uint8_t(id >> 16), uint8_t(id >> 24)};
    h = Fnv1a(le, 4, h);
  }
  return fmt::format("{:016x}", h);
}

struct Expected {
  size_t n_special, n_plain;
  std::string special, plain, decoded;
};

std::map<std::string, Expected> ReadExpected(const std::string& name) {
  std::map<std::string, Expected> out;
  std::ifstream in("testdata/tokenizer/expected/" + name + ".tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string doc;
    Expected e;
    fields >> doc >> e.n_special >> e.special >> e.n_plain >> e.plain >> e.decoded;
    out[doc] = e;
  }
  return out;
}

// Names the case in test output (instead of gtest's byte dump).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CorpusTest : public ::testing::TestWithParam<Case> {};

TEST_P(CorpusTest, IdsAndDecodingMatchHuggingFace) {
  const Case& c = GetParam();
  auto tok = Tokenizer::Load(c.path);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto expected = ReadExpected(c.name);
  ASSERT_GE(expected.size(), 300u) << "expected ids missing for " << c.name;

  size_t bytes = 0, tokens = 0, failures = 0;
  for (const auto& [doc, want] : expected) {
    auto text = ReadTextFile("testdata/tokenizer/corpus/" + doc);
    ASSERT_TRUE(text.ok()) << text.status().message();
    bytes += text->size();
    std::vector<int32_t> special = (*tok)->Encode(*text, true);
    std::vector<int32_t> plain = (*tok)->Encode(*text, false);
    tokens += special.size();
    std::string decoded = (*tok)->Decode(special);
    std::string decoded_hash = fmt::format("{:016x}", Fnv1a(decoded.data(), decoded.size()));
    bool ok = special.size() == want.n_special && IdsHash(special) == want.special &&
              plain.size() == want.n_plain && IdsHash(plain) == want.plain && decoded_hash == want.decoded;
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << c.name << " " << doc << ": ids " << special.size() << "/" << IdsHash(special) << " want "
                    << want.n_special << "/" << want.special << "; plain " << plain.size() << "/" << IdsHash(plain)
                    << " want " << want.n_plain << "/" << want.plain << "; decoded " << decoded_hash << " want "
                    << want.decoded << "\n  see: python3 tools/tokenizer/diff_ids.py " << c.name << " " << doc;
    }
    if (c.round_trips) {
      EXPECT_EQ(decoded, RepairUtf8(*text)) << c.name << " " << doc << " does not round-trip";
    }

    // Streaming gives the same text, piece by piece, each piece valid UTF-8.
    StreamDecoder stream(**tok);
    std::string streamed;
    bool pieces_valid = true;
    for (int32_t id : special) {
      std::string piece = stream.Add(id);
      pieces_valid &= IsValidUtf8(piece);
      streamed += piece;
    }
    streamed += stream.Finish();
    EXPECT_TRUE(pieces_valid) << c.name << " " << doc;
    EXPECT_EQ(streamed, decoded) << c.name << " " << doc;
  }
  EXPECT_EQ(failures, 0u) << failures << " of " << expected.size() << " documents differ";
  EXPECT_GE(bytes, 1000000u);
  std::printf("%s: %zu documents, %zu bytes, %zu tokens\n", c.name, expected.size(), bytes, tokens);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, CorpusTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace m2::text
