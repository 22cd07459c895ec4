#include "chat/json_parse.h"

#include <vector>

namespace m2::chat {

namespace {

// True for JSON integer text: an optional '-' and digits (no fraction, no exponent).
bool IsIntegerText(std::string_view s) {
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool IsIdentifier(const std::string& key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  for (char c : key) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// Builds the value from nlohmann's SAX events (the DOM parser it replaces holds big integers
// as doubles and throws on overflow), tracking the path for error messages.
class Builder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit Builder(Json& root) : root_(root) {}

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool v) { return Put(v) != nullptr; }
  bool number_integer(number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(number_float_t v, const string_t& text) {
    // nlohmann reads an integer that overflows 64 bits as a double; keep its digits.
    if (IsIntegerText(text)) return Put(MakeBigInteger(text)) != nullptr;
    return Put(v) != nullptr;
  }
  bool string(string_t& s) { return Put(std::move(s)) != nullptr; }
  bool binary(binary_t& b) { return Put(Json::binary(std::move(b))) != nullptr; }  // not in JSON text
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool key(string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string& token, const Json::exception& e) {
    position_ = position;
    token_ = token;
    exception_id_ = e.id;
    message_ = e.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  int exception_id() const { return exception_id_; }
  size_t position() const { return position_; }
  const std::string& token() const { return token_; }
  const std::string& message() const { return message_; }

  // Where the value being read sits: "a.b[2]", "" at the top.
  std::string Path() const {
    std::string path;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.container->is_array()) {
        // An open inner container is the array's last item; in the innermost array, the
        // value being read is the next one.
        path += fmt::format("[{}]", f.container->size() - (i + 1 < frames_.size() ? 1 : 0));
      } else if (IsIdentifier(f.key)) {
        if (!path.empty()) path += '.';
        path += f.key;
      } else {
        path += fmt::format("[{}]", PyJsonDumps(Json(f.key)));
      }
    }
    return path;
  }

 private:
  struct Frame {
    Json* container;
    std::string key;  // objects: the key of the value being read
  };

  // Places a value in the open container (or at the top); returns where it went.
  Json* Put(Json&& value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.container->is_array()) {
      f.container->push_back(std::move(value));
      return &f.container->back();
    }
    Json& slot = (*f.container)[f.key];
    slot = std::move(value);
    return &slot;
  }
  bool Open(Json&& container) {
    if (static_cast<int>(frames_.size()) >= kMaxJsonNesting) {
      too_deep_ = true;
      return false;
    }
    Json* placed = Put(std::move(container));
    frames_.push_back({placed, {}});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }

  Json& root_;
  // Pointers into the value: only the innermost open container grows while they are held.
  std::vector<Frame> frames_;
  bool too_deep_ = false;
  int exception_id_ = 0;
  size_t position_ = 0;
  std::string token_, message_;
};

}  // namespace

Result<Json> ParseOrderedJson(std::string_view text, const std::string& what) {
  Json json;
  Builder builder(json);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const Json::exception& e) {  // not expected with a SAX handler; never let one escape
    return Error("{} is not valid JSON: {}", what, e.what());
  }
  if (ok) return json;
  if (builder.too_deep()) {
    return Error("{}: expected JSON nested at most {} levels deep, found deeper", what, kMaxJsonNesting);
  }
  const std::string path = builder.Path();
  const std::string where = path.empty() ? what : what + ", at " + path;
  if (builder.exception_id() == 406) {  // nlohmann's "number overflow"
    return Error("{}: expected a number within the range of a double, found {} (at byte {})", where,
                 builder.token(), builder.position());
  }
  return Error("{} is not valid JSON (at byte {}): {}", what, builder.position(), builder.message());
}

}  // namespace m2::chat
