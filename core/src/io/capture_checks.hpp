// entgraph internal: what the capture reader (io/capture_read.cpp), the
// writers (io/capture_write.cpp) and the capture's own checks
// (io/capture.cpp) share: the format's constants, the message helpers and
// the validation of a capture's sizes, settings and values.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"

namespace entgraph::detail::capture_io {

using Json = nlohmann::ordered_json;  // keeps the key order of files and of provenance

inline constexpr const char* kFormat = "entgraph-capture";
inline constexpr int kVersion = 1;
inline constexpr int kMaxJsonDepth = 64;  // levels of nested arrays and objects in provenance (one more in capture.json)
inline constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 30;  // capture.json
inline constexpr const char* kKnownKeys[] = {"format", "version", "layers", "heads",  "head_dim", "lengths", "queries",
                                             "keys",   "values",  "alpha",  "causal", "scale",    "texts",   "provenance"};
inline constexpr const char* kKnownKeyList =
    "format, version, layers, heads, head_dim, lengths, queries, keys, values, alpha, causal, scale, texts, "
    "provenance";

// Every error goes through one of these: "<prefix><what>", where prefix is
// "validate_capture: ", "read_capture: <dir>: " or "write_capture: <dir>: "
// (read_capture reports what it finds wrong as ErrorCode::bad_file).
[[noreturn]] void fail(const Message& prefix, const Message& what,
                       ErrorCode code = ErrorCode::bad_argument);
std::string str(std::size_t n);
// a * b, or false if it overflows.
bool checked_mul(std::size_t a, std::size_t b, std::size_t& out);
// A JSON value as a short, printable string for error messages.
std::string shown(const Json& j);
// Parses JSON text (detail::parse_json_strict): more than max_levels levels
// of nested arrays and objects, or a key repeated in any object, is an error;
// with repeated, the message of a repeated key is stored there instead, for
// read_capture to report after "format" and "version".
Json parse_json(const std::string& text, const Message& prefix, const std::string& what, int max_levels,
                std::string* repeated = nullptr);
// True if s is valid UTF-8 (what JSON text must be).
bool valid_utf8(const std::string& s);

// The sizes derived from layers, heads, head_dim and lengths, each checked
// for overflow.
struct Sizes {
  std::size_t tokens = 0;
  std::size_t heads_total = 0;  // layers * heads
  std::size_t count = 0;        // elements of each array
};
Sizes checked_sizes(std::size_t layers, std::size_t heads, std::size_t head_dim,
                    const std::vector<std::size_t>& lengths, const Message& prefix);

// "layer 1, head 0, token 17 (sequence 0, position 17), dim 3" for element i
// of an array of the capture.
std::string locate(const Capture& c, const Sizes& s, std::size_t i);
// n values of an array of the capture, the first at element first: each finite.
void check_finite(const Capture& c, const Sizes& s, const float* a, std::size_t n, std::size_t first, const char* name,
                  const Message& prefix);
void check_finite(const Capture& c, const Sizes& s, const std::vector<float>& a, const char* name,
                  const Message& prefix);
std::string head_name(const Capture& c, std::size_t index);
// The shortest text that reads back as v: 0.1, not 0.10000000000000001.
std::string number(double v);
// The largest norm among rows [0, rows) of a (head_dim columns), in double,
// and the row it is at (first_token + row) if larger than best.
void largest_norm(const float* a, std::size_t rows, std::size_t head_dim, std::size_t first_token, double& best,
                  std::size_t& token);
// The bound of head hi's scores from its largest query and key norms.
void check_head_scores(const Capture& c, std::size_t hi, double q, std::size_t qt, double k, std::size_t kt,
                       const Message& prefix);
// Everything validate_capture() promises, with the given message prefix;
// without arrays, all but the arrays' sizes and values (a CaptureWriter's
// capture, whose data arrive later).
Sizes validate(const Capture& c, const Message& prefix, bool arrays = true);
// An error of read_npy, write_npy or the file helpers, "<op>: <path>: <what>",
// restated as "<prefix><name>: <what>" so that it names the capture folder
// (with the same code).
[[noreturn]] void restate(const Error& e, const std::string& op, const std::string& path, const std::string& name,
                          const Message& prefix);

}  // namespace entgraph::detail::capture_io
