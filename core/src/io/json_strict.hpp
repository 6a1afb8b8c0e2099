// entgraph internal: the one JSON parse of every DOM reader (capture.json,
// predictor parameter files, teacher configs; the safetensors header has its
// own SAX handler with the same rules).
//
// nlohmann::json's parser keeps the last of repeated keys silently and builds
// a tree of any depth. parse_json_strict() instead rejects a key repeated in
// any object, at any depth, and more than max_levels levels of nested arrays
// and objects; json_excerpt() quotes a value in a message without printing a
// multi-kilobyte object whole.
#pragma once

#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "io/binary.hpp"

namespace entgraph::detail {

// Levels of nested arrays and objects every reader accepts (a file of any
// format of the project needs fewer than 10).
inline constexpr int kJsonMaxLevels = 64;

// A JSON value as at most max_len printable characters, "..." marking a cut.
template <class Json>
std::string json_excerpt(const Json& value, std::size_t max_len = 60) {
  const std::string text = value.dump(-1, ' ', true);
  std::string out = printable(text.data(), text.size(), max_len);
  if (text.size() > max_len) out += "...";
  return out;
}

// The length of nlohmann::json's tag in front of its messages
// ("[json.exception.parse_error.101] "), 0 if `what` has none: C++'s words
// about itself, which the JavaScript package leaves out.
inline std::size_t json_library_tag_length(const std::string& what) {
  const std::size_t bracket = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
  return bracket == std::string::npos ? 0 : bracket + 2;
}

// A key or other string from a file, quoted, at most 60 printable characters.
inline std::string quoted_key(const std::string& key) {
  return "\"" + printable(key.data(), key.size(), 60) + (key.size() > 60 ? "...\"" : "\"");
}

// Parses text as JSON (Json: nlohmann::json or nlohmann::ordered_json).
// Throws entgraph::Error "<prefix><what> is not valid JSON (...)", "<prefix><what>
// is nested too deeply (...)" or, unless duplicate is given, "<prefix>duplicate
// key \"k\" in <what>" (with the object's own key when it is not the top-level
// one: "duplicate key \"x\" in the object \"settings\" of <what>"). With
// duplicate, the first repeated key's message (without prefix) is stored
// there instead, for readers that check other things first.
template <class Json>
Json parse_json_strict(const std::string& text, const Message& prefix, const std::string& what,
                       int max_levels = kJsonMaxLevels, std::string* duplicate = nullptr) {
  // keys[l]: the keys seen so far in the object open at level l (1 = the
  // top-level value); owner[l]: the key of the nearest enclosing object that
  // the value open at level l belongs to; last_key[l]: the latest key of an
  // object at level l ("" for an array).
  std::vector<std::set<std::string>> keys(2);
  std::vector<std::string> owner(2), last_key(2);
  std::vector<bool> is_object(2, false);
  std::string repeated;
  bool too_deep = false;
  const typename Json::parser_callback_t callback = [&](int depth, typename Json::parse_event_t event,
                                                        Json& parsed) {
    using Event = typename Json::parse_event_t;
    // depth counts the enclosing arrays and objects; a new one is level depth + 1.
    if (event == Event::object_start || event == Event::array_start) {
      if (depth + 1 > max_levels) too_deep = true;
      if (too_deep) return false;  // once too deep, discard everything so nothing deep is built
      const auto level = static_cast<std::size_t>(depth) + 1;
      if (keys.size() <= level) {
        keys.resize(level + 1);
        owner.resize(level + 1);
        last_key.resize(level + 1);
        is_object.resize(level + 1);
      }
      const auto parent = static_cast<std::size_t>(depth);
      keys[level].clear();
      last_key[level].clear();
      is_object[level] = event == Event::object_start;
      owner[level] = depth < 1 ? std::string() : is_object[parent] ? last_key[parent] : owner[parent];
    } else if (event == Event::key && !too_deep && depth >= 1 && parsed.is_string()) {
      const auto level = static_cast<std::size_t>(depth);
      const std::string& k = parsed.template get_ref<const std::string&>();
      if (level < keys.size()) {
        last_key[level] = k;
        if (!keys[level].insert(k).second && repeated.empty())
          repeated = "duplicate key " + quoted_key(k) +
                     (level > 1 && !owner[level].empty() ? " in the object " + quoted_key(owner[level]) + " of "
                                                         : std::string(" in ")) +
                     what;
      }
    }
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(text, callback);
  } catch (const typename Json::exception& e) {
    const std::string words = printable(e.what(), std::strlen(e.what()), 200);
    const std::size_t cut = json_library_tag_length(words);
    throw Error(prefix + what + " is not valid JSON (" + cpp_detail(words.substr(0, cut)) + words.substr(cut) + ")");
  }
  if (too_deep)
    throw Error(prefix + what + " is nested too deeply (more than " + std::to_string(max_levels) +
                " levels of arrays and objects)");
  if (!repeated.empty()) {
    if (duplicate == nullptr) throw Error(prefix + repeated);
    *duplicate = repeated;
  }
  return j;
}

}  // namespace entgraph::detail
