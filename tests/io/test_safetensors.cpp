// Tests of the safetensors reader and writer (entgraph/io/safetensors.hpp)
// and of the half-float helpers they share (io/binary.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/safetensors.hpp"
#include "io/binary.hpp"
#include "io_test_support.hpp"

using entgraph::Error;
using entgraph::SafeTensor;
using entgraph::SafetensorsFile;
using namespace entgraph::test;

namespace {

// A safetensors image: the header size field (defaults to the header's size),
// the header text and the data buffer.
Bytes make_st(const std::string& header, const Bytes& data, unsigned long long size_field = ~0ull) {
  const unsigned long long n = size_field != ~0ull ? size_field : header.size();
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// One header entry: "name":{"dtype":...,"shape":...,"data_offsets":...}.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

SafeTensor raw(const std::string& name, const std::string& dtype, std::vector<std::size_t> shape, Bytes bytes) {
  SafeTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes = std::move(bytes);
  return t;
}

// A tensor of the given dtype and shape whose bytes count up from seed.
SafeTensor patterned(const std::string& name, const std::string& dtype, std::vector<std::size_t> shape, unsigned seed) {
  SafeTensor t = raw(name, dtype, std::move(shape), {});
  t.bytes.resize(t.size() * entgraph::safetensors_dtype_size(dtype));
  for (std::size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<unsigned char>(seed + 7 * i);
  return t;
}

std::uint16_t half_bits_of(float f) { return entgraph::detail::float_to_half(f); }
bool is_half_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

}  // namespace

TEST_SUITE("io") {
  TEST_CASE("safetensors: every dtype, a scalar and empty tensors round trip through a file") {
    TempDir dir;
    const std::vector<float> w = {0.5f, -1.0f, 2.0f, std::numeric_limits<float>::infinity(), 1e-40f, -0.0f};
    const float pi = 3.25f;
    SafetensorsFile file;
    file.tensors = {
        entgraph::make_f32_tensor("layers.0.q.weight", w.data(), {2, 3}),
        patterned("f64", "F64", {2}, 1),
        patterned("f16", "F16", {3}, 2),
        patterned("bf16", "BF16", {2, 2}, 3),
        patterned("i64", "I64", {2}, 4),
        patterned("i32", "I32", {1, 2}, 5),
        patterned("i16", "I16", {3}, 6),
        patterned("i8", "I8", {4}, 7),
        patterned("u8", "U8", {5}, 8),
        raw("mask", "BOOL", {3}, {1, 0, 1}),
        entgraph::make_f32_tensor("scalar", &pi, {}),
        entgraph::make_f32_tensor("empty", nullptr, {0, 4}),
        patterned("empty.i64", "I64", {3, 0}, 9),
        raw("last", "U8", {1}, {42}),
    };
    file.metadata = {{"format", "pt"}, {"author", "entgraph \xc3\xbc"}, {"empty", ""}};

    const std::string path = dir.file("model.safetensors");
    entgraph::write_safetensors(path, file);
    const SafetensorsFile back = entgraph::read_safetensors(path);
    REQUIRE(back.tensors.size() == file.tensors.size());
    for (std::size_t i = 0; i < file.tensors.size(); ++i) {
      const SafeTensor& a = file.tensors[i];
      const SafeTensor& b = back.tensors[i];
      CAPTURE(a.name);
      CHECK(b.name == a.name);
      CHECK(b.dtype == a.dtype);
      CHECK(b.shape == a.shape);
      CHECK(b.bytes == a.bytes);
      CHECK(b.size() == a.size());
    }
    // Metadata comes back sorted by key.
    const std::vector<std::pair<std::string, std::string>> sorted = {
        {"author", "entgraph \xc3\xbc"}, {"empty", ""}, {"format", "pt"}};
    CHECK(back.metadata == sorted);

    CHECK(back.at("scalar").shape.empty());
    CHECK(back.at("scalar").size() == 1);
    CHECK(back.at("scalar").to_float() == std::vector<float>{3.25f});
    CHECK(back.at("empty").size() == 0);
    CHECK(back.at("empty").to_float().empty());
    CHECK(back.at("mask").to_float() == std::vector<float>{1, 0, 1});
    const std::vector<float> q = back.at("layers.0.q.weight").to_float();
    REQUIRE(q.size() == w.size());
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(std::memcmp(&q[i], &w[i], sizeof(float)) == 0);
    CHECK(back.find("missing") == nullptr);
    CHECK(back.find("u8") == &back.tensors[8]);
    CHECK_ERROR_CONTAINS(back.at("missing"), "safetensors: no tensor named 'missing'");

    // The file is what encode gives, and re-encoding what was read gives the
    // same bytes once the metadata is in the order the reader returns.
    const Bytes bytes = read_bytes(path);
    CHECK(bytes == entgraph::encode_safetensors(file));
    SafetensorsFile resorted = file;
    resorted.metadata = sorted;
    CHECK(entgraph::encode_safetensors(back) == entgraph::encode_safetensors(resorted));
    const SafetensorsFile from_memory = entgraph::read_safetensors_bytes(bytes.data(), bytes.size());
    CHECK(from_memory.tensors.size() == file.tensors.size());

    // An empty file (no tensors, no metadata) round trips too.
    const Bytes nothing = entgraph::encode_safetensors(SafetensorsFile{});
    CHECK(nothing == make_st("{}      ", {}));
    const SafetensorsFile none = entgraph::read_safetensors_bytes(nothing.data(), nothing.size());
    CHECK(none.tensors.empty());
    CHECK(none.metadata.empty());
  }

  TEST_CASE("safetensors: the writer's header is the reference layout, data aligned to 8 bytes") {
    const std::vector<float> v = {1, 2};
    SafetensorsFile file;
    file.tensors = {entgraph::make_f32_tensor("a", v.data(), {2}), raw("b\"\n", "U8", {1}, {9})};
    file.metadata = {{"format", "pt"}};
    const Bytes bytes = entgraph::encode_safetensors(file);
    const std::string header =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\\\"\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]}}";
    const std::size_t n = entgraph::detail::load_le(bytes.data(), 8);
    CHECK(n % 8 == 0);
    CHECK(n >= header.size());
    CHECK(n < header.size() + 8);
    CHECK(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header.size())) == header);
    CHECK(std::string(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()),
                      bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n)) == std::string(n - header.size(), ' '));
    CHECK(bytes.size() == 8 + n + 9);
    CHECK(bytes.back() == 9);
    // A name with a quote and a newline survives.
    CHECK(entgraph::read_safetensors_bytes(bytes.data(), bytes.size()).at("b\"\n").bytes == Bytes{9});
  }

  TEST_CASE("safetensors: a hand-built file is read as the spec says") {
    // Header of 139 bytes plus 5 spaces of padding = 144 = 0x90; keys out of
    // offset order; then BF16 [1.0, -2.0] and I16 [-1, 300].
    const std::string json =
        "{\"b\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[4,8]},"
        "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
        "\"__metadata__\":{\"format\":\"pt\"}}     ";
    REQUIRE(json.size() == 0x90);
    Bytes bytes = {0x90, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    bytes.insert(bytes.end(), json.begin(), json.end());
    const Bytes data = {0x80, 0x3f, 0x00, 0xc0,   // BF16 1.0, -2.0
                        0xff, 0xff, 0x2c, 0x01};  // I16 -1, 300
    bytes.insert(bytes.end(), data.begin(), data.end());
    REQUIRE(bytes.size() == 8 + 144 + 8);

    const SafetensorsFile f = entgraph::read_safetensors_bytes(bytes.data(), bytes.size(), "hand.safetensors");
    REQUIRE(f.tensors.size() == 2);
    CHECK(f.tensors[0].name == "a");  // in the order of the data offsets
    CHECK(f.tensors[0].dtype == "BF16");
    CHECK(f.tensors[0].shape == std::vector<std::size_t>{2});
    CHECK(f.tensors[0].bytes == Bytes{0x80, 0x3f, 0x00, 0xc0});
    CHECK(f.tensors[0].to_float() == std::vector<float>{1.0f, -2.0f});
    CHECK(f.tensors[1].name == "b");
    CHECK(f.tensors[1].to_float() == std::vector<float>{-1.0f, 300.0f});
    CHECK(f.metadata == std::vector<std::pair<std::string, std::string>>{{"format", "pt"}});

    // Other whitespace after the object, and none at all, are accepted too.
    for (const std::string& tail : {std::string(""), std::string("\n"), std::string(" \t\r\n ")}) {
      const std::string h = "{" + entry("x", "U8", "[2]", "[0,2]") + "}" + tail;
      const Bytes b = make_st(h, {1, 2});
      CHECK(entgraph::read_safetensors_bytes(b.data(), b.size()).at("x").bytes == Bytes{1, 2});
    }
  }

  TEST_CASE("safetensors: empty tensors at one offset keep header order; tensors sort by offset") {
    const std::string h = "{" + entry("z", "F32", "[0]", "[4,4]") + "," + entry("tail", "U8", "[2]", "[4,6]") + "," +
                          entry("y", "F32", "[2,0]", "[4,4]") + "," + entry("head", "F32", "[]", "[0,4]") + "," +
                          entry("end", "I8", "[0]", "[6,6]") + "}";
    const Bytes b = make_st(h, zeros(6));
    const SafetensorsFile f = entgraph::read_safetensors_bytes(b.data(), b.size());
    std::vector<std::string> names;
    for (const SafeTensor& t : f.tensors) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"head", "z", "y", "tail", "end"});
    // Written back in that order, it reads back in that order.
    const Bytes again = entgraph::encode_safetensors(f);
    const SafetensorsFile g = entgraph::read_safetensors_bytes(again.data(), again.size());
    for (std::size_t i = 0; i < names.size(); ++i) CHECK(g.tensors[i].name == names[i]);
  }

  TEST_CASE("safetensors: F16, BF16 and integer dtypes convert to the right floats") {
    const float inf = std::numeric_limits<float>::infinity();
    // F16: 1, -2, 65504, 2^-24 (smallest subnormal), 2^-14 (smallest normal),
    // 0.333251953125 (nearest to 1/3), +inf, -0.
    const SafeTensor f16 =
        raw("h", "F16", {8},
            {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x04, 0x55, 0x35, 0x00, 0x7c, 0x00, 0x80});
    const std::vector<float> h = f16.to_float();
    CHECK(h == std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -14), 0.333251953125f,
                                  inf, -0.0f});
    CHECK(std::signbit(h[7]));
    CHECK(std::isnan(raw("n", "F16", {1}, {0x00, 0x7e}).to_float()[0]));
    // BF16: 1, -2, 3.140625, +inf, 2^-133 (smallest subnormal), largest finite.
    const SafeTensor bf16 =
        raw("b", "BF16", {6}, {0x80, 0x3f, 0x00, 0xc0, 0x49, 0x40, 0x80, 0x7f, 0x01, 0x00, 0x7f, 0x7f});
    CHECK(bf16.to_float() ==
          std::vector<float>{1.0f, -2.0f, 3.140625f, inf, std::ldexp(1.0f, -133), std::ldexp(255.0f, 120)});
    CHECK(std::isnan(raw("n", "BF16", {1}, {0xc0, 0x7f}).to_float()[0]));
    // Integers and the rest.
    CHECK(raw("i8", "I8", {3}, {0x80, 0x7f, 0xff}).to_float() == std::vector<float>{-128, 127, -1});
    CHECK(raw("u8", "U8", {2}, {0xff, 0}).to_float() == std::vector<float>{255, 0});
    CHECK(raw("i16", "I16", {2}, {0x00, 0x80, 0xff, 0x7f}).to_float() == std::vector<float>{-32768, 32767});
    CHECK(raw("i32", "I32", {1}, {0x00, 0x00, 0x00, 0x80}).to_float() == std::vector<float>{-2147483648.0f});
    // 2^53 + 1 rounds once, straight to float.
    const std::int64_t big = (std::int64_t{1} << 53) + 1;
    Bytes big_bytes(8);
    entgraph::detail::store_le(big_bytes.data(), static_cast<std::uint64_t>(big), 8);
    CHECK(raw("i64", "I64", {1}, big_bytes).to_float()[0] == static_cast<float>(big));
    Bytes tenth(8);
    const double d = 0.1;
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    entgraph::detail::store_le(tenth.data(), bits, 8);
    CHECK(raw("f64", "F64", {1}, tenth).to_float()[0] == 0.1f);
    CHECK(raw("bool", "BOOL", {3}, {0, 1, 2}).to_float() == std::vector<float>{0, 1, 1});

    CHECK(entgraph::safetensors_dtype_size("BF16") == 2);
    CHECK(entgraph::safetensors_dtype_size("I64") == 8);
    CHECK(entgraph::safetensors_dtype_size("BOOL") == 1);
    CHECK_ERROR_CONTAINS(entgraph::safetensors_dtype_size("F8_E4M3"), "unknown dtype 'F8_E4M3'");
    CHECK_ERROR_CONTAINS(raw("x", "C64", {1}, zeros(8)).to_float(), "unknown dtype 'C64'");
    CHECK_ERROR_CONTAINS(raw("x", "F32", {2}, zeros(4)).to_float(), "data size does not match the shape");
    CHECK_ERROR_CONTAINS(raw("x", "F32", {std::size_t{1} << 40, std::size_t{1} << 40}, {}).size(), "overflows");
  }

  TEST_CASE("float_to_half: every half round-trips through half_to_double, NaN stays NaN") {
    std::size_t failures = 0;
    unsigned first_failure = 0;
    for (unsigned h = 0; h <= 0xffffu; ++h) {
      const auto bits = static_cast<std::uint16_t>(h);
      const float f = static_cast<float>(entgraph::detail::half_to_double(bits));
      const std::uint16_t back = half_bits_of(f);
      const bool ok = is_half_nan(bits) ? is_half_nan(back) && (back & 0x8000u) == (bits & 0x8000u) : back == bits;
      if (!ok && failures++ == 0) first_failure = h;
    }
    CAPTURE(first_failure);
    CHECK(failures == 0);
  }

  TEST_CASE("float_to_half: ties round to even, just off a tie rounds to nearest") {
    std::size_t failures = 0;
    unsigned first_failure = 0;
    // Every pair of neighbouring finite halves, both signs (the midpoint of
    // two halves needs 12 significant bits, so it is exact in float).
    for (unsigned h = 0; h < 0x7bffu; ++h) {
      const double lo = entgraph::detail::half_to_double(static_cast<std::uint16_t>(h));
      const double hi = entgraph::detail::half_to_double(static_cast<std::uint16_t>(h + 1));
      const auto mid = static_cast<float>((lo + hi) / 2);
      const unsigned even = (h & 1u) == 0 ? h : h + 1;
      for (unsigned sign : {0u, 0x8000u}) {
        const float s = sign != 0 ? -1.0f : 1.0f;
        const bool ok = half_bits_of(s * mid) == (sign | even) &&
                        half_bits_of(s * std::nextafter(mid, 0.0f)) == (sign | h) &&
                        half_bits_of(s * std::nextafter(mid, 1e9f)) == (sign | (h + 1));
        if (!ok && failures++ == 0) first_failure = h;
      }
    }
    CAPTURE(first_failure);
    CHECK(failures == 0);

    // Named cases.
    CHECK(half_bits_of(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie between 1 and 1+2^-10: even (1)
    CHECK(half_bits_of(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie between 1+2^-10 and 1+2^-9: even
    CHECK(half_bits_of(2047.0f) == 0x67ff);                           // exact
    CHECK(half_bits_of(2049.0f) == 0x6800);                           // tie 2048 / 2050: even (2048)
    CHECK(half_bits_of(2051.0f) == 0x6802);                           // tie 2050 / 2052: even (2052)
  }

  TEST_CASE("float_to_half: overflow gives infinity, tiny values give subnormals or zero, NaN stays NaN") {
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(half_bits_of(65504.0f) == 0x7bff);
    CHECK(half_bits_of(65519.996f) == 0x7bff);  // below the tie with 65536
    CHECK(half_bits_of(65520.0f) == 0x7c00);    // tie: 65504 is odd, rounds to inf
    CHECK(half_bits_of(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
    CHECK(half_bits_of(1e6f) == 0x7c00);
    CHECK(half_bits_of(-1e6f) == 0xfc00);
    CHECK(half_bits_of(std::numeric_limits<float>::max()) == 0x7c00);
    CHECK(half_bits_of(inf) == 0x7c00);
    CHECK(half_bits_of(-inf) == 0xfc00);

    const float tiny = std::ldexp(1.0f, -24);  // smallest half subnormal
    CHECK(half_bits_of(tiny) == 0x0001);
    CHECK(half_bits_of(tiny / 2) == 0x0000);                        // tie with 0: even (0)
    CHECK(half_bits_of(std::nextafter(tiny / 2, 1.0f)) == 0x0001);  // just above: up
    CHECK(half_bits_of(1.5f * tiny) == 0x0002);                     // tie 1 / 2: even (2)
    CHECK(half_bits_of(2.5f * tiny) == 0x0002);                     // tie 2 / 3: even (2)
    CHECK(half_bits_of(1023 * tiny) == 0x03ff);                     // largest subnormal
    CHECK(half_bits_of(1023.5f * tiny) == 0x0400);                  // rounds up into the normals
    CHECK(half_bits_of(std::ldexp(1.0f, -14)) == 0x0400);           // smallest normal
    CHECK(half_bits_of(-tiny) == 0x8001);
    CHECK(half_bits_of(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(half_bits_of(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    CHECK(half_bits_of(-0.0f) == 0x8000);
    CHECK(entgraph::detail::half_to_double(0x0001) == std::ldexp(1.0, -24));
    CHECK(entgraph::detail::half_to_double(0x03ff) == 1023 * std::ldexp(1.0, -24));

    const std::uint16_t nan = half_bits_of(std::numeric_limits<float>::quiet_NaN());
    CHECK(is_half_nan(nan));
    CHECK(std::isnan(entgraph::detail::half_to_double(nan)));
    CHECK(is_half_nan(half_bits_of(-std::numeric_limits<float>::quiet_NaN())));
    CHECK(is_half_nan(half_bits_of(std::numeric_limits<float>::signaling_NaN())));
  }

  TEST_CASE("safetensors: malformed files throw entgraph::Error naming the file, the tensor and the problem") {
    const std::string a24 = entry("a", "F32", "[2,3]", "[0,24]");
    const std::string ok = "{" + a24 + "}";
    std::string many_dims = "[";
    for (int i = 0; i < 65; ++i) many_dims += i > 0 ? ",1" : "1";
    many_dims += "]";
    std::string deep = "{\"a\":{\"shape\":";
    for (int i = 0; i < 100000; ++i) deep += '[';
    const std::vector<CorruptInput> cases = {
        {"empty file", {}, "file too short (0 bytes"},
        {"shorter than 8 bytes", Bytes{0x10, 0, 0}, "file too short (3 bytes"},
        {"N larger than the file", make_st(ok, zeros(24), 1000), "header size 1000 exceeds the file ("},
        {"N one past the file", make_st(ok, {}, ok.size() + 1), "exceeds the file"},
        {"N over the cap", make_st(ok, zeros(24), 100000001), "header size 100000001 exceeds the limit of 100000000"},
        {"N = 2^64 - 2", make_st(ok, zeros(24), ~0ull - 1), "exceeds the limit of 100000000 bytes"},
        {"N = 0", make_st("", zeros(24)), "header is not a JSON object (it is empty)"},
        {"header not JSON", make_st("{not json}", {}),
         "header is not valid JSON (parse error at line 1, column 3: syntax error"},
        {"header JSON cut short", make_st("{\"a\":{\"dtype\":\"F32\"", {}), "header is not valid JSON"},
        {"header not an object", make_st("[1, 2, 3]", {}), "header is not a JSON object (does not start with '{'"},
        {"header a string", make_st("\"{}\"", {}), "does not start with '{'; starts with '\"{}\"'"},
        {"leading space", make_st(" " + ok, zeros(24)), "does not start with '{'"},
        {"text after the object", make_st(ok + " x", zeros(24)), "header is not valid JSON"},
        {"two objects", make_st(ok + ok, zeros(24)), "header is not valid JSON"},
        {"NUL in the header", make_st(std::string("{\0}", 3), {}), "header is not valid JSON"},
        {"invalid UTF-8 name", make_st("{\"\xff\":1}", {}), "header is not valid JSON"},
        {"JSON comment", make_st("{/* c */}", {}), "header is not valid JSON"},
        {"number overflow", make_st("{" + entry("a", "F32", "[1e999]", "[0,0]") + "}", {}), "header is not valid JSON"},
        {"entry not an object", make_st("{\"a\":[0,4]}", zeros(4)),
         "tensor 'a': entry is not an object (got an array)"},
        {"entry null", make_st("{\"a\":null}", {}), "tensor 'a': entry is not an object (got null)"},
        {"missing dtype", make_st("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", zeros(4)),
         "tensor 'a': missing 'dtype'"},
        {"missing shape", make_st("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", zeros(4)),
         "tensor 'a': missing 'shape'"},
        {"missing data_offsets", make_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", zeros(4)),
         "tensor 'a': missing 'data_offsets'"},
        {"extra key in an entry",
         make_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"offset\":0}}", zeros(1)),
         "tensor 'a': unexpected key 'offset'"},
        {"repeated dtype",
         make_st("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros(1)),
         "tensor 'a': duplicate key 'dtype'"},
        {"dtype not a string", make_st("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", zeros(4)),
         "tensor 'a': 'dtype' is not a string (got a number)"},
        {"unknown dtype", make_st("{" + entry("a", "F8_E4M3", "[1]", "[0,1]") + "}", zeros(1)),
         "tensor 'a': unknown dtype 'F8_E4M3' (expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)"},
        {"lower-case dtype", make_st("{" + entry("a", "f32", "[1]", "[0,4]") + "}", zeros(4)), "unknown dtype 'f32'"},
        {"shape not an array", make_st("{" + entry("a", "F32", "4", "[0,4]") + "}", zeros(4)),
         "tensor 'a': 'shape' is not an array (got a number)"},
        {"negative shape", make_st("{" + entry("a", "F32", "[-1,6]", "[0,24]") + "}", zeros(24)),
         "tensor 'a': negative 'shape' entry -1"},
        {"non-integer shape", make_st("{" + entry("a", "F32", "[1.5]", "[0,4]") + "}", zeros(4)),
         "tensor 'a': 'shape' entry 1.5 is not a non-negative integer"},
        {"shape 2.0", make_st("{" + entry("a", "F32", "[2.0]", "[0,8]") + "}", zeros(8)),
         "'shape' entry 2.0 is not a non-negative integer"},
        {"shape entry a string", make_st("{" + entry("a", "F32", "[\"2\"]", "[0,8]") + "}", zeros(8)),
         "'shape' entry is not a non-negative integer (got a string)"},
        {"nested shape", make_st("{" + entry("a", "F32", "[[2]]", "[0,8]") + "}", zeros(8)),
         "'shape' entry is not a non-negative integer (got an array)"},
        {"deep nesting", make_st(deep, {}), "'shape' entry is not a non-negative integer (got an array)"},
        {"shape beyond 2^64", make_st("{" + entry("a", "F32", "[99999999999999999999999]", "[0,4]") + "}", zeros(4)),
         "'shape' entry 99999999999999999999999 is not a non-negative integer"},
        {"too many dimensions", make_st("{" + entry("a", "F32", many_dims, "[0,4]") + "}", zeros(4)),
         "tensor 'a': too many dimensions in 'shape' (more than 64)"},
        {"product of shape overflows",
         make_st("{" + entry("a", "F32", "[4294967296,4294967296,2]", "[0,4]") + "}", zeros(4)),
         "tensor 'a': shape [4294967296, 4294967296, 2] has too many elements (overflow)"},
        {"byte count overflows", make_st("{" + entry("a", "F32", "[4611686018427387904]", "[0,4]") + "}", zeros(4)),
         "tensor 'a': shape [4611686018427387904] has too many bytes (overflow)"},
        {"offsets not an array", make_st("{" + entry("a", "F32", "[1]", "{}") + "}", zeros(4)),
         "tensor 'a': 'data_offsets' is not an array (got an object)"},
        {"one offset", make_st("{" + entry("a", "F32", "[1]", "[4]") + "}", zeros(4)),
         "tensor 'a': 'data_offsets' must hold exactly 2 entries, [begin, end] (got 1)"},
        {"three offsets", make_st("{" + entry("a", "F32", "[1]", "[0,4,8]") + "}", zeros(4)),
         "'data_offsets' must hold exactly 2 entries, [begin, end] (got more)"},
        {"negative offset", make_st("{" + entry("a", "F32", "[1]", "[-4,0]") + "}", zeros(4)),
         "tensor 'a': negative 'data_offsets' entry -4"},
        {"offset not an integer", make_st("{" + entry("a", "F32", "[1]", "[0,4.0]") + "}", zeros(4)),
         "'data_offsets' entry 4.0 is not a non-negative integer"},
        {"offsets reversed", make_st("{" + entry("a", "U8", "[0]", "[4,0]") + "}", zeros(4)),
         "tensor 'a': data_offsets [4, 0] are reversed (begin > end)"},
        {"offsets past the buffer", make_st("{" + entry("a", "F32", "[2,3]", "[0,24]") + "}", zeros(20)),
         "tensor 'a': data_offsets [0, 24] lie past the end of the data buffer (20 bytes)"},
        {"huge offsets",
         make_st("{" + entry("a", "F32", "[2,3]", "[18446744073709551592,18446744073709551615]") + "}", zeros(24)),
         "lie past the end of the data buffer"},
        {"size mismatch with shape",
         make_st("{" + entry("layers.0.q.weight", "F32", "[2,3]", "[0,12]") + "}", zeros(12)),
         "tensor 'layers.0.q.weight': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24"},
        {"scalar with no bytes", make_st("{" + entry("s", "F64", "[]", "[0,0]") + "}", {}),
         "tensor 's': data_offsets [0, 0] hold 0 bytes but shape [] of F64 needs 8"},
        {"overlapping tensors",
         make_st("{" + entry("a", "U8", "[8]", "[0,8]") + "," + entry("b", "U8", "[8]", "[4,12]") + "}", zeros(12)),
         "tensor 'b': data_offsets [4, 12] overlap tensor 'a' (data_offsets [0, 8])"},
        {"same range twice",
         make_st("{" + entry("a", "U8", "[4]", "[0,4]") + "," + entry("b", "U8", "[4]", "[0,4]") + "}", zeros(4)),
         "overlap tensor 'a'"},
        {"empty tensor inside another",
         make_st("{" + entry("a", "U8", "[8]", "[0,8]") + "," + entry("e", "U8", "[0]", "[4,4]") + "}", zeros(8)),
         "tensor 'e': data_offsets [4, 4] overlap tensor 'a'"},
        {"hole between tensors",
         make_st("{" + entry("a", "U8", "[8]", "[0,8]") + "," + entry("b", "U8", "[4]", "[12,16]") + "}", zeros(16)),
         "hole of 4 bytes in the data buffer between tensor 'a' (ends at 8) and tensor 'b' (begins at 12)"},
        {"hole at the start", make_st("{" + entry("a", "U8", "[4]", "[4,8]") + "}", zeros(8)),
         "hole of 4 bytes in the data buffer before the first tensor (tensor 'a' begins at 4)"},
        {"trailing bytes", make_st(ok, zeros(28)),
         "4 trailing bytes after the last tensor (the tensors end at 24, the data buffer has 28 bytes)"},
        {"no tensors but data", make_st("{}", zeros(3)),
         "3 trailing bytes in the data buffer (the header lists no tensors)"},
        {"duplicate names",
         make_st("{" + entry("a", "U8", "[4]", "[0,4]") + "," + entry("a", "U8", "[4]", "[4,8]") + "}", zeros(8)),
         "duplicate tensor name 'a'"},
        {"duplicate __metadata__", make_st("{\"__metadata__\":{},\"__metadata__\":{}}", {}),
         "duplicate key '__metadata__'"},
        {"duplicate metadata key", make_st("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", {}),
         "duplicate '__metadata__' key 'k'"},
        {"__metadata__ value not a string", make_st("{\"__metadata__\":{\"k\":1}}", {}),
         "'__metadata__' value of key 'k' is not a string (got a number)"},
        {"__metadata__ value an object", make_st("{\"__metadata__\":{\"k\":{}}}", {}),
         "'__metadata__' value of key 'k' is not a string (got an object)"},
        {"__metadata__ not an object", make_st("{\"__metadata__\":\"pt\"}", {}),
         "'__metadata__' is not an object (got a string)"},
        {"hostile name is escaped",
         make_st("{\"\\u0001x\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,1]}}", zeros(1)),
         "tensor '\\x01x': unknown dtype 'Q'"},
    };
    check_corrupt_inputs(cases, "read_safetensors: bad.safetensors: ", [](const Bytes& bytes) {
      return entgraph::read_safetensors_bytes(bytes.data(), bytes.size(), "bad.safetensors");
    });
    CHECK(cases.size() >= 12);
    // The cap itself is accepted as far as the cap goes (then the file is too short).
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors_bytes(make_st(ok, zeros(24), 100000000).data(), 40),
                         "header size 100000000 exceeds the file");
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors_bytes(nullptr, 5), "null buffer of 5 bytes");
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors_bytes(nullptr, 0, "x"),
                         "read_safetensors: x: file too short (0 bytes");
  }

  TEST_CASE("safetensors: every truncation and random corruption throws or parses, never crashes") {
    SafetensorsFile file;
    const std::vector<float> v = {1, 2, 3, 4, 5, 6};
    file.tensors = {entgraph::make_f32_tensor("a", v.data(), {2, 3}), patterned("b", "BF16", {3}, 1),
                    patterned("e", "I64", {0}, 2), patterned("c", "U8", {5}, 3)};
    file.metadata = {{"format", "pt"}};
    const Bytes good = entgraph::encode_safetensors(file);
    for_each_truncation(good, [](const Bytes& cut) {
      CHECK_THROWS_AS(entgraph::read_safetensors_bytes(cut.data(), cut.size()), Error);
    });
    CHECK(entgraph::read_safetensors_bytes(good.data(), good.size()).tensors.size() == 4);

    std::mt19937 rng(11);
    const std::size_t header_end = 8 + entgraph::detail::load_le(good.data(), 8);
    auto flip = [&](Bytes& bad) {
      // Mostly in the size field and the header, where the parser works.
      // (Each draw in its own statement, so the sequence does not depend on
      // the compiler's order of evaluation.)
      const std::size_t span = rng() % 4 == 0 ? bad.size() : header_end;
      const std::size_t at = rng() % span;
      bad[at] = static_cast<unsigned char>(rng() % 2 == 0 ? rng() : "{}[],:\"0123456789-. "[rng() % 20]);
    };
    const std::size_t parsed = count_accepted_corruptions(good, rng, 3000, flip, [](const Bytes& bad) {
      const SafetensorsFile f = entgraph::read_safetensors_bytes(bad.data(), bad.size());
      for (const SafeTensor& t : f.tensors)
        CHECK(t.bytes.size() == t.size() * entgraph::safetensors_dtype_size(t.dtype));
    });
    CHECK(parsed > 0);  // flips in the data or the padding still parse
  }

  TEST_CASE("safetensors: read_safetensors checks the file and reports it by path") {
    TempDir dir;
    const std::string missing = dir.file("missing.safetensors");
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(missing), "read_safetensors: " + missing + ": cannot open file");
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(dir.file("")), "is a directory");

    const std::string path = dir.file("bad.safetensors");
    write_bytes(path, make_st("{" + entry("w", "F32", "[2,3]", "[0,12]") + "}", zeros(12)));
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(path),
                         "read_safetensors: " + path +
                             ": tensor 'w': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24");
    write_bytes(path, make_st("{}", {}, 1u << 26));
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(path), "header size 67108864 exceeds the file (2 bytes");
    write_bytes(path, make_st("{" + entry("w", "F32", "[100000,100000]", "[0,40000000000]") + "}", zeros(8)));
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(path), "lie past the end of the data buffer (8 bytes)");
    write_bytes(path, {1, 2});
    CHECK_ERROR_CONTAINS(entgraph::read_safetensors(path), "file too short (2 bytes");

    // Every truncation of a real file, read from disk.
    SafetensorsFile file;
    file.tensors = {patterned("x", "F16", {4}, 1), patterned("y", "I32", {2}, 2)};
    const Bytes good = entgraph::encode_safetensors(file);
    for_each_truncation(good, [&](const Bytes& cut) {
      write_bytes(path, cut);
      CHECK_THROWS_AS(entgraph::read_safetensors(path), Error);
    });
    write_bytes(path, good);
    CHECK(entgraph::read_safetensors(path).at("y").bytes == file.tensors[1].bytes);
  }

  TEST_CASE("safetensors: writing rejects invalid content before touching the file") {
    TempDir dir;
    const std::string path = dir.file("keep.safetensors");
    const std::vector<float> v(6, 1.0f);
    SafetensorsFile good;
    good.tensors = {entgraph::make_f32_tensor("w", v.data(), {2, 3})};
    entgraph::write_safetensors(path, good);

    auto with = [&](SafeTensor t) {
      SafetensorsFile f = good;
      f.tensors.push_back(std::move(t));
      return f;
    };
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, with(raw("b", "F32", {2}, zeros(5)))),
                         "write_safetensors: " + path +
                             ": tensor 'b': data size does not match the shape (got 5 bytes, expected 8 for F32 [2])");
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, with(raw("b", "f32", {1}, zeros(4)))),
                         "tensor 'b': unknown dtype 'f32'");
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, with(raw("w", "U8", {1}, zeros(1)))),
                         "duplicate tensor name 'w'");
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, with(raw("__metadata__", "U8", {1}, zeros(1)))),
                         "a tensor may not be named '__metadata__'");
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, with(raw("bad\xff", "U8", {1}, zeros(1)))),
                         "tensor name 'bad\\xff' is not valid UTF-8");
    CHECK_ERROR_CONTAINS(
        entgraph::write_safetensors(path, with(raw("big", "U8", {std::size_t{1} << 40, std::size_t{1} << 40}, {}))),
        "has too many elements (overflow)");
    CHECK_ERROR_CONTAINS(
        entgraph::write_safetensors(path, with(raw("deep", "U8", std::vector<std::size_t>(65, 1), zeros(1)))),
        "too many dimensions (65, at most 64)");
    SafetensorsFile meta = good;
    meta.metadata = {{"k", "1"}, {"k", "2"}};
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, meta), "duplicate '__metadata__' key 'k'");
    meta.metadata = {{"k", "\xc3"}};
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(path, meta), "'__metadata__' value '\\xc3' is not valid UTF-8");
    CHECK_ERROR_CONTAINS(entgraph::encode_safetensors(with(raw("b", "F32", {2}, zeros(5)))),
                         "encode_safetensors: <memory>: tensor 'b'");
    // The file still holds the first write.
    CHECK(entgraph::read_safetensors(path).at("w").to_float() == v);

    CHECK_ERROR_CONTAINS(entgraph::make_f32_tensor("n", nullptr, {2}), "make_f32_tensor: tensor 'n': null data");
    const std::string no_dir = dir.file("no/such/dir/x.safetensors");
    CHECK_ERROR_CONTAINS(entgraph::write_safetensors(no_dir, good),
                         "write_safetensors: " + no_dir + ": cannot open file for writing");
  }
}
