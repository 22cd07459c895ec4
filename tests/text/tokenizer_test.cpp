// Unit tests of the Tokenizer API on our own tokenizer (testdata/tokenizer/ours), with
// expected ids from Hugging Face `tokenizers` 0.23.3, and of load errors on broken files.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/mapped_file.h"
#include "io/json_file.h"
#include "text/utf8.h"

namespace m2::text {
namespace {

const char* kOurs = "testdata/tokenizer/ours/tokenizer.json";

const Tokenizer& Ours() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::Load(kOurs);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::move(*t) : nullptr;
  }();
  return *tok;
}

using Ids = std::vector<int32_t>;

TEST(Tokenizer, IdsMatchHuggingFace) {
  const Tokenizer& t = Ours();
  EXPECT_EQ(t.Encode("Hello, world! I'm here."), (Ids{39, 10867, 11, 3133, 4495, 0, 7364, 4687, 13}));
  EXPECT_EQ(t.Encode("]~b]user\n\xE4\xBD\xA0\xE5\xA5\xBD[e~[\n"), (Ids{12001, 4989, 198, 518, 254, 996, 12002, 198}));
  EXPECT_EQ(t.Encode("]~b]user\n\xE4\xBD\xA0\xE5\xA5\xBD[e~[\n", /*parse_special=*/false),
            (Ids{60, 93, 65, 60, 4989, 198, 518, 254, 996, 58, 68, 93, 58, 198}));
  EXPECT_EQ(t.Encode("<think>\nhmm\n</think>"), (Ids{12005, 198, 71, 939, 198, 12006}));
  EXPECT_EQ(t.Encode("<think>\nhmm\n</think>", false), (Ids{27, 268, 267, 74, 488, 71, 939, 198, 775, 268, 267, 74, 29}));
  EXPECT_TRUE(t.Encode("").empty());
}

TEST(Tokenizer, SpecialTokenQueries) {
  const Tokenizer& t = Ours();
  EXPECT_EQ(t.TokenId("]!p~["), 12000);
  EXPECT_EQ(t.TokenId("[e~["), 12002);
  EXPECT_EQ(t.TokenId("</minimax:tool_call>"), 12008);
  EXPECT_EQ(t.TokenId("\xC4\xA0the"), t.Encode(" the").at(0));  // a vocab entry ("Ġthe")
  EXPECT_FALSE(t.TokenId("<not a token>").has_value());
  EXPECT_TRUE(t.IsSpecial(12002));
  EXPECT_FALSE(t.IsSpecial(39));
  EXPECT_EQ(t.vocab_size(), 12013);
  EXPECT_EQ(t.SpecialIds().size(), 13u);
  EXPECT_EQ(t.IdToToken(12005), "<think>");
  EXPECT_FALSE(t.IdToToken(999999).has_value());
}

TEST(Tokenizer, DecodeRoundTripsAndSkipsSpecials) {
  const Tokenizer& t = Ours();
  const std::string text = "]~b]ai\n<think>\nx\n</think>\n\nCaf\xC3\xA9 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x92\xBB\t\r\n  end[e~[";
  Ids ids = t.Encode(text);
  EXPECT_EQ(t.Decode(ids), text);
  EXPECT_EQ(t.Decode(ids, /*skip_special=*/true), "ai\n\nx\n\n\nCaf\xC3\xA9 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x92\xBB\t\r\n  end");
  // Unknown ids are skipped, as HF does.
  Ids with_unknown = ids;
  with_unknown.insert(with_unknown.begin() + 1, 999999);
  with_unknown.push_back(-5);
  EXPECT_EQ(t.Decode(with_unknown), text);
}

TEST(Tokenizer, InvalidUtf8IsReplacedBeforeTokenizing) {
  const Tokenizer& t = Ours();
  const std::string bad = "ok \xE4\xB8 then \xFF\xC0\xAF end\xF0\x9F\x98";
  EXPECT_EQ(t.Encode(bad), t.Encode(RepairUtf8(bad)));
  EXPECT_EQ(t.Decode(t.Encode(bad)), RepairUtf8(bad));
}

TEST(Tokenizer, RandomBytesRoundTripAfterRepair) {
  // Arbitrary bytes (seeded), biased towards UTF-8 lead and continuation bytes and the
  // characters the special tokens are made of, never crash and decode to the repaired text.
  const Tokenizer& t = Ours();
  uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  const std::string alphabet = "<>/[]~!ebpd think \n\t\r\x80\xBF\xC3\xE4\xF0\x9F\xED\xFF";
  for (int round = 0; round < 300; ++round) {
    std::string s(next() % 200, '\0');
    for (char& c : s) c = next() % 3 ? alphabet[next() % alphabet.size()] : static_cast<char>(next());
    for (bool special : {true, false}) {
      Ids ids = t.Encode(s, special);
      ASSERT_EQ(t.Decode(ids), RepairUtf8(s)) << "round " << round;
    }
  }
}

TEST(StreamDecoder, NeverEmitsABrokenCharacterAndMatchesDecode) {
  const Tokenizer& t = Ours();
  const std::string text =
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB "
      "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 <think>\xE5\x90\xBE\xE8\xBC\xA9</think> ok";
  Ids ids = t.Encode(text);
  StreamDecoder stream(t);
  std::string joined;
  size_t held_back = 0;
  for (int32_t id : ids) {
    std::string piece = stream.Add(id);
    EXPECT_TRUE(IsValidUtf8(piece)) << "id " << id;
    held_back += stream.has_pending();
    joined += piece;
  }
  joined += stream.Finish();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held_back, 0u) << "the text should split some character across tokens";

  // A stream cut inside a character ends with U+FFFD, exactly as Decode.
  Ids emoji = t.Encode("\xF0\x90\x8C\xB0");  // GOTHIC LETTER AHSA: one token per byte
  ASSERT_GT(emoji.size(), 1u);
  StreamDecoder cut(t);
  EXPECT_EQ(cut.Add(emoji[0]), "");
  EXPECT_EQ(cut.Finish(), t.Decode(std::span<const int32_t>(emoji.data(), 1)));
  EXPECT_EQ(cut.Finish(), "");

  StreamDecoder skipping(t, /*skip_special=*/true);
  std::string s;
  for (int32_t id : t.Encode("a<think>b")) s += skipping.Add(id);
  EXPECT_EQ(s + skipping.Finish(), "ab");
}

TEST(Tokenizer, EncodesConcurrently) {
  // Encode is const and keeps its cache per thread: threads must agree with one another.
  const Tokenizer& t = Ours();
  auto text = ReadTextFile("testdata/tokenizer/corpus/mixed_000.txt");
  ASSERT_TRUE(text.ok());
  const Ids want = t.Encode(*text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) got[i] = t.Encode(*text);
    });
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, want);
}

TEST(Tokenizer, LoadsFromAModelFolder) {
  auto t = Tokenizer::Load("testdata/tokenizer/ours");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->vocab_size(), 12013);
}

// Load errors: a broken file names the field, what was expected and what was found.
class LoadErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto j = ReadJsonFile("testdata/tokenizer/variants/a.json");
    ASSERT_TRUE(j.ok()) << j.status().message();
    base_ = new nlohmann::json(std::move(*j));
  }
  static void TearDownTestSuite() { delete base_; }
  static std::string ErrorOf(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = *base_;
    edit(j);
    auto t = Tokenizer::FromJson(j, "broken.json");
    return t.ok() ? "" : t.status().message();
  }
  static nlohmann::json* base_;
};
nlohmann::json* LoadErrors::base_ = nullptr;

TEST_F(LoadErrors, NameTheFieldAndWhatWasFound) {
  EXPECT_EQ(ErrorOf([](auto&) {}), "");
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> expect;
  } cases[] = {
      {[](auto& j) { j.erase("model"); }, {"broken.json", "model: missing"}},
      {[](auto& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "WordPiece"}},
      {[](auto& j) { j["model"]["vocab"] = 5; }, {"model.vocab", "expected an object", "number"}},
      {[](auto& j) { j["model"]["vocab"]["x"] = "seven"; }, {"model.vocab[\"x\"]", "\"seven\""}},
      {[](auto& j) { j["model"]["vocab"]["x"] = 1000000000; }, {"model.vocab[\"x\"]", "1000000000"}},
      {[](auto& j) { j["added_tokens"][0]["id"] = 4000000000ll; }, {"added_tokens[0].id", "4000000000"}},
      {[](auto& j) { j["model"]["merges"][3] = "nospace"; }, {"model.merges[3]", "\"nospace\""}},
      {[](auto& j) { j["model"]["merges"][4] = "\xC4\xA0zzz qqq"; }, {"model.merges[4]", "not in the vocab"}},
      {[](auto& j) { j["model"]["merges"][5] = nlohmann::json::array({1, 2}); }, {"model.merges[5]", "[1,2]"}},
      {[](auto& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout", "0.1"}},
      {[](auto& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"}},
      {[](auto& j) { j["model"]["unk_token"] = "<nope>"; }, {"model.unk_token", "<nope>"}},
      {[](auto& j) { j["normalizer"] = {{"type", "BertNormalizer"}}; }, {"normalizer", "BertNormalizer"}},
      {[](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer", "Whitespace"}},
      {[](auto& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "ByteLevel"}},
      {[](auto& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(bad"}}}, {"behavior", "Isolated"}},
                                                  {{"type", "ByteLevel"}}}}};
       },
       {"pre_tokenizer.pretokenizers[0].pattern", "(bad"}},
      {[](auto& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
                                                  {{"type", "ByteLevel"}}}}};
       },
       {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"}},
      {[](auto& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}}}}};
       },
       {"pre_tokenizer.pretokenizers[1]", "after ByteLevel"}},
      {[](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder", "WordPiece"}},
      {[](auto& j) { j["decoder"] = nullptr; }, {"decoder", "ByteLevel"}},
      {[](auto& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, {"post_processor", "BertProcessing"}},
      {[](auto& j) { j["added_tokens"][0]["id"] = "x"; }, {"added_tokens[0].id", "\"x\""}},
      {[](auto& j) { j["added_tokens"][1]["lstrip"] = 1; }, {"added_tokens[1].lstrip", "1"}},
      {[](auto& j) { j["added_tokens"][2].erase("content"); }, {"added_tokens[2].content"}},
      {[](auto& j) { j = nlohmann::json::array(); }, {"expected a JSON object"}},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    std::string msg = ErrorOf(cases[i].edit);
    ASSERT_FALSE(msg.empty()) << "case " << i << " loaded without error";
    for (const std::string& part : cases[i].expect)
      EXPECT_NE(msg.find(part), std::string::npos) << "case " << i << ": \"" << part << "\" not in: " << msg;
  }
}

TEST(Tokenizer, MissingOrUnparsableFile) {
  auto missing = Tokenizer::Load("testdata/tokenizer/no_such_dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_dir"), std::string::npos);
  auto not_json = Tokenizer::Load("testdata/tokenizer/corpus/english_000.txt");
  ASSERT_FALSE(not_json.ok());
}

}  // namespace
}  // namespace m2::text
