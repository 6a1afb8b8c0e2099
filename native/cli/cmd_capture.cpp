// entgraph capture: run a teacher model on a text file and write its Q, K and
// V as a capture (docs/FORMATS.md).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/files.hpp"
#include "entgraph/model.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph capture --model DIR --text FILE --out DIR [options]\n"
    "\n"
    "Runs the teacher model in --model (a folder with config.json and its\n"
    "weights, e.g. data/teacher-causal) on the bytes of --text, cut into\n"
    "sequences of at most the model's context (256 bytes for teacher-causal and\n"
    "teacher-masked, 8192 for teacher-long), and writes the capture:\n"
    "capture.json and the arrays it names (queries.npy, keys.npy, values.npy,\n"
    "[layers, heads, tokens, head_dim]; into an existing capture, queries.g1.npy\n"
    "and so on, docs/FORMATS.md). Sequences are computed and written one at a\n"
    "time, so memory does not grow with their number. The capture appears whole\n"
    "or not at all, even under kill -9 or another writer of --out: its files are\n"
    "staged and committed by replacing capture.json, so a failure leaves an\n"
    "earlier capture there as it was. Its size is known before the model\n"
    "runs (about 6 KB per byte of text for the shipped teachers): one larger\n"
    "than --max-bytes or than the free disk space is refused up front.\n"
    "The text must be UTF-8 (a capture stores it as JSON strings); other bytes\n"
    "are refused before the model runs, naming the byte offset.\n"
    "\n"
    "Options:\n"
    "  --model DIR        teacher folder (required)\n"
    "  --text FILE        input text (required): a regular file (not a pipe or a\n"
    "                     device) of UTF-8, not empty, at most 1 GiB\n"
    "  --out DIR          capture folder to write (created if missing)\n"
    "  --sequence-bytes N bytes per sequence, 1..context (default: the context)\n"
    "  --max-sequences N  keep only the first N sequences (default: all)\n"
    "  --dtype NAME       float32 (default) or float16\n"
    "  --max-bytes N      refuse a capture whose files would exceed N bytes\n"
    "                     (suffixes K, M, G, T: powers of 1024; default 4G)\n"
    "  -h, --help         show this help\n";

constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{4} << 30;

// --max-bytes: digits with an optional K, M, G or T (powers of 1024).
std::uint64_t max_bytes_option(const Args& args) {
  const std::optional<std::string> given = args.get("max-bytes");
  if (!given) return kDefaultMaxBytes;
  const std::string& v = *given;
  std::size_t digits = 0;
  while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9') ++digits;
  const std::string suffix = v.substr(digits);
  int shift = -1;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (suffix == "T" || suffix == "t") shift = 40;
  if (digits == 0 || digits > 19 || shift < 0)
    throw args.error("--max-bytes: expected a byte count such as 500000000, 512M or 4G (got '" + v + "')");
  const std::uint64_t n = std::stoull(v.substr(0, digits));
  if (n == 0) throw args.error("--max-bytes: must be >= 1 (got '" + v + "')");
  if (n > (std::numeric_limits<std::uint64_t>::max() >> shift))
    throw args.error("--max-bytes: too large (got '" + v + "')");
  return n << shift;
}

// "6.2 GB (6 645 678 080 bytes)"-style sizes for messages: decimal units.
std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000.0 && u < 6) {
    v /= 1000.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s (%llu bytes)", v, units[u], static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

int run_capture(const std::vector<std::string>& argv) {
  const Args args("capture", argv,
                  {{"model", true}, {"text", true}, {"out", true}, {"sequence-bytes", true}, {"max-sequences", true},
                   {"dtype", true}, {"max-bytes", true}, kIsaOption, kThreadsOption});
  if (args.help()) {
    std::printf("%s%s", kUsage, kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"model", "text", "out"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  const std::string dtype_name = args.get("dtype").value_or("float32");
  if (dtype_name != "float32" && dtype_name != "float16")
    throw args.error("--dtype: expected float32 or float16 (got '" + dtype_name + "')");
  const NpyDtype dtype = dtype_name == "float16" ? NpyDtype::float16 : NpyDtype::float32;
  const std::uint64_t max_bytes = max_bytes_option(args);
  if (const auto max = args.integer("max-sequences"); max && *max == 0)
    throw args.error("--max-sequences: must be >= 1");

  const Teacher teacher = Teacher::load(*args.get("model"));
  const std::size_t context = teacher.config().context;
  const std::size_t piece = args.integer("sequence-bytes").value_or(context);
  if (piece < 1 || piece > context)
    throw args.error("--sequence-bytes: must be in [1, " + std::to_string(context) + "] (got " + std::to_string(piece) + ")");

  const std::string path = *args.get("text");
  // Each byte of text is a token of layers x heads x head_dim values in each
  // of queries, keys and values: a text too long for --max-bytes (all of it
  // captured: no --max-sequences) is refused from its size, before it is read.
  const TeacherConfig& config = teacher.config();
  const std::uint64_t per_byte = std::uint64_t{3} * config.layers * config.heads * config.head_dim() * npy_dtype_size(dtype);
  const std::uint64_t read_limit = std::uint64_t{1} << 30;
  const std::uint64_t text_limit =
      args.has("max-sequences") ? read_limit : std::min<std::uint64_t>(read_limit, max_bytes / per_byte + 1);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > text_limit && !ec)
    throw Error("capture: --max-bytes: --text " + path + " has " + std::to_string(std::filesystem::file_size(path)) +
                " bytes and each takes " + std::to_string(per_byte) + " bytes of capture: more than --max-bytes " +
                human_bytes(max_bytes) + " allows (" + std::to_string(text_limit - 1) +
                " bytes of text); raise --max-bytes, or capture less with --max-sequences");
  const std::vector<unsigned char> bytes =
      read_file_bytes("capture: --text", path, static_cast<std::size_t>(text_limit));
  if (bytes.empty()) throw Error("capture: --text: " + path + ": file is empty");
  const std::string text(bytes.begin(), bytes.end());
  if (const std::size_t at = utf8_invalid_offset(text); at != text.size())
    throw Error("capture: --text: " + path + ": not valid UTF-8 at byte offset " + std::to_string(at) +
                " (a capture stores its text as JSON strings; convert the file to UTF-8)");
  std::vector<std::string> texts = split_text(text, piece);
  if (const auto max = args.integer("max-sequences"); max && texts.size() > *max) texts.resize(*max);
  // split_text keeps characters whole unless a piece is shorter than one.
  std::size_t offset = 0;
  for (const std::string& t : texts) {
    if (const std::size_t at = utf8_invalid_offset(t); at != t.size())
      throw args.error("--sequence-bytes: " + std::to_string(piece) + " bytes cut the UTF-8 character at byte offset " +
                       std::to_string(offset + at) + " of --text; use at least 4");
    offset += t.size();
  }
  const std::uint64_t planned = teacher.capture_bytes(texts, dtype);
  if (planned > max_bytes)
    throw Error("capture: --max-bytes: the capture would take " + human_bytes(planned) + ", more than --max-bytes " +
                human_bytes(max_bytes) + "; raise --max-bytes, or capture less with --max-sequences");
  // One sequence in memory at a time: captures of many long sequences
  // (8192 bytes with the long teacher) need no more memory than one. The
  // writer refuses a capture larger than the free disk space.
  teacher.capture_to(*args.get("out"), texts, dtype);
  std::size_t tokens = 0;
  for (const std::string& t : texts) tokens += t.size();
  const TeacherConfig& c = config;
  std::printf("%s: %zu sequences, %zu tokens, %zu layers x %zu heads (%s)\n", args.get("out")->c_str(), texts.size(),
              tokens, c.layers, c.heads, c.name.c_str());
  return 0;
}

}  // namespace entgraph::cli
