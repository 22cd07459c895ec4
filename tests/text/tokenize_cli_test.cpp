// `m2 tokenize` / `m2 detokenize` end to end (the binary named by $M2_BINARY).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string RunM2(const std::string& args, int* status) {
  const char* bin = std::getenv("M2_BINARY");
  std::string cmd = std::string(bin ? bin : "build/src/cli/m2") + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

const std::string kModel = "-m testdata/tokenizer/ours";

TEST(TokenizeCli, TokenizeAndDetokenize) {
  int st;
  EXPECT_EQ(RunM2("tokenize " + kModel + " -p '<think>\nhmm\n</think>'", &st), "12005,198,71,939,198,12006\n");
  EXPECT_EQ(st, 0);
  EXPECT_EQ(RunM2("tokenize " + kModel + " --no-special -p '<think>'", &st), "27,268,267,74,29\n");
  EXPECT_EQ(RunM2("tokenize " + kModel + " --json -p 'Hello, world'", &st),
            "{\"ids\":[39,10867,11,3133,4495],\"tokens\":[\"H\",\"ello\",\",\",\"\xC4\xA0wor\",\"ld\"]}\n");
  EXPECT_EQ(RunM2("detokenize " + kModel + " --ids 12005,198,71,939,198,12006", &st), "<think>\nhmm\n</think>");
  EXPECT_EQ(RunM2("detokenize " + kModel + " --skip-special --ids 12005,198,71,939", &st), "\nhmm");
  EXPECT_EQ(RunM2("tokenize " + kModel + " < testdata/tokenizer/corpus/zh_000.txt", &st),
            RunM2("tokenize " + kModel + " -f testdata/tokenizer/corpus/zh_000.txt", &st));
}

TEST(TokenizeCli, ErrorsAreMessagesNotCrashes) {
  int st;
  std::string out = RunM2("detokenize " + kModel + " --ids 1,99999999", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("99999999"), std::string::npos) << out;
  out = RunM2("tokenize -m testdata/tokenizer/variants/missing.json -p x", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("m2: error:"), std::string::npos) << out;
}

}  // namespace
