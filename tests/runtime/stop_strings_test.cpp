// Stop strings over streamed pieces: what is shown, what is held back, and where it stops.
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

namespace m2::runtime {
namespace {

// Feeds `pieces` and returns what was shown, pieces joined by '|'.
std::string Stream(StopStringFilter& f, const std::vector<std::string>& pieces) {
  std::string shown;
  for (const std::string& p : pieces) {
    auto r = f.Push(p);
    shown += r.text + "|";
    if (r.stopped) return shown + "STOP(" + r.stop + ")";
  }
  return shown + f.Flush();
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStop) {
  StopStringFilter f({"END"});
  auto r = f.Push("hello E");
  EXPECT_EQ(r.text, "hello ");
  EXPECT_EQ(f.held(), "E");
  r = f.Push("N");
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(f.held(), "EN");
  r = f.Push("X more");  // not the stop after all: released
  EXPECT_EQ(r.text, "ENX more");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(f.held(), "");
}

TEST(StopStrings, StopAcrossPiecesIsNotShown) {
  StopStringFilter f({"</answer>"});
  EXPECT_EQ(Stream(f, {"The answer is 4", "2.</an", "swer>", " after"}), "The answer is 4|2.||STOP(</answer>)");
  // Afterwards nothing more comes out.
  EXPECT_EQ(f.Push("x").text, "");
  EXPECT_EQ(f.Flush(), "");
}

TEST(StopStrings, EarliestOccurrenceWinsAndTextAfterItIsDropped) {
  StopStringFilter f({"world", "lo w"});
  auto r = f.Push("hello world!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(r.stop, "lo w");
}

TEST(StopStrings, StopAtTheVeryStartAndOverlappingPrefixes) {
  StopStringFilter f({"\n\n"});
  EXPECT_EQ(Stream(f, {"\n", "\n", "x"}), "||STOP(\n\n)");
  // "aab" after "aaab": the held tail must be the longest prefix ("aa"), not the shortest.
  StopStringFilter g({"aab"});
  EXPECT_EQ(Stream(g, {"xa", "a", "a", "b"}), "x||a||STOP(aab)");
}

TEST(StopStrings, EndOfStreamReleasesTheHeldTail) {
  StopStringFilter f({"STOP"});
  EXPECT_EQ(Stream(f, {"abc ST"}), "abc |ST");
  StopStringFilter none({});
  EXPECT_EQ(Stream(none, {"a", "b"}), "a|b|");
  StopStringFilter empty({""});  // ignored, would match everywhere
  EXPECT_EQ(Stream(empty, {"a"}), "a|");
}

TEST(StopStrings, MultiByteCharactersStayWhole) {
  StopStringFilter f({"\xE4\xBD\xA0\xE5\xA5\xBD"});  // "你好"
  auto r = f.Push("ok \xE4\xBD\xA0");
  EXPECT_EQ(r.text, "ok ");
  r = f.Push("\xE4\xBB\xAC");  // "们": not the stop
  EXPECT_EQ(r.text, "\xE4\xBD\xA0\xE4\xBB\xAC");
}

}  // namespace
}  // namespace m2::runtime
