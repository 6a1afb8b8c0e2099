// entgraph capture: run a teacher model on a text file and write its Q, K and
// V as a capture (docs/FORMATS.md).
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/model.hpp"
#include "io/binary.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph capture --model DIR --text FILE --out DIR [options]\n"
    "\n"
    "Runs the teacher model in --model (a folder with config.json and its\n"
    "weights, e.g. data/teacher-causal) on the bytes of --text, cut into\n"
    "sequences of at most the model's context (256 bytes for teacher-causal and\n"
    "teacher-masked, 8192 for teacher-long), and writes the capture:\n"
    "capture.json, queries.npy, keys.npy and values.npy, [layers, heads, tokens,\n"
    "head_dim]. Sequences are computed and written one at a time, so memory\n"
    "does not grow with their number; capture.json is written last.\n"
    "\n"
    "Options:\n"
    "  --model DIR        teacher folder (required)\n"
    "  --text FILE        input text, any bytes (required)\n"
    "  --out DIR          capture folder to write (created if missing)\n"
    "  --sequence-bytes N bytes per sequence, 1..context (default: the context)\n"
    "  --max-sequences N  keep only the first N sequences (default: all)\n"
    "  --dtype NAME       float32 (default) or float16\n"
    "  -h, --help         show this help\n";

}  // namespace

int run_capture(const std::vector<std::string>& argv) {
  const Args args("capture", argv,
                  {{"model", true}, {"text", true}, {"out", true}, {"sequence-bytes", true}, {"max-sequences", true},
                   {"dtype", true}, kIsaOption, kThreadsOption});
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

  const Teacher teacher = Teacher::load(*args.get("model"));
  const std::size_t context = teacher.config().context;
  const std::size_t piece = args.integer("sequence-bytes").value_or(context);
  if (piece < 1 || piece > context)
    throw args.error("--sequence-bytes: must be in [1, " + std::to_string(context) + "] (got " + std::to_string(piece) + ")");

  const std::string path = *args.get("text");
  const std::vector<unsigned char> bytes = detail::read_file_bytes("capture: --text", path, std::size_t{1} << 30);
  if (bytes.empty()) throw Error("capture: --text: " + path + ": file is empty");
  std::vector<std::string> texts = split_text(std::string(bytes.begin(), bytes.end()), piece);
  if (const auto max = args.integer("max-sequences")) {
    if (*max == 0) throw args.error("--max-sequences: must be >= 1");
    if (texts.size() > *max) texts.resize(*max);
  }
  // One sequence in memory at a time: captures of many long sequences
  // (8192 bytes with the long teacher) need no more memory than one.
  teacher.capture_to(*args.get("out"), texts, dtype_name == "float16" ? NpyDtype::float16 : NpyDtype::float32);
  std::size_t tokens = 0;
  for (const std::string& t : texts) tokens += t.size();
  const TeacherConfig& c = teacher.config();
  std::printf("%s: %zu sequences, %zu tokens, %zu layers x %zu heads (%s)\n", args.get("out")->c_str(), texts.size(),
              tokens, c.layers, c.heads, c.name.c_str());
  return 0;
}

}  // namespace entgraph::cli
