// Tests of the .npy reader and writer (entgraph/io/npy.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/npy.hpp"
#include "io_test_support.hpp"

using entgraph::Error;
using entgraph::NpyArray;
using entgraph::NpyDtype;
using namespace entgraph::test;

namespace {

// A .npy image with full control over every part: magic, version, the header
// length field (defaults to the header's size) and the data.
Bytes make_npy(const std::string& header, const Bytes& data, int major = 1, int minor = 0,
               long long header_len_field = -1, const std::string& magic = "\x93NUMPY") {
  Bytes out(magic.begin(), magic.end());
  out.push_back(static_cast<unsigned char>(major));
  out.push_back(static_cast<unsigned char>(minor));
  const auto len =
      static_cast<std::uint64_t>(header_len_field >= 0 ? header_len_field : static_cast<long long>(header.size()));
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out.push_back(static_cast<unsigned char>(len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string f4_header(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_SUITE("io") {
  TEST_CASE("npy: float32 2-D round trip through a file is bit-exact") {
    TempDir dir;
    const std::vector<float> values = {0.0f,
                                       -0.0f,
                                       1.5f,
                                       -2.25f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::denorm_min(),
                                       3.0e38f,
                                       1e-30f,
                                       7.0f,
                                       8.0f};
    const std::string path = dir.file("f32.npy");
    entgraph::write_npy(path, values.data(), {3, 4});
    const NpyArray a = entgraph::read_npy(path);
    CHECK(a.dtype == NpyDtype::float32);
    CHECK(a.shape == std::vector<std::size_t>{3, 4});
    CHECK(a.size() == 12);
    const std::vector<float> back = a.values<float>();
    REQUIRE(back.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      CAPTURE(i);
      CHECK(same_bits(back[i], values[i]));
    }
    const auto m = a.to_matrix<float>();
    CHECK(m.rows == 3);
    CHECK(m.cols == 4);
    CHECK(m.view()(1, 1) == -std::numeric_limits<float>::infinity());
    // float32 -> double is exact.
    CHECK(a.values<double>()[3] == -2.25);
  }

  TEST_CASE("npy: float64 strided matrix round trip keeps only the logical columns") {
    TempDir dir;
    // 2 x 3 view over rows of stride 5.
    const std::vector<double> storage = {1, 2, 3, -99, -99, 4, 5, 6, -99, -99};
    const entgraph::MatrixView<const double> view(storage.data(), 2, 3, 5);
    const std::string path = dir.file("f64.npy");
    entgraph::write_npy(path, view);
    const NpyArray a = entgraph::read_npy(path);
    CHECK(a.dtype == NpyDtype::float64);
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(a.values<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
    const std::vector<double> precise = {0.1, 1.0 / 3.0, std::numeric_limits<double>::denorm_min()};
    entgraph::write_npy(path, precise.data(), {3});
    const auto back = entgraph::read_npy(path).values<double>();
    for (std::size_t i = 0; i < precise.size(); ++i) CHECK(same_bits(back[i], precise[i]));
  }

  TEST_CASE("npy: 1-D, 0-D and empty shapes round trip") {
    const std::vector<float> v = {1, 2, 3, 4, 5};
    for (const auto& shape : std::vector<std::vector<std::size_t>>{{5}, {}, {0, 5}, {5, 0}, {0}, {1, 5, 1}}) {
      CAPTURE(entgraph::npy_shape_string(shape));
      const NpyArray a = NpyArray::from_data(v.data(), shape);
      const Bytes bytes = entgraph::encode_npy(a);
      const NpyArray b = entgraph::read_npy_bytes(bytes.data(), bytes.size());
      CHECK(b.shape == shape);
      CHECK(b.bytes == a.bytes);
      CHECK(b.size() == a.size());
    }
    CHECK(NpyArray::from_data(v.data(), {}).size() == 1);
    CHECK(NpyArray::from_data<float>(nullptr, {0, 5}).bytes.empty());
    CHECK_THROWS_AS(NpyArray::from_data<float>(nullptr, {2}), Error);
    const auto empty_rows = NpyArray::from_data<float>(nullptr, {0, 5}).to_matrix<float>();
    CHECK(empty_rows.rows == 0);
    CHECK(empty_rows.cols == 5);
  }

  TEST_CASE("npy: the header matches numpy's layout, data aligned to 64 bytes") {
    const std::vector<float> v = {0, 1, 2, 3, 4, 5};
    const NpyArray a = NpyArray::from_data(v.data(), {2, 3});
    for (int version : {1, 2, 3}) {
      CAPTURE(version);
      const Bytes bytes = entgraph::encode_npy(a, version);
      CHECK(std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0);
      CHECK(bytes[6] == version);
      CHECK(bytes[7] == 0);
      const std::size_t offset = version == 1 ? 10 : 12;
      const std::size_t header_len =
          version == 1 ? (bytes[8] | bytes[9] << 8)
                       : (bytes[8] | bytes[9] << 8 | bytes[10] << 16 | static_cast<std::size_t>(bytes[11]) << 24);
      CHECK((offset + header_len) % 64 == 0);
      CHECK(bytes.size() == offset + header_len + 24);
      const std::string header(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                               bytes.begin() + static_cast<std::ptrdiff_t>(offset + header_len));
      CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
      CHECK(header.back() == '\n');
      const NpyArray b = entgraph::read_npy_bytes(bytes.data(), bytes.size());
      CHECK(b.values<float>() == v);
    }
    CHECK(entgraph::encode_npy(a)[6] == 1);  // auto picks 1.0
    CHECK(entgraph::npy_shape_string({}) == "()");
    CHECK(entgraph::npy_shape_string({7}) == "(7,)");
    CHECK(entgraph::npy_shape_string({6, 12}) == "(6, 12)");
  }

  TEST_CASE("npy: Python literal variants of the header are accepted") {
    // Double quotes, keys reordered, no trailing comma, Python 2 longs, no padding.
    const Bytes data = zeros(2 * 3 * 8);
    for (const std::string& header : {
             std::string("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f8\"}"),
             std::string("{ 'descr' : '<f8' , 'fortran_order' : False , 'shape' : ( 2 , 3 ) }   \n"),
             std::string("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3,), }\n"),
         }) {
      CAPTURE(header);
      const Bytes bytes = make_npy(header, data);
      const NpyArray a = entgraph::read_npy_bytes(bytes.data(), bytes.size());
      CHECK(a.dtype == NpyDtype::float64);
      CHECK(a.shape == std::vector<std::size_t>{2, 3});
    }
    // Version 3.0 allows UTF-8 in the header (only in strings it matters).
    const Bytes v3 = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", zeros(4), 3);
    CHECK(entgraph::read_npy_bytes(v3.data(), v3.size()).shape == std::vector<std::size_t>{1});
  }

  TEST_CASE("npy: every supported dtype decodes to the right values") {
    struct Case {
      const char* descr;
      NpyDtype dtype;
      Bytes data;
      std::vector<double> expected;
    };
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<Case> cases = {
        // float16: 1, -2, +inf, smallest subnormal 2^-24, largest finite 65504.
        {"<f2",
         NpyDtype::float16,
         {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c, 0x01, 0x00, 0xff, 0x7b},
         {1.0, -2.0, inf, std::ldexp(1.0, -24), 65504.0}},
        {"<i4", NpyDtype::int32, {0xff, 0xff, 0xff, 0xff, 0x07, 0x00, 0x00, 0x00}, {-1.0, 7.0}},
        {"<i8",
         NpyDtype::int64,
         {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01, 0, 0, 0, 0, 0, 0},
         {-2.0, 256.0}},
        {"|u1", NpyDtype::uint8, {0, 255, 3}, {0.0, 255.0, 3.0}},
        {"|b1", NpyDtype::boolean, {0, 1, 1}, {0.0, 1.0, 1.0}},
        {"<f8", NpyDtype::float64, {0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, {1.0}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.descr);
      const std::string header = std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (" +
                                 std::to_string(c.expected.size()) + ",), }\n";
      const Bytes bytes = make_npy(header, c.data);
      const NpyArray a = entgraph::read_npy_bytes(bytes.data(), bytes.size());
      CHECK(a.dtype == c.dtype);
      CHECK(entgraph::npy_dtype_size(a.dtype) * a.size() == c.data.size());
      CHECK(a.values<double>() == c.expected);
      CHECK(std::string(entgraph::npy_dtype_descr(a.dtype)) == c.descr);
      // Re-encoding gives the same data back.
      const Bytes again = entgraph::encode_npy(a);
      CHECK(entgraph::read_npy_bytes(again.data(), again.size()).bytes == c.data);
    }
    const std::int64_t big = (std::int64_t{1} << 53) + 1;  // not a double; rounds once to float
    const NpyArray a = NpyArray::from_data(&big, {1});
    CHECK(a.values<float>()[0] == static_cast<float>(big));
  }

  TEST_CASE("npy: malformed inputs throw entgraph::Error naming the file and the problem") {
    const std::string ok_header = f4_header("(4, 6)");
    std::string many_dims = "(";
    for (int i = 0; i < 65; ++i) many_dims += "1, ";
    many_dims += ")";
    const std::vector<CorruptInput> cases = {
        {"empty", {}, "empty file"},
        {"wrong magic", make_npy(ok_header, zeros(96), 1, 0, -1, "\x93NUMPX"), "not a .npy file (wrong magic"},
        {"text file", Bytes{'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd'}, "wrong magic string 'hello,'"},
        {"shorter than the magic", Bytes{0x93, 'N', 'U', 'M'}, "not a .npy file"},
        {"only magic and version", Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 5},
         "truncated header (file has 9 bytes)"},
        {"version 4.0", make_npy(ok_header, zeros(96), 4), "unsupported format version 4.0"},
        {"version 1.1", make_npy(ok_header, zeros(96), 1, 1), "unsupported format version 1.1"},
        {"version 0.0", make_npy(ok_header, zeros(96), 0), "unsupported format version 0.0"},
        {"header length beyond the file", make_npy(ok_header, zeros(96), 1, 0, 60000),
         "header length 60000 exceeds the file"},
        {"v2 header length 4 GiB", make_npy(ok_header, zeros(96), 2, 0, 0xffffffffLL),
         "header length 4294967295 exceeds the file"},
        {"header is a list", make_npy("[1, 2, 3]\n", zeros(96)), "header is not a dict (starts with '[1, 2, 3]"},
        {"header of NULs", make_npy(std::string(16, '\0'), zeros(96)), "header is not a dict (starts with '\\x00"},
        {"empty header", make_npy("", zeros(96)), "header is not a dict"},
        {"dict not closed", make_npy("{'descr': '<f4', ", zeros(96)), "header dict is not closed"},
        {"missing comma", make_npy("{'descr': '<f4' 'shape': (1,)}", zeros(96)), "expected ',' or '}'"},
        {"text after the dict", make_npy(ok_header + "x", zeros(96)), "unexpected text after the header dict"},
        {"key not a string", make_npy("{descr: '<f4'}", zeros(96)), "header dict key is not a string"},
        {"missing colon", make_npy("{'descr' '<f4'}", zeros(96)), "expected ':' after key 'descr'"},
        {"unterminated string", make_npy("{'descr: <f4}", zeros(96)), "unterminated string"},
        {"missing shape", make_npy("{'descr': '<f4', 'fortran_order': False}", zeros(96)), "no 'shape' key"},
        {"missing descr", make_npy("{'fortran_order': False, 'shape': (4, 6)}", zeros(96)), "no 'descr' key"},
        {"missing fortran_order", make_npy("{'descr': '<f4', 'shape': (4, 6)}", zeros(96)), "no 'fortran_order' key"},
        {"duplicate key",
         make_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "duplicate key 'descr'"},
        {"unknown key", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), 'foo': 1}", zeros(96)),
         "unexpected key 'foo'"},
        {"big-endian", make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "big-endian dtype '>f4' is not supported"},
        {"Fortran order", make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 6)}", zeros(96)),
         "Fortran-order arrays are not supported"},
        {"fortran_order not a bool", make_npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (4, 6)}", zeros(96)),
         "'fortran_order' is not True or False"},
        {"object dtype", make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "object arrays are not supported"},
        {"structured dtype", make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "structured dtypes are not supported"},
        {"complex dtype", make_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "unsupported dtype '<c8'"},
        {"string dtype", make_npy("{'descr': '<U10', 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "unsupported dtype '<U10'"},
        {"descr not a string", make_npy("{'descr': 4, 'fortran_order': False, 'shape': (4, 6)}", zeros(96)),
         "'descr' is not a string"},
        {"negative shape entry", make_npy(f4_header("(-1, 6)"), zeros(96)), "negative 'shape' entry -1"},
        {"shape is a list", make_npy(f4_header("[4, 6]"), zeros(96)), "'shape' is not a tuple"},
        {"shape entry not an integer", make_npy(f4_header("('a', 6)"), zeros(96)), "'shape' entry is not an integer"},
        {"shape entry a float", make_npy(f4_header("(4.0, 6)"), zeros(96)), "expected ',' or ')' in 'shape'"},
        {"shape tuple not closed", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6", zeros(96)),
         "'shape' tuple is not closed"},
        {"shape entry beyond size_t", make_npy(f4_header("(99999999999999999999999, 1)"), zeros(96)), "overflow"},
        {"element count overflows", make_npy(f4_header("(4294967296, 4294967296, 2)"), zeros(96)), "overflow"},
        {"byte count overflows", make_npy(f4_header("(4611686018427387904,)"), zeros(96)), "overflow"},
        {"huge shape, small file", make_npy(f4_header("(10000, 10000)"), zeros(96)),
         "truncated data (got 96 bytes, expected 400000000)"},
        {"too many dimensions", make_npy(f4_header(many_dims), zeros(4)), "too many dimensions"},
        {"truncated data", make_npy(ok_header, zeros(40)), "truncated data (got 40 bytes, expected 96)"},
        {"no data at all", make_npy(ok_header, {}), "truncated data (got 0 bytes, expected 96)"},
        {"trailing data", make_npy(ok_header, zeros(100)),
         "4 unexpected bytes after the data (got 100 bytes, expected 96)"},
    };
    check_corrupt_inputs(cases, "read_npy: bad.npy: ", [](const Bytes& bytes) {
      return entgraph::read_npy_bytes(bytes.data(), bytes.size(), "bad.npy");
    });
    CHECK(cases.size() >= 10);
  }

  TEST_CASE("npy: read_npy checks the file, and reports it by path") {
    TempDir dir;
    const std::string missing = dir.file("missing.npy");
    CHECK_ERROR_CONTAINS(entgraph::read_npy(missing), "read_npy: " + missing + ": cannot open file");
    CHECK_ERROR_CONTAINS(entgraph::read_npy(dir.file("")), "is a directory");

    // The same corrupt images through a real file give the same messages.
    const std::string path = dir.file("bad.npy");
    write_bytes(path, make_npy(f4_header("(4, 6)"), zeros(40)));
    CHECK_ERROR_CONTAINS(entgraph::read_npy(path),
                         "read_npy: " + path + ": truncated data (got 40 bytes, expected 96)");
    write_bytes(path, make_npy(f4_header("(4, 6)"), zeros(96), 1, 0, 65535));
    CHECK_ERROR_CONTAINS(entgraph::read_npy(path), "exceeds the file");
    write_bytes(path, make_npy(f4_header("(1000000000, 1000000000)"), zeros(8)));
    CHECK_ERROR_CONTAINS(entgraph::read_npy(path), "truncated data (got 8 bytes");
    write_bytes(path, {});
    CHECK_ERROR_CONTAINS(entgraph::read_npy(path), "empty file");
    write_bytes(path, {0x93, 'N', 'U'});
    CHECK_ERROR_CONTAINS(entgraph::read_npy(path), "not a .npy file");
  }

  TEST_CASE("npy: every truncation and random corruption of a file throws or parses, never crashes") {
    const std::vector<double> v = {1, 2, 3, 4, 5, 6};
    const Bytes good = entgraph::encode_npy(NpyArray::from_data(v.data(), {2, 3}), 2);
    for_each_truncation(
        good, [](const Bytes& cut) { CHECK_THROWS_AS(entgraph::read_npy_bytes(cut.data(), cut.size()), Error); });
    std::mt19937 rng(5);
    auto flip = [&](Bytes& bad) {
      // Mostly in the prefix and header, where the parser works.
      const std::size_t at = rng() % (rng() % 4 == 0 ? bad.size() : 80);
      bad[at] = static_cast<unsigned char>(rng());
    };
    const std::size_t parsed = count_accepted_corruptions(good, rng, 3000, flip, [](const Bytes& bad) {
      const NpyArray a = entgraph::read_npy_bytes(bad.data(), bad.size());
      CHECK(a.bytes.size() == a.size() * entgraph::npy_dtype_size(a.dtype));
    });
    CHECK(parsed > 0);  // flips in the data or the padding still parse
  }

  TEST_CASE("npy: to_matrix requires 2-D; writing rejects invalid arrays before touching the file") {
    const std::vector<float> v(8, 1.0f);
    const NpyArray cube = NpyArray::from_data(v.data(), {2, 2, 2});
    CHECK_ERROR_CONTAINS(cube.to_matrix<float>(), "expected a 2-D array (got shape (2, 2, 2))");
    CHECK_THROWS_AS(NpyArray::from_data(v.data(), {8}).to_matrix<double>(), Error);

    TempDir dir;
    const std::string path = dir.file("keep.npy");
    entgraph::write_npy(path, v.data(), {2, 4});
    NpyArray broken = NpyArray::from_data(v.data(), {2, 4});
    broken.bytes.resize(5);
    CHECK_ERROR_CONTAINS(entgraph::write_npy(path, broken),
                         "data size does not match the shape (got 5 bytes, expected 32");
    CHECK(entgraph::read_npy(path).shape == std::vector<std::size_t>{2, 4});  // untouched
    CHECK_THROWS_AS(broken.values<float>(), Error);
    CHECK_THROWS_AS(entgraph::encode_npy(NpyArray::from_data(v.data(), {8}), 7), Error);

    const std::string no_dir = dir.file("no/such/dir/x.npy");
    CHECK_ERROR_CONTAINS(entgraph::write_npy(no_dir, v.data(), {8}),
                         "write_npy: " + no_dir + ": cannot open file for writing");
  }

  TEST_CASE("npy: shapes NumPy cannot read (a size above 2^63 - 1) are refused before writing") {
    const std::size_t big = std::numeric_limits<std::size_t>::max();  // 2^64 - 1
    const std::size_t over = std::size_t{1} << 63;                    // 2^63
    const std::size_t max_ok = over - 1;
    NpyArray empty;
    empty.dtype = NpyDtype::float32;
    empty.shape = {0, big};  // no elements, but NumPy's intp cannot hold the dimension
    CHECK_ERROR_CONTAINS(entgraph::encode_npy(empty), "dimension 1 is larger than NumPy can read (2^63 - 1");
    empty.shape = {over, 0};
    CHECK_ERROR_CONTAINS(entgraph::encode_npy(empty), "dimension 0 is larger than NumPy can read");
    CHECK_ERROR_CONTAINS(entgraph::encode_npy_header(NpyDtype::uint8, {over}), "larger than NumPy can read");
    CHECK_ERROR_CONTAINS(entgraph::encode_npy_header(NpyDtype::float32, {std::size_t{1} << 61}),
                         "more bytes than NumPy can read");
    empty.shape = {0, max_ok};  // the largest dimension NumPy takes
    const Bytes bytes = entgraph::encode_npy(empty);
    CHECK(entgraph::read_npy_bytes(bytes.data(), bytes.size()).shape == std::vector<std::size_t>{0, max_ok});
    CHECK_NOTHROW(entgraph::encode_npy_header(NpyDtype::uint8, {max_ok}));

    TempDir dir;
    const std::string path = dir.file("keep.npy");
    const float one = 1.0f;
    entgraph::write_npy(path, &one, {1});
    empty.shape = {0, big};
    CHECK_ERROR_CONTAINS(entgraph::write_npy(path, empty), "write_npy: " + path + ": shape (0, 18446744073709551615)");
    CHECK(entgraph::read_npy(path).shape == std::vector<std::size_t>{1});  // untouched

    // Nor read: such a file did not come from NumPy.
    const Bytes hostile = make_npy(f4_header("(0, 18446744073709551615)"), {});
    CHECK_ERROR_CONTAINS(entgraph::read_npy_bytes(hostile.data(), hostile.size(), "zero_by_max.npy"),
                         "read_npy: zero_by_max.npy: shape (0, 18446744073709551615): dimension 1 is larger than NumPy");
    const Bytes too_many_bytes = make_npy(f4_header("(2305843009213693952,)"), {});  // 2^61 floats: 2^63 bytes
    CHECK_ERROR_CONTAINS(entgraph::read_npy_bytes(too_many_bytes.data(), too_many_bytes.size()),
                         "holds more bytes than NumPy can read");
  }

  TEST_CASE("npy: kNpyMaxDims dimensions round trip, one more is rejected") {
    const float x = 1.0f;
    const NpyArray a = NpyArray::from_data(&x, std::vector<std::size_t>(entgraph::kNpyMaxDims, 1));
    const Bytes auto_bytes = entgraph::encode_npy(a);
    CHECK(auto_bytes[6] == 1);
    const NpyArray b = entgraph::read_npy_bytes(auto_bytes.data(), auto_bytes.size());
    CHECK(b.ndim() == entgraph::kNpyMaxDims);
    NpyArray too_many = a;
    too_many.shape.push_back(1);
    CHECK_ERROR_CONTAINS(entgraph::encode_npy(too_many), "too many dimensions");
  }

#ifdef ENTGRAPH_SOURCE_DIR
  TEST_CASE("npy: the shipped sample scores are 6 x 12 float32") {
    const NpyArray a = entgraph::read_npy(std::string(ENTGRAPH_SOURCE_DIR) + "/data/sample_scores.npy");
    CHECK(a.dtype == NpyDtype::float32);
    CHECK(a.shape == std::vector<std::size_t>{6, 12});
    for (float x : a.values<float>()) CHECK(std::isfinite(x));
  }
#endif
}
