// Tests of the capture reader and writer (entgraph/io/capture.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"
#include "io/binary.hpp"
#include "io_test_support.hpp"

namespace fs = std::filesystem;
using entgraph::Capture;
using entgraph::Error;
using entgraph::HeadSettings;
using entgraph::NpyArray;
using entgraph::NpyDtype;
using namespace entgraph::test;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

float half_rounded(float v) {
  return static_cast<float>(entgraph::detail::half_to_double(entgraph::detail::float_to_half(v)));
}

// A .npy file of float16 values.
void write_half_npy(const std::string& path, const std::vector<float>& data, const std::vector<std::size_t>& shape) {
  NpyArray a;
  a.dtype = NpyDtype::float16;
  a.shape = shape;
  a.bytes.resize(data.size() * 2);
  for (std::size_t i = 0; i < data.size(); ++i)
    entgraph::detail::store_le(a.bytes.data() + 2 * i, entgraph::detail::float_to_half(data[i]), 2);
  entgraph::write_npy(path, a);
}

// 2 layers, 3 heads, head_dim 4, sequences of 3 and 2 tokens, Gaussian data.
Capture sample(bool with_values, std::uint64_t seed = 7) {
  Capture c = Capture::make(2, 3, 4, {3, 2}, with_values);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (auto* a : {&c.queries, &c.keys, &c.values})
    for (float& x : *a) x = dist(rng);
  return c;
}

// Index of element (layer, head, token, dim) in an array of sample().
std::size_t at(std::size_t layer, std::size_t head, std::size_t token, std::size_t dim) {
  return ((layer * 3 + head) * 5 + token) * 4 + dim;
}

// One sequence of a whole-capture array, [layers, heads, lengths[s], head_dim]:
// what CaptureWriter::write_sequence takes.
std::vector<float> sequence_of(const Capture& c, const std::vector<float>& a, std::size_t s) {
  if (a.empty()) return {};
  std::vector<float> out;
  const std::size_t first = c.offset(s), tokens = c.tokens();
  for (std::size_t hi = 0; hi < c.layers * c.heads; ++hi) {
    const float* src = a.data() + (hi * tokens + first) * c.head_dim;
    out.insert(out.end(), src, src + c.lengths[s] * c.head_dim);
  }
  return out;
}

// A CaptureWriter for the sizes, settings, texts and provenance of c.
entgraph::CaptureWriter writer_for(const std::string& dir, const Capture& c, NpyDtype dtype = NpyDtype::float32) {
  return entgraph::CaptureWriter(dir, c.layers, c.heads, c.head_dim, c.lengths, c.has_values(), c.settings, c.texts,
                                 c.provenance, dtype);
}

// capture.json of sample() as a list of (key, JSON text) pairs; changes
// replace a key's value, add a key, or (with kRemove) remove it.
const char* const kRemove = "<remove>";
using Fields = std::vector<std::pair<std::string, std::string>>;

std::string capture_json(const Fields& changes) {
  Fields fields = {{"format", "\"entgraph-capture\""},
                   {"version", "1"},
                   {"layers", "2"},
                   {"heads", "3"},
                   {"head_dim", "4"},
                   {"lengths", "[3, 2]"},
                   {"queries", "\"queries.npy\""},
                   {"keys", "\"keys.npy\""},
                   {"values", "\"values.npy\""},
                   {"texts", "[\"first\", \"second\"]"}};
  for (const auto& change : changes) {
    bool found = false;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it->first == change.first) {
        found = true;
        if (change.second == kRemove)
          fields.erase(it);
        else
          it->second = change.second;
        break;
      }
    }
    if (!found) fields.push_back(change);
  }
  std::string text = "{";
  for (std::size_t i = 0; i < fields.size(); ++i)
    text += (i > 0 ? ",\n  \"" : "\n  \"") + fields[i].first + "\": " + fields[i].second;
  return text + "\n}\n";
}

}  // namespace

TEST_SUITE("io") {
  TEST_CASE("capture: make gives zero-filled arrays, default settings and consistent sizes") {
    const Capture c = Capture::make(2, 3, 4, {3, 2}, true);
    CHECK(c.tokens() == 5);
    CHECK(c.sequences() == 2);
    CHECK(c.offset(0) == 0);
    CHECK(c.offset(1) == 3);
    CHECK(c.has_values());
    CHECK(c.queries.size() == 2 * 3 * 5 * 4);
    CHECK(c.keys.size() == c.queries.size());
    CHECK(c.values.size() == c.queries.size());
    CHECK(c.settings.size() == 6);
    CHECK(c.head(1, 2).alpha == 1.5);
    CHECK_FALSE(c.head(1, 2).causal);
    CHECK(c.head(1, 2).scale == 0.5);  // 1 / sqrt(4)
    CHECK(c.provenance == "{}");
    CHECK(c.texts.empty());
    CHECK_NOTHROW(entgraph::validate_capture(c));
    CHECK_FALSE(Capture::make(1, 1, 1, {1}, false).has_values());

    CHECK_ERROR_CONTAINS(Capture::make(0, 3, 4, {3}, false), "Capture::make: layers is 0");
    CHECK_ERROR_CONTAINS(Capture::make(2, 0, 4, {3}, false), "heads is 0");
    CHECK_ERROR_CONTAINS(Capture::make(2, 3, 0, {3}, false), "head_dim is 0");
    CHECK_ERROR_CONTAINS(Capture::make(2, 3, 4, {}, false), "lengths is empty");
    CHECK_ERROR_CONTAINS(Capture::make(2, 3, 4, {3, 0}, false), "lengths[1] is 0");
    const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
    CHECK_ERROR_CONTAINS(Capture::make(huge, 4, 1, {1}, false), "overflows");
    CHECK_ERROR_CONTAINS(Capture::make(1, 1, 1, {huge, huge, 2}, false), "overflow");
    CHECK_ERROR_CONTAINS(c.offset(2), "Capture::offset: sequence out of range (got 2, expected < 2)");
    CHECK_ERROR_CONTAINS(c.head(2, 0), "Capture::head: layer out of range (got 2, expected < 2)");
    CHECK_ERROR_CONTAINS(c.head(0, 3), "Capture::head: head out of range (got 3, expected < 3)");
  }

  TEST_CASE("capture: views point at the rows of one layer, head and sequence") {
    Capture c = Capture::make(2, 3, 4, {3, 2}, true);
    for (std::size_t i = 0; i < c.queries.size(); ++i) {
      c.queries[i] = static_cast<float>(i);
      c.keys[i] = static_cast<float>(i) + 0.25f;
      c.values[i] = static_cast<float>(i) + 0.5f;
    }
    const Capture& cc = c;
    for (std::size_t l = 0; l < 2; ++l) {
      for (std::size_t h = 0; h < 3; ++h) {
        for (std::size_t s = 0; s < 2; ++s) {
          CAPTURE(l);
          CAPTURE(h);
          CAPTURE(s);
          const auto q = cc.queries_of(l, h, s);
          const auto k = cc.keys_of(l, h, s);
          const auto v = cc.values_of(l, h, s);
          const std::size_t first = at(l, h, c.offset(s), 0);
          CHECK(q.data == c.queries.data() + first);
          CHECK(k.data == c.keys.data() + first);
          CHECK(v.data == c.values.data() + first);
          CHECK(q.rows == c.lengths[s]);
          CHECK(q.cols == 4);
          CHECK(q.stride == 4);
          for (std::size_t t = 0; t < c.lengths[s]; ++t)
            for (std::size_t d = 0; d < 4; ++d) {
              CHECK(q(t, d) == c.queries[at(l, h, c.offset(s) + t, d)]);
              CHECK(v(t, d) == c.values[at(l, h, c.offset(s) + t, d)]);
            }
        }
      }
    }
    // Token 1 of sequence 1 is row 3 + 1 of the token axis.
    c.keys_of(1, 2, 1)(1, 3) = -42.0f;
    CHECK(c.keys[at(1, 2, 4, 3)] == -42.0f);
    c.queries_of(0, 1, 0)(2, 0) = 7.5f;
    CHECK(c.queries[at(0, 1, 2, 0)] == 7.5f);
    c.values_of(1, 0, 0)(0, 1) = 3.0f;
    CHECK(c.values[at(1, 0, 0, 1)] == 3.0f);

    CHECK_ERROR_CONTAINS(cc.queries_of(2, 0, 0), "Capture::queries_of: layer out of range (got 2, expected < 2)");
    CHECK_ERROR_CONTAINS(cc.keys_of(0, 3, 0), "Capture::keys_of: head out of range (got 3, expected < 3)");
    CHECK_ERROR_CONTAINS(c.values_of(0, 0, 2), "Capture::values_of: sequence out of range (got 2, expected < 2)");
    Capture no_values = Capture::make(1, 1, 2, {2}, false);
    CHECK_ERROR_CONTAINS(no_values.values_of(0, 0, 0), "Capture::values_of: the capture has no values");
    no_values.keys.pop_back();
    CHECK_ERROR_CONTAINS(no_values.keys_of(0, 0, 0), "Capture::keys_of: keys has 3 elements (expected 4)");
  }

  TEST_CASE("capture: float32 round trip is bit-exact, with and without values, per-capture and per-head settings") {
    TempDir tmp;
    int n = 0;
    for (bool with_values : {false, true}) {
      for (bool per_head : {false, true}) {
        CAPTURE(with_values);
        CAPTURE(per_head);
        Capture c = sample(with_values, 11 + static_cast<std::uint64_t>(n));
        c.texts = {"The first sequence.", "Zweite \xc3\xbc \"quoted\" \\ line\nbreak"};
        c.provenance = R"({"model":"tiny","text":"abc","layers":[1,2],"nested":{"x":null,"y":0.1}})";
        for (std::size_t i = 0; i < c.settings.size(); ++i) {
          HeadSettings& h = c.settings[i];
          if (per_head) {
            h.alpha = 1.0 + 0.25 * static_cast<double>(i);
            h.causal = i % 2 == 1;
            h.scale = 0.1 * static_cast<double>(i + 1) / 3.0;
          } else {
            h.alpha = 2.0;
            h.causal = true;
            h.scale = 1.0 / std::sqrt(3.0);
          }
        }
        const std::string dir = tmp.file("round_trip_" + std::to_string(n++));
        entgraph::write_capture(dir, c);
        CHECK(fs::exists(dir + "/values.npy") == with_values);
        const std::string json = read_text(dir + "/capture.json");
        CAPTURE(json);
        CHECK(contains(json, "\"format\": \"entgraph-capture\""));
        CHECK(contains(json, "\"version\": 1"));
        CHECK(contains(json, "\"alpha\": [[") == per_head);
        CHECK(contains(json, "\"causal\": [[") == per_head);
        CHECK(contains(json, "\"causal\": true") == !per_head);
        CHECK(contains(json, "\"values\": \"values.npy\"") == with_values);

        const Capture r = entgraph::read_capture(dir);
        CHECK(r.layers == 2);
        CHECK(r.heads == 3);
        CHECK(r.head_dim == 4);
        CHECK(r.lengths == c.lengths);
        CHECK(same_bits(r.queries, c.queries));
        CHECK(same_bits(r.keys, c.keys));
        CHECK(same_bits(r.values, c.values));
        CHECK(r.has_values() == with_values);
        REQUIRE(r.settings.size() == c.settings.size());
        for (std::size_t i = 0; i < c.settings.size(); ++i) {
          CAPTURE(i);
          CHECK(r.settings[i].alpha == c.settings[i].alpha);
          CHECK(r.settings[i].causal == c.settings[i].causal);
          CHECK(r.settings[i].scale == c.settings[i].scale);  // doubles survive the JSON text exactly
        }
        CHECK(r.texts == c.texts);
        CHECK(r.provenance == c.provenance);  // compact, key order kept
        CHECK(entgraph::read_npy(dir + "/queries.npy").dtype == NpyDtype::float32);
        CHECK(entgraph::read_npy(dir + "/keys.npy").shape == std::vector<std::size_t>{2, 3, 5, 4});
      }
    }
  }

  TEST_CASE("capture: float16 round trip gives the half-rounded values") {
    TempDir tmp;
    Capture c = sample(true, 3);
    // Edge values: the largest half, a subnormal half, values that round to even, zero of both signs.
    c.queries[0] = 65504.0f;
    c.queries[1] = -65504.0f;
    c.queries[2] = 65519.0f;  // still rounds to 65504
    c.keys[0] = 1e-6f;
    c.keys[1] = 1.0f + 1.0f / 2048.0f;  // halfway between 1 and the next half: rounds to 1 (even)
    c.keys[2] = -0.0f;
    c.values[5] = 0.1f;
    const std::string dir = tmp.file("half");
    entgraph::write_capture(dir, c, NpyDtype::float16);
    for (const char* name : {"queries.npy", "keys.npy", "values.npy"})
      CHECK(entgraph::read_npy(dir + "/" + name).dtype == NpyDtype::float16);
    const Capture r = entgraph::read_capture(dir);
    REQUIRE(r.queries.size() == c.queries.size());
    REQUIRE(r.values.size() == c.values.size());
    std::size_t changed = 0;
    for (std::size_t i = 0; i < c.queries.size(); ++i) {
      CAPTURE(i);
      CHECK(r.queries[i] == half_rounded(c.queries[i]));
      CHECK(r.keys[i] == half_rounded(c.keys[i]));
      CHECK(r.values[i] == half_rounded(c.values[i]));
      changed += r.queries[i] != c.queries[i];
    }
    CHECK(changed > 0);  // Gaussian floats are not all halves
    CHECK(r.queries[2] == 65504.0f);
    CHECK(r.keys[1] == 1.0f);
    CHECK(std::signbit(r.keys[2]));
    CHECK(r.keys[0] > 0.0f);  // subnormal kept
    CHECK(r.settings[0].scale == c.settings[0].scale);

    // Beyond the float16 range: an error naming the array and the element, and nothing written.
    c.values[at(1, 2, 4, 3)] = -70000.0f;
    const std::string fresh = tmp.file("half_overflow");
    const std::string message = thrown([&] { entgraph::write_capture(fresh, c, NpyDtype::float16); });
    CAPTURE(message);
    CHECK(starts_with(message, "write_capture: " + fresh +
                                   ": values: value -70000 at layer 1, head 2, token 4 "
                                   "(sequence 1, position 1), dim 3 is beyond the float16 range"));
    CHECK_FALSE(fs::exists(fresh));
    CHECK_NOTHROW(entgraph::write_capture(fresh, c, NpyDtype::float32));
    CHECK_ERROR_CONTAINS(entgraph::write_capture(fresh, c, NpyDtype::int32), "unsupported dtype int32");
  }

  TEST_CASE("capture: the reader applies defaults and accepts per-head arrays and any whitespace") {
    TempDir tmp;
    const Capture c = sample(false, 5);
    const std::vector<std::size_t> shape = {2, 3, 5, 4};
    entgraph::write_npy(tmp.file("q.npy"), c.queries.data(), shape);
    write_half_npy(tmp.file("k16.npy"), c.keys, shape);  // dtypes may differ between files
    write_text(tmp.file("capture.json"),
               "{\"format\":\"entgraph-capture\",\"version\":1,\"layers\":2,\"heads\":3,\"head_dim\":4,"
               "\"lengths\":[3,2],\"queries\":\"q.npy\",\"keys\":\"k16.npy\"}");
    Capture r = entgraph::read_capture(tmp.path());
    CHECK(same_bits(r.queries, c.queries));
    for (std::size_t i = 0; i < c.keys.size(); ++i) CHECK(r.keys[i] == half_rounded(c.keys[i]));
    CHECK_FALSE(r.has_values());
    CHECK(r.texts.empty());
    CHECK(r.provenance == "{}");
    for (const HeadSettings& h : r.settings) {
      CHECK(h.alpha == 1.5);
      CHECK_FALSE(h.causal);
      CHECK(h.scale == 0.5);
    }

    write_text(
        tmp.file("capture.json"),
        "{ \"format\" : \"entgraph-capture\",\n\t\"version\": 1, \"layers\": 2, \"heads\": 3, \"head_dim\": 4,\r\n"
        " \"lengths\": [3, 2], \"queries\": \"q.npy\", \"keys\": \"k16.npy\",\n"
        " \"alpha\": [[1, 1.5, 2], [1.25, 3, 1]], \"causal\": [[true, false, true], [false, false, true]],\n"
        " \"scale\": 0.125, \"texts\": [\"a\", \"\\u00fc\"], \"provenance\": {\"z\": 1, \"a\": [true]} }\n");
    r = entgraph::read_capture(tmp.path());
    CHECK(r.head(0, 0).alpha == 1.0);
    CHECK(r.head(0, 2).alpha == 2.0);
    CHECK(r.head(1, 0).alpha == 1.25);
    CHECK(r.head(1, 1).alpha == 3.0);
    CHECK(r.head(0, 0).causal);
    CHECK_FALSE(r.head(0, 1).causal);
    CHECK(r.head(1, 2).causal);
    CHECK(r.head(1, 1).scale == 0.125);
    CHECK(r.texts == std::vector<std::string>{"a", "\xc3\xbc"});
    CHECK(r.provenance == R"({"z":1,"a":[true]})");

    // Rewriting a folder without values leaves no reference to an old values.npy.
    Capture with_values = sample(true, 6);
    entgraph::write_capture(tmp.path(), with_values);
    CHECK(entgraph::read_capture(tmp.path()).has_values());
    entgraph::write_capture(tmp.path(), sample(false, 6));
    CHECK_FALSE(entgraph::read_capture(tmp.path()).has_values());
  }

  TEST_CASE("capture: validate_capture and write_capture name the inconsistent field") {
    struct Case {
      std::string what;
      std::function<void(Capture&)> change;
      std::string expected;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<Case> cases = {
        {"zero layers", [](Capture& c) { c.layers = 0; }, "layers is 0 (expected >= 1)"},
        {"zero head_dim", [](Capture& c) { c.head_dim = 0; }, "head_dim is 0 (expected >= 1)"},
        {"no sequences", [](Capture& c) { c.lengths.clear(); }, "lengths is empty"},
        {"zero length",
         [](Capture& c) {
           c.lengths = {5, 0};
         },
         "lengths[1] is 0 (expected >= 1)"},
        {"lengths do not match the arrays",
         [](Capture& c) {
           c.lengths = {3, 3};
         },
         "queries has 120 elements (expected layers * heads * tokens * head_dim = 2 * 3 * 6 * 4 = 144)"},
        {"short keys", [](Capture& c) { c.keys.pop_back(); }, "keys has 119 elements"},
        {"short values", [](Capture& c) { c.values.resize(10); }, "values has 10 elements"},
        {"settings count", [](Capture& c) { c.settings.pop_back(); },
         "settings has 5 entries (expected layers * heads = 6)"},
        {"alpha below 1", [](Capture& c) { c.settings[4].alpha = 0.5; },
         "alpha of layer 1, head 1 is 0.5 (expected a value in [1, 1000], the range of the entmax transform)"},
        {"alpha NaN", [](Capture& c) { c.settings[0].alpha = std::nan(""); }, "alpha of layer 0, head 0 is nan"},
        {"alpha above the entmax range", [](Capture& c) { c.settings[3].alpha = 1000.5; },
         "alpha of layer 1, head 0 is 1000.5 (expected a value in [1, 1000]"},
        {"alpha 1e308, printed short", [](Capture& c) { c.settings[1].alpha = 1e308; },
         "alpha of layer 0, head 1 is 1e+308 (expected"},
        {"queries and keys whose scores overflow float32",
         [](Capture& c) {
           c.queries[at(1, 2, 3, 0)] = 1e30f;
           c.keys[at(1, 2, 0, 1)] = 1e10f;
         },
         "queries and keys of layer 1, head 2 make scores overflow float32: max |q| * max |k| = 1.00000001"},
        {"a large scale counts too",
         [](Capture& c) {
           c.queries[at(0, 1, 2, 0)] = 1e19f;
           c.keys[at(0, 1, 4, 3)] = 1e19f;
           c.settings[1].scale = 1e3;
         },
         "queries and keys of layer 0, head 1 make scores overflow float32: scale * max |q| * max |k| = "},
        {"scale zero", [](Capture& c) { c.settings[2].scale = 0.0; },
         "scale of layer 0, head 2 is 0 (expected a finite value > 0)"},
        {"scale inf", [](Capture& c) { c.settings[5].scale = HUGE_VAL; }, "scale of layer 1, head 2 is inf"},
        {"scale beyond float32", [](Capture& c) { c.settings[5].scale = 1e300; },
         "scale of layer 1, head 2 is 1e+300 (expected at most the float32 maximum"},
        {"texts count", [](Capture& c) { c.texts = {"only one"}; },
         "texts has 1 entries (expected 0 or one per sequence, 2)"},
        {"texts not UTF-8",
         [](Capture& c) {
           c.texts = {"ok", "bad \xff"};
         },
         "texts[1] is not valid UTF-8"},
        {"provenance an array", [](Capture& c) { c.provenance = "[1, 2]"; }, "provenance is not a JSON object"},
        {"provenance not JSON", [](Capture& c) { c.provenance = "{\"model\": "; }, "provenance is not valid JSON"},
        {"provenance too deep",
         [](Capture& c) { c.provenance = "{\"x\": " + std::string(100, '[') + std::string(100, ']') + "}"; },
         "provenance is nested too deeply"},
        {"provenance with a repeated key in a nested object",
         [](Capture& c) { c.provenance = "{\"model\": {\"name\": \"a\", \"name\": \"b\"}}"; },
         "duplicate key \"name\" in the object \"model\" of provenance"},
        {"NaN in keys", [&](Capture& c) { c.keys[at(1, 0, 3, 2)] = nan; },
         "keys: non-finite value nan at layer 1, head 0, token 3 (sequence 1, position 0), dim 2"},
        {"-inf in values", [&](Capture& c) { c.values[at(0, 2, 1, 0)] = -inf; },
         "values: non-finite value -inf at layer 0, head 2, token 1 (sequence 0, position 1), dim 0"},
        {"inf in queries", [&](Capture& c) { c.queries[at(0, 0, 0, 0)] = inf; },
         "queries: non-finite value inf at layer 0, head 0, token 0"},
    };
    TempDir tmp;
    for (const Case& k : cases) {
      CAPTURE(k.what);
      Capture c = sample(true);
      c.texts = {"a", "b"};
      CHECK_NOTHROW(entgraph::validate_capture(c));
      k.change(c);
      const std::string message = thrown([&] { entgraph::validate_capture(c); });
      CAPTURE(message);
      CHECK(starts_with(message, std::string("validate_capture: ") + k.expected));
      // The writer refuses the same capture before writing anything.
      const std::string dir = tmp.file("refused");
      const std::string write_message = thrown([&] { entgraph::write_capture(dir, c); });
      CAPTURE(write_message);
      CHECK(starts_with(write_message, "write_capture: " + dir + ": " + k.expected));
      CHECK_FALSE(fs::exists(dir));
    }
  }

  TEST_CASE("capture: the reader rejects corrupt captures, naming what is wrong") {
    struct Case {
      std::string what;
      std::function<void(const std::string& dir)> corrupt;
      std::string expected;
    };
    auto json = [](Fields changes) {
      return [changes](const std::string& dir) { write_text(dir + "/capture.json", capture_json(changes)); };
    };
    auto raw_json = [](std::string text) {
      return [text](const std::string& dir) { write_text(dir + "/capture.json", text); };
    };
    auto folder_instead_of = [](std::string name) {
      return [name](const std::string& dir) {
        fs::remove(dir + "/" + name);
        fs::create_directory(dir + "/" + name);
      };
    };
    const Capture base = sample(true);
    const std::vector<std::size_t> shape = {2, 3, 5, 4};
    const std::string deep = std::string(200, '[') + std::string(200, ']');
    const std::vector<Case> cases = {
        // The folder and capture.json.
        {"no folder", [](const std::string& dir) { fs::remove_all(dir); }, "cannot open the folder"},
        {"a file, not a folder",
         [](const std::string& dir) {
           fs::remove_all(dir);
           write_text(dir, "{}");
         },
         "is not a folder"},
        {"no capture.json", [](const std::string& dir) { fs::remove(dir + "/capture.json"); },
         "capture.json: cannot open file"},
        {"capture.json is a directory", folder_instead_of("capture.json"), "capture.json: is a directory"},
        {"invalid JSON", raw_json("{\"format\": \"entgraph-capture\", \"version\": 1,"),
         "capture.json is not valid JSON"},
        {"binary garbage", raw_json(std::string("\x93NUMPY\x01\x00", 8)), "capture.json is not valid JSON"},
        {"not an object", raw_json("[1, 2, 3]"), "capture.json is not a JSON object (got [1,2,3])"},
        {"nested too deeply", json({{"provenance", "{\"x\": " + deep + "}"}}), "capture.json is nested too deeply"},
        {"number beyond double", json({{"scale", "1e999"}}), "capture.json is not valid JSON"},
        // format, version, keys.
        {"wrong format", json({{"format", "\"entgraph-graph\""}}),
         "\"format\" is \"entgraph-graph\" (expected \"entgraph-capture\")"},
        {"no format", json({{"format", kRemove}}), "missing required key \"format\""},
        {"unsupported version", json({{"version", "2"}}), "unsupported version 2 (expected 1)"},
        {"version as a string", json({{"version", "\"1\""}}), "\"version\" is not an integer (got \"1\")"},
        {"typo in a key", json({{"casual", "true"}}), "unknown key \"casual\" in capture.json (expected one of"},
        {"repeated key", raw_json("{\"causal\": true, " + capture_json({{"causal", "false"}}).substr(1)),
         "duplicate key \"causal\""},
        {"missing keys", json({{"keys", kRemove}}), "missing required key \"keys\""},
        {"missing lengths", json({{"lengths", kRemove}}), "missing required key \"lengths\""},
        // Types and ranges of the sizes.
        {"layers as a string", json({{"layers", "\"2\""}}), "layers is not a non-negative integer (got \"2\")"},
        {"negative heads", json({{"heads", "-3"}}), "heads is not a non-negative integer (got -3)"},
        {"fractional head_dim", json({{"head_dim", "4.0"}}), "head_dim is not a non-negative integer (got 4.0)"},
        {"zero layers", json({{"layers", "0"}}), "layers is 0 (expected >= 1)"},
        {"lengths not an array", json({{"lengths", "5"}}), "lengths is not an array of integers (got 5)"},
        {"lengths of strings", json({{"lengths", "[3, \"2\"]"}}), "lengths[1] is not a non-negative integer"},
        {"empty lengths", json({{"lengths", "[]"}}), "lengths is empty"},
        {"zero length", json({{"lengths", "[5, 0]"}}), "lengths[1] is 0 (expected >= 1)"},
        {"lengths do not add up", json({{"lengths", "[3, 3]"}}),
         "queries.npy (queries) has shape (2, 3, 5, 4) (expected (2, 3, 6, 4): lengths add up to 6 tokens, the file "
         "has 5)"},
        {"lengths overflow", json({{"lengths", "[18446744073709551615, 1]"}}), "lengths add up to more than"},
        {"size product overflow", json({{"layers", "4294967296"}, {"heads", "4294967296"}}),
         "layers * heads * tokens * head_dim overflows"},
        // File names.
        {"absolute file name", json({{"queries", "\"/etc/passwd\""}}), "queries file name \"/etc/passwd\" is absolute"},
        {"file name with ..", json({{"keys", "\"..\""}}), "keys file name \"..\" contains \"..\""},
        {"file name in a parent", json({{"values", "\"../values.npy\""}}), "contains \"..\""},
        {"file name with a separator", json({{"queries", "\"sub/queries.npy\""}}), "contains a path separator"},
        {"file name with a backslash", json({{"queries", "\"sub\\\\queries.npy\""}}), "contains a path separator"},
        {"empty file name", json({{"keys", "\"\""}}), "keys is an empty file name"},
        {"file name not a string", json({{"queries", "7"}}), "queries is not a file name string (got 7)"},
        // The .npy files.
        {"shape disagrees with layers", json({{"layers", "3"}}),
         "queries.npy (queries) has shape (2, 3, 5, 4) (expected (3, 3, 5, 4)"},
        {"shape disagrees with head_dim", json({{"head_dim", "8"}}), "(expected (2, 3, 5, 8)"},
        {"keys and queries of different shape",
         [&](const std::string& dir) {
           entgraph::write_npy(dir + "/keys.npy", base.keys.data(), {2, 3, 4, 5});
         },
         "keys.npy (keys) has shape (2, 3, 4, 5) (expected (2, 3, 5, 4)"},
        {"2-D queries",
         [&](const std::string& dir) {
           entgraph::write_npy(dir + "/queries.npy", base.queries.data(), {30, 4});
         },
         "queries.npy (queries) has shape (30, 4)"},
        {"float64 data",
         [&](const std::string& dir) {
           const std::vector<double> d(base.queries.begin(), base.queries.end());
           entgraph::write_npy(dir + "/queries.npy", d.data(), shape);
         },
         "queries.npy (queries) has dtype float64 (expected float16 or float32)"},
        {"int32 data",
         [&](const std::string& dir) {
           const std::vector<std::int32_t> d(base.values.size(), 1);
           entgraph::write_npy(dir + "/values.npy", NpyArray::from_data(d.data(), shape));
         },
         "values.npy (values) has dtype int32"},
        {"truncated .npy",
         [](const std::string& dir) {
           const std::string path = dir + "/keys.npy";
           fs::resize_file(path, fs::file_size(path) - 10);
         },
         "keys.npy: truncated data (got 470 bytes, expected 480)"},
        {"not a .npy file", [](const std::string& dir) { write_text(dir + "/queries.npy", "hello"); },
         "queries.npy: not a .npy file"},
        {"directory instead of a .npy file", folder_instead_of("queries.npy"), "queries.npy: is a directory"},
        {"missing values file", [](const std::string& dir) { fs::remove(dir + "/values.npy"); },
         "values.npy: cannot open file"},
        // Settings.
        {"alpha with too few rows", json({{"alpha", "[[1.5, 1.5, 1.5]]"}}),
         "alpha has 1 rows (expected one per layer, 2)"},
        {"alpha with too few heads", json({{"alpha", "[[1.5, 1.5, 1.5], [1.5, 1.5]]"}}),
         "alpha[1] has 2 entries (expected one per head, 3)"},
        {"alpha flat list", json({{"alpha", "[1.5, 1.5]"}}), "alpha[0] is not an array (got 1.5"},
        {"causal as a string", json({{"causal", "\"yes\""}}), "causal is not a boolean or a [layers][heads] array"},
        {"causal entry of the wrong type", json({{"causal", "[[true, false, true], [true, 1, true]]"}}),
         "causal[1][1] is not a boolean (got 1)"},
        {"alpha below 1", json({{"alpha", "0.5"}}),
         "alpha of layer 0, head 0 is 0.5 (expected a value in [1, 1000], the range of the entmax transform)"},
        {"alpha 1e308", json({{"alpha", "1e308"}}),
         "alpha of layer 0, head 0 is 1e+308 (expected a value in [1, 1000]"},
        {"alpha of one head above 1000", json({{"alpha", "[[1.5, 1.5, 1.5], [1.5, 1.5, 1001]]"}}),
         "alpha of layer 1, head 2 is 1001 (expected a value in [1, 1000]"},
        {"scale zero", json({{"scale", "0"}}), "scale of layer 0, head 0 is 0 (expected a finite value > 0)"},
        {"negative scale of one head", json({{"scale", "[[0.5, 0.5, 0.5], [0.5, -1, 0.5]]"}}),
         "scale of layer 1, head 1 is -1"},
        {"scale as a string", json({{"scale", "\"0.5\""}}), "scale is not a number"},
        // Texts and provenance.
        {"texts count", json({{"texts", "[\"only one\"]"}}), "texts has 1 entries (expected one per sequence, 2)"},
        {"texts not strings", json({{"texts", "[\"a\", 2]"}}), "texts[1] is not a string (got 2)"},
        {"texts not an array", json({{"texts", "\"a b\""}}), "texts is not an array of strings"},
        {"provenance not an object", json({{"provenance", "\"tiny model\""}}),
         "provenance is not a JSON object (got \"tiny model\")"},
        {"repeated key in provenance", json({{"provenance", "{\"tool\": \"x\", \"tool\": \"y\"}"}}),
         "duplicate key \"tool\" in the object \"provenance\" of capture.json"},
        {"repeated key deep in provenance", json({{"provenance", "{\"runs\": [{\"seed\": 1, \"seed\": 2}]}"}}),
         "duplicate key \"seed\" in the object \"runs\" of capture.json"},
        // NaN and infinity in the data.
        {"NaN in keys",
         [&](const std::string& dir) {
           std::vector<float> k = base.keys;
           k[at(1, 2, 4, 1)] = std::numeric_limits<float>::quiet_NaN();
           entgraph::write_npy(dir + "/keys.npy", k.data(), shape);
         },
         "keys: non-finite value nan at layer 1, head 2, token 4 (sequence 1, position 1), dim 1"},
        {"queries of 1e30: scores would overflow",
         [&](const std::string& dir) {
           std::vector<float> q = base.queries;
           q[at(0, 1, 2, 3)] = 1e30f;
           std::vector<float> k = base.keys;
           k[at(0, 1, 1, 0)] = 1e9f;
           entgraph::write_npy(dir + "/queries.npy", q.data(), shape);
           entgraph::write_npy(dir + "/keys.npy", k.data(), shape);
         },
         "queries and keys of layer 0, head 1 make scores overflow float32: max |q| * max |k| = "},
        {"infinity in float16 values",
         [&](const std::string& dir) {
           std::vector<float> v = base.values;
           v[at(0, 1, 0, 0)] = std::numeric_limits<float>::infinity();
           write_half_npy(dir + "/values.npy", v, shape);
         },
         "values: non-finite value inf at layer 0, head 1, token 0 (sequence 0, position 0), dim 0"},
    };
    TempDir tmp;
    std::size_t i = 0;
    for (const Case& k : cases) {
      CAPTURE(k.what);
      const std::string dir = tmp.file("case_" + std::to_string(i++));
      entgraph::write_capture(dir, base);
      REQUIRE_NOTHROW(entgraph::read_capture(dir));
      k.corrupt(dir);
      const std::string message = thrown([&] { entgraph::read_capture(dir); });
      CAPTURE(message);
      CHECK(starts_with(message, "read_capture: " + dir + ": "));
      CHECK(contains(message, k.expected));
    }
    CHECK(cases.size() >= 14);
  }

  TEST_CASE("capture: every truncation and random corruption of capture.json throws entgraph::Error or reads") {
    TempDir tmp;
    Capture c = sample(true);
    c.texts = {"a", "b"};
    c.settings[3].alpha = 2.0;  // per-head arrays in the file
    entgraph::write_capture(tmp.path(), c);
    const std::string good = read_text(tmp.file("capture.json"));
    auto outcome = [&](const std::string& text) {
      write_text(tmp.file("capture.json"), text);
      try {
        const Capture r = entgraph::read_capture(tmp.path());
        entgraph::validate_capture(r);  // whatever reads is valid
        return std::string("read");
      } catch (const Error& e) {
        return std::string(e.what());
      } catch (const std::exception& e) {
        return std::string("unexpected exception: ") + e.what();
      }
    };
    auto check_outcome = [&](const std::string& text) {
      const std::string result = outcome(text);
      CAPTURE(result);
      CHECK_FALSE(starts_with(result, "unexpected exception"));
    };
    for_each_truncation(good, check_outcome);
    std::mt19937_64 rng(42);
    auto flip = [&](std::string& text) { text[rng() % text.size()] = static_cast<char>(rng() % 256); };
    for_each_corruption(good, rng, 400, flip, check_outcome);
    CHECK(outcome(good) == "read");
  }

  TEST_CASE("capture: provenance of 64 levels of arrays and objects round trips, 65 are refused") {
    TempDir tmp;
    auto nested = [](int levels) {  // an object holding levels - 1 nested arrays
      return "{\"x\":" + std::string(static_cast<std::size_t>(levels - 1), '[') +
             std::string(static_cast<std::size_t>(levels - 1), ']') + "}";
    };
    Capture c = sample(false);
    c.provenance = nested(64);
    entgraph::write_capture(tmp.path(), c);
    CHECK(entgraph::read_capture(tmp.path()).provenance == c.provenance);
    c.provenance = nested(65);
    CHECK_ERROR_CONTAINS(
        entgraph::validate_capture(c),
        "validate_capture: provenance is nested too deeply (more than 64 levels of arrays and objects)");
  }

  TEST_CASE("capture: CaptureWriter writes the files of write_capture, byte for byte, in any sequence order") {
    TempDir tmp;
    int n = 0;
    for (NpyDtype dtype : {NpyDtype::float32, NpyDtype::float16}) {
      for (bool with_values : {false, true}) {
        for (bool per_head : {false, true}) {
          CAPTURE(entgraph::npy_dtype_name(dtype));
          CAPTURE(with_values);
          CAPTURE(per_head);
          // Three sequences of different lengths (so that slices of one
          // (layer, head) land at distinct offsets), written 2, 0, 1.
          Capture c = Capture::make(2, 3, 4, {3, 1, 4}, with_values);
          std::mt19937_64 rng(100 + static_cast<std::uint64_t>(n));
          std::normal_distribution<float> dist(0.0f, 3.0f);
          for (auto* a : {&c.queries, &c.keys, &c.values})
            for (float& x : *a) x = dist(rng);
          c.texts = {"abc", "\xc3\xa9", "wxyz"};
          c.provenance = R"({"model":"tiny","nested":{"x":[1,2]}})";
          for (std::size_t i = 0; i < c.settings.size(); ++i)
            if (per_head) c.settings[i] = {1.0 + 0.5 * static_cast<double>(i), i % 2 == 0, 0.25 + 0.01 * i};
          const std::string want = tmp.file("want_" + std::to_string(n)), got = tmp.file("got_" + std::to_string(n));
          ++n;
          entgraph::write_capture(want, c, dtype);
          entgraph::CaptureWriter w = writer_for(got, c, dtype);
          CHECK(w.sequences() == 3);
          for (std::size_t s : {2, 0, 1}) {
            CHECK_FALSE(fs::exists(got + "/capture.json"));  // only finish() writes it
            w.write_sequence(s, sequence_of(c, c.queries, s), sequence_of(c, c.keys, s), sequence_of(c, c.values, s));
          }
          CHECK(w.sequences_written() == 3);
          w.finish();
          for (const char* name : {"capture.json", "queries.npy", "keys.npy", "values.npy"}) {
            CAPTURE(name);
            CHECK(fs::exists(got + "/" + name) == fs::exists(want + "/" + name));
            if (fs::exists(want + "/" + name)) CHECK(read_bytes(got + "/" + name) == read_bytes(want + "/" + name));
          }
        }
      }
    }
  }

  TEST_CASE("capture: CaptureWriter checks each sequence before writing it, and writes capture.json only when complete") {
    TempDir tmp;
    Capture c = sample(true);
    c.texts = {"a", "b"};
    const std::string dir = tmp.file("cap");
    const std::string prefix = "CaptureWriter: " + dir + ": ";
    // An old capture in the folder stays as it was until finish() moves the new one into place.
    entgraph::write_capture(dir, sample(true, 9));
    const Bytes old_json = read_bytes(dir + "/capture.json"), old_keys = read_bytes(dir + "/keys.npy");
    entgraph::CaptureWriter w = writer_for(dir, c);
    const std::vector<float> q0 = sequence_of(c, c.queries, 0), k0 = sequence_of(c, c.keys, 0),
                             v0 = sequence_of(c, c.values, 0);
    CHECK(q0.size() == 2 * 3 * 3 * 4);
    CHECK_ERROR_CONTAINS(w.write_sequence(2, q0, k0, v0), prefix + "sequence out of range (got 2, expected < 2)");
    CHECK_ERROR_CONTAINS(w.write_sequence(1, q0, k0, v0),
                         prefix + "queries of sequence 1 has 72 elements (expected layers * heads * lengths[1] * "
                                  "head_dim = 2 * 3 * 2 * 4 = 48)");
    CHECK_ERROR_CONTAINS(w.write_sequence(0, q0, k0), prefix + "values: missing (the capture has values)");
    std::vector<float> bad = k0;
    bad[((1 * 3 + 0) * 3 + 2) * 4 + 3] = std::numeric_limits<float>::quiet_NaN();  // layer 1, head 0, position 2, dim 3
    CHECK_ERROR_CONTAINS(w.write_sequence(0, q0, bad, v0),
                         prefix + "keys: non-finite value nan at layer 1, head 0, token 2 (sequence 0, position 2), dim 3");
    CHECK(w.sequences_written() == 0);
    CHECK_ERROR_CONTAINS(w.finish(), prefix + "sequence 0 was never written (0 of 2 written)");
    w.write_sequence(0, q0, k0, v0);
    CHECK_ERROR_CONTAINS(w.write_sequence(0, q0, k0, v0), prefix + "sequence 0 was written already");
    CHECK_ERROR_CONTAINS(w.finish(), prefix + "sequence 1 was never written (1 of 2 written)");
    CHECK(read_bytes(dir + "/capture.json") == old_json);
    CHECK(read_bytes(dir + "/keys.npy") == old_keys);
    w.write_sequence(1, sequence_of(c, c.queries, 1), sequence_of(c, c.keys, 1), sequence_of(c, c.values, 1));
    w.finish();
    const Capture r = entgraph::read_capture(dir);
    CHECK(same_bits(r.queries, c.queries));
    CHECK(same_bits(r.values, c.values));
    CHECK(r.texts == c.texts);
    CHECK_ERROR_CONTAINS(w.finish(), prefix + "finish() called twice");
    CHECK_ERROR_CONTAINS(w.write_sequence(0, q0, k0, v0), prefix + "write_sequence after finish()");

    // A writer dropped half-way leaves nothing: no folder, no staging folder beside it.
    const std::string half = tmp.file("half");
    {
      entgraph::CaptureWriter partial = writer_for(half, c);
      partial.write_sequence(0, q0, k0, v0);
    }
    CHECK_FALSE(fs::exists(half));
    // ... and in an existing capture's folder, the old capture as it was and no staging folder in it.
    {
      entgraph::CaptureWriter partial = writer_for(dir, sample(true, 11));
      partial.write_sequence(0, q0, k0, v0);
    }
    CHECK(listing(dir) == std::vector<std::string>{"capture.json", "keys.npy", "queries.npy", "values.npy"});
    CHECK(same_bits(entgraph::read_capture(dir).queries, c.queries));

    // Values given to a capture without them; float16 overflow, named like write_capture names it.
    const Capture no_values = sample(false);
    entgraph::CaptureWriter nv = writer_for(tmp.file("nv"), no_values, NpyDtype::float16);
    const std::vector<float> nq = sequence_of(no_values, no_values.queries, 1), nk = sequence_of(no_values, no_values.keys, 1);
    CHECK_ERROR_CONTAINS(nv.write_sequence(1, nq, nk, nk), "values: given, but the capture has no values");
    std::vector<float> huge = nq;
    huge[((1 * 3 + 2) * 2 + 1) * 4 + 3] = 1e6f;  // layer 1, head 2, position 1, dim 3
    CHECK_ERROR_CONTAINS(nv.write_sequence(1, huge, nk),
                         "queries: value 1000000 at layer 1, head 2, token 4 (sequence 1, position 1), dim 3 is beyond "
                         "the float16 range");
    CHECK(nv.sequences_written() == 0);

    // Scores that would overflow float32, across sequences: the second
    // sequence's keys against the first one's queries (the bound of validate_capture).
    const Capture two = sample(false);
    entgraph::CaptureWriter sw = writer_for(tmp.file("scores"), two);
    std::vector<float> big_q = sequence_of(two, two.queries, 0), big_k = sequence_of(two, two.keys, 1);
    big_q[((0 * 3 + 1) * 3 + 2) * 4] = 1e20f;  // layer 0, head 1, position 2 of sequence 0
    sw.write_sequence(0, big_q, sequence_of(two, two.keys, 0));
    big_k[((0 * 3 + 1) * 2 + 1) * 4 + 3] = 1e20f;  // layer 0, head 1, position 1 of sequence 1: token 4
    CHECK_ERROR_CONTAINS(sw.write_sequence(1, sequence_of(two, two.queries, 1), big_k),
                         "queries and keys of layer 0, head 1 make scores overflow float32");
    CHECK_ERROR_CONTAINS(sw.write_sequence(1, sequence_of(two, two.queries, 1), big_k), "at token 4; expected at most 2^127");
    CHECK(sw.sequences_written() == 1);

    // The constructor checks what validate_capture checks, bar the arrays, before touching the folder.
    const std::string refused = tmp.file("refused");
    std::vector<HeadSettings> settings = c.settings;
    settings[4].alpha = 0.5;
    CHECK_ERROR_CONTAINS(entgraph::CaptureWriter(refused, 2, 3, 4, {3, 2}, true, settings),
                         "CaptureWriter: " + refused + ": alpha of layer 1, head 1 is 0.5 (expected a value in [1, "
                                                       "1000]");
    CHECK_ERROR_CONTAINS(entgraph::CaptureWriter(refused, 2, 3, 4, {3, 0}, true, c.settings), "lengths[1] is 0");
    CHECK_ERROR_CONTAINS(entgraph::CaptureWriter(refused, 2, 3, 4, {3, 2}, true, c.settings, {"one"}),
                         "texts has 1 entries");
    CHECK_ERROR_CONTAINS(entgraph::CaptureWriter(refused, 2, 3, 4, {3, 2}, true, c.settings, {}, "[1]"),
                         "provenance is not a JSON object");
    CHECK_ERROR_CONTAINS(entgraph::CaptureWriter(refused, 2, 3, 4, {3, 2}, true, c.settings, {}, "{}", NpyDtype::int32),
                         "unsupported dtype int32 (expected float32 or float16)");
    CHECK_FALSE(fs::exists(refused));
    write_text(tmp.file("a_file"), "x");
    CHECK_ERROR_CONTAINS(writer_for(tmp.file("a_file") + "/sub", c), "cannot create a folder to write into");
    CHECK_ERROR_CONTAINS(writer_for(tmp.file("a_file"), c), "exists and is not a folder");

    // A folder where a file of the capture goes is refused before anything
    // is written, for write_capture as for the writer; the capture beside it stays.
    const std::string blocked = tmp.file("blocked");
    entgraph::write_capture(blocked, sample(false));
    fs::create_directory(blocked + "/values.npy");
    const Bytes blocked_json = read_bytes(blocked + "/capture.json");
    CHECK_ERROR_CONTAINS(entgraph::write_capture(blocked, c),
                         "write_capture: " + blocked + ": values.npy: cannot replace it (a folder is in the way)");
    CHECK_ERROR_CONTAINS(writer_for(blocked, c), "CaptureWriter: " + blocked + ": values.npy: cannot replace it");
    CHECK(read_bytes(blocked + "/capture.json") == blocked_json);
    CHECK(listing(blocked) == std::vector<std::string>{"capture.json", "keys.npy", "queries.npy", "values.npy"});
    entgraph::write_capture(blocked, sample(false));  // no values: fine
  }

  TEST_CASE("npy: encode_npy_header is what encode_npy puts before the data") {
    const std::vector<float> v(2 * 3 * 5, 1.5f);
    for (int version : {0, 1, 2, 3}) {
      CAPTURE(version);
      const NpyArray a = NpyArray::from_data(v.data(), {2, 3, 5});
      const std::vector<unsigned char> whole = entgraph::encode_npy(a, version);
      const std::vector<unsigned char> header = entgraph::encode_npy_header(NpyDtype::float32, {2, 3, 5}, version);
      REQUIRE(header.size() + a.bytes.size() == whole.size());
      CHECK(std::equal(header.begin(), header.end(), whole.begin()));
      CHECK(header.size() % 64 == 0);
    }
    const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
    CHECK_ERROR_CONTAINS(entgraph::encode_npy_header(NpyDtype::float16, {huge, 4}), "encode_npy_header: <memory>: shape");
    CHECK_ERROR_CONTAINS(entgraph::encode_npy_header(NpyDtype::float16, {4}, 9), "unsupported format version 9");
  }
}
