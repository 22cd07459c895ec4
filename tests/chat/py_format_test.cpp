// Python value printing: expected strings are what CPython 3.11 prints (repr, str,
// json.dumps(ensure_ascii=False)) for the same values.
#include "chat/py_format.h"

#include <gtest/gtest.h>

namespace m2::chat {
namespace {

TEST(PyFloatRepr, MatchesPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1e-5, "1e-05"},
      {0.0001, "0.0001"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {123.456, "123.456"},
      {2.5, "2.5"},
      {100.0, "100.0"},
      {1e22, "1e+22"},
      {0.3, "0.3"},
      {2.0 / 3.0, "0.6666666666666666"},
      {-1.5e-10, "-1.5e-10"},
      {123456789012345.6, "123456789012345.6"},
      {9007199254740993.0, "9007199254740992.0"},
      {1234567890123456.7, "1234567890123456.8"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(PyFloatRepr(value), expected) << value;
}

TEST(PyRepr, StringQuotesFollowPython) {
  EXPECT_EQ(PyRepr(Json("plain")), "'plain'");
  EXPECT_EQ(PyRepr(Json("it's")), "\"it's\"");       // only ' inside: double quotes
  EXPECT_EQ(PyRepr(Json("\"")), "'\"'");              // only ": single quotes
  EXPECT_EQ(PyRepr(Json("a'b\"c")), "'a\\'b\"c'");    // both: single quotes, ' escaped
  EXPECT_EQ(PyRepr(Json("back\\slash")), "'back\\\\slash'");
}

TEST(PyRepr, EscapesNonPrintableCodePoints) {
  // '\x00\x1f\x7f\x80\x9f\xa0\xad\u0378\u200b\u2028\ue000\U000e0001\U0010ffff😀'
  const std::string s =
      std::string("\x00\x1f\x7f", 3) + "\xC2\x80\xC2\x9F\xC2\xA0\xC2\xAD\xCD\xB8\xE2\x80\x8B\xE2\x80\xA8\xEE\x80\x80"
      "\xF3\xA0\x80\x81\xF4\x8F\xBF\xBF\xF0\x9F\x98\x80";
  EXPECT_EQ(PyRepr(Json(s)),
            "'\\x00\\x1f\\x7f\\x80\\x9f\\xa0\\xad\\u0378\\u200b\\u2028\\ue000\\U000e0001\\U0010ffff\xF0\x9F\x98\x80'");
  EXPECT_EQ(PyRepr(Json("tab\tnl\ncr\r")), "'tab\\tnl\\ncr\\r'");
  EXPECT_EQ(PyRepr(Json("中文 ü")), "'中文 ü'");
}

TEST(PyRepr, ContainersAndScalars) {
  const Json v = Json::parse(R"({"b": [1, 2.5, null, true, false], "a": {"x": "y"}, "e": [], "o": {}})");
  EXPECT_EQ(PyRepr(v), "{'b': [1, 2.5, None, True, False], 'a': {'x': 'y'}, 'e': [], 'o': {}}");
  EXPECT_EQ(PyStr(Json("raw 'text'")), "raw 'text'");
  EXPECT_EQ(PyStr(Json(nullptr)), "None");
  EXPECT_EQ(PyStr(Json(true)), "True");
  EXPECT_EQ(PyStr(Json(-7)), "-7");
  EXPECT_EQ(PyStr(Json(18446744073709551615ULL)), "18446744073709551615");
  EXPECT_EQ(PyStr(Json(1.0)), "1.0");
}

TEST(PyJsonDumps, DefaultSeparatorsAndEnsureAsciiFalse) {
  const Json v = Json::parse(R"({"z": 1, "a": [true, null, 1.0, 1e-05, "x"], "n": {}})");
  EXPECT_EQ(PyJsonDumps(v), R"({"z": 1, "a": [true, null, 1.0, 1e-05, "x"], "n": {}})");  // key order kept
  // json.dumps('\x00\x1f\x7f"\\\b\f\n\r\t</é', ensure_ascii=False)
  const std::string s = std::string("\x00\x1f\x7f\"\\\b\f\n\r\t</\xC3\xA9", 14);
  EXPECT_EQ(PyJsonDumps(Json(s)), "\"\\u0000\\u001f\x7f\\\"\\\\\\b\\f\\n\\r\\t</\xC3\xA9\"");
  EXPECT_EQ(PyJsonDumps(Json::array()), "[]");
  EXPECT_EQ(PyJsonDumps(Json(-0.0)), "-0.0");
}

TEST(PyTruthy, FollowsPython) {
  EXPECT_FALSE(PyTruthy(Json(nullptr)));
  EXPECT_FALSE(PyTruthy(Json("")));
  EXPECT_FALSE(PyTruthy(Json(0)));
  EXPECT_FALSE(PyTruthy(Json(0.0)));
  EXPECT_FALSE(PyTruthy(Json(false)));
  EXPECT_FALSE(PyTruthy(Json::array()));
  EXPECT_FALSE(PyTruthy(Json::object()));
  EXPECT_TRUE(PyTruthy(Json(" ")));
  EXPECT_TRUE(PyTruthy(Json(-1)));
  EXPECT_TRUE(PyTruthy(Json(0.5)));
  EXPECT_TRUE(PyTruthy(Json::array({0})));
}

// Integers beyond 64 bits print with every digit, as Python prints an int.
TEST(PyBigInteger, PrintsEveryDigit) {
  const Json big = MakeBigInteger("-123456789012345678901234567890");
  EXPECT_TRUE(IsBigInteger(big));
  EXPECT_FALSE(IsBigInteger(Json::binary({1, 2})));
  EXPECT_EQ(BigIntegerText(big), "-123456789012345678901234567890");
  EXPECT_EQ(BigIntegerText(Json(5)), "");
  EXPECT_EQ(PyStr(big), "-123456789012345678901234567890");
  Json v = Json::object();
  v["n"] = Json::array({MakeBigInteger("18446744073709551616"), 1});
  EXPECT_EQ(PyRepr(v), "{'n': [18446744073709551616, 1]}");
  EXPECT_EQ(PyJsonDumps(v), R"({"n": [18446744073709551616, 1]})");
  EXPECT_TRUE(PyTruthy(big));
  EXPECT_EQ(JsonTypeName(big), "a number");
}

}  // namespace
}  // namespace m2::chat
