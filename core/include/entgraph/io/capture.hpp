// entgraph: captures, what a model's attention looked like on some inputs.
//
// A capture is a folder holding capture.json and NumPy .npy files with the
// queries and keys (values optional) of every layer and head, for a set of
// sequences. docs/FORMATS.md ("Captures") is the full specification; in short:
//
//   dir/capture.json   {"format": "entgraph-capture", "version": 1,
//                       "layers": 4, "heads": 4, "head_dim": 32, "lengths": [256, 200],
//                       "queries": "queries.npy", "keys": "keys.npy", "values": "values.npy",
//                       "alpha": 1.5, "causal": true, "scale": 0.1767766952966369,
//                       "texts": ["...", "..."], "provenance": {"model": "..."}}
//   dir/queries.npy    float32 or float16, shape (layers, heads, tokens, head_dim)
//   dir/keys.npy       the same shape (its dtype may differ from queries')
//   dir/values.npy     optional, the same shape
//
// tokens is the sum of lengths: the sequences are concatenated along the
// token axis, so token t of sequence s is row offset(s) + t. "alpha" (of the
// entmax transform), "causal" and "scale" (scores = scale * q.k) are each
// either one value for the whole capture or a [layers][heads] nested array.
// The ground-truth attention graph is never stored: the runtime recomputes it
// from the queries and keys.
//
// What is rejected, always with entgraph::Error whose message names the
// operation, the folder and the field, e.g.
//   "read_capture: caps/tiny: unknown key \"casual\" in capture.json (expected one of ...)"
//   "read_capture: caps/tiny: keys: non-finite value nan at layer 1, head 0, token 17 (sequence 0, position 17), ..."
// (see read_capture() below). Every size product is checked for overflow, and
// the .npy files are read by read_npy(), which never allocates more than a
// file holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

// The largest α a capture may hold: the range of the entmax transform
// (kMaxEntmaxAlpha in transforms.hpp), so that every head's gold graph can be
// computed.
inline constexpr double kCaptureMaxAlpha = 1000.0;

// The largest max |q| * max |k| * max(1, scale) of a head (norms over all its
// tokens): 2^127, half the float32 maximum. It bounds every score
// scale * q.k and every partial sum of the dot product, so scores stay finite
// in float32 whatever the rounding.
inline constexpr double kCaptureMaxScore = 0x1p127;

// A capture in memory. The arrays are float32 whatever the files held
// (float16 widens exactly).
struct Capture {
  std::size_t layers = 0;
  std::size_t heads = 0;
  std::size_t head_dim = 0;
  std::vector<std::size_t> lengths;    // tokens of each sequence, each >= 1, at least one sequence
  std::vector<float> queries;          // [layers, heads, tokens(), head_dim], C order
  std::vector<float> keys;             // the same shape
  std::vector<float> values;           // the same shape, or empty: the capture has no values
  std::vector<HeadSettings> settings;  // layers * heads entries, index layer * heads + head
  std::vector<std::string> texts;      // empty, or the text (UTF-8) of each sequence
  std::string provenance = "{}";       // a JSON object as text, free-form (model, source, date, ...)
  std::string source;  // where it was read from (read_capture: the folder), or empty; names it in errors, never written

  // A capture of the given sizes with zero-filled arrays (values too if
  // with_values) and default settings: alpha 1.5, causal false, scale
  // 1/sqrt(head_dim). Throws entgraph::Error ("Capture::make: ...") if a size
  // or a length is zero, lengths is empty, or the element count overflows.
  static Capture make(std::size_t layers, std::size_t heads, std::size_t head_dim, std::vector<std::size_t> lengths,
                      bool with_values = false);

  // The sum of lengths. Throws entgraph::Error if it overflows.
  std::size_t tokens() const;
  // lengths.size().
  std::size_t sequences() const { return lengths.size(); }
  // The first token of a sequence: the sum of the lengths before it (O(sequence)).
  // Throws entgraph::Error unless sequence < sequences().
  std::size_t offset(std::size_t sequence) const;
  // Whether values is non-empty.
  bool has_values() const { return !values.empty(); }

  // The settings of one head. Throws entgraph::Error naming the argument
  // unless layer < layers and head < heads, or if settings does not hold
  // layers * heads entries.
  const HeadSettings& head(std::size_t layer, std::size_t head) const;
  HeadSettings& head(std::size_t layer, std::size_t head);

  // The rows of one sequence for one layer and head: a row-major
  // [lengths[sequence], head_dim] view into queries / keys / values (row i is
  // token offset(sequence) + i). The view points into the vector: it is
  // invalidated by anything that reallocates it. Each call sums lengths, so
  // costs O(sequences()). Throws entgraph::Error
  // ("Capture::queries_of: ...") naming the argument out of range, or if the
  // array does not hold layers * heads * tokens() * head_dim elements
  // (values_of: also if the capture has no values).
  MatrixView<const float> queries_of(std::size_t layer, std::size_t head, std::size_t sequence) const;
  MatrixView<const float> keys_of(std::size_t layer, std::size_t head, std::size_t sequence) const;
  MatrixView<const float> values_of(std::size_t layer, std::size_t head, std::size_t sequence) const;
  MatrixView<float> queries_of(std::size_t layer, std::size_t head, std::size_t sequence);
  MatrixView<float> keys_of(std::size_t layer, std::size_t head, std::size_t sequence);
  MatrixView<float> values_of(std::size_t layer, std::size_t head, std::size_t sequence);
};

// Checks that a capture is consistent; throws entgraph::Error
// ("validate_capture: <what>", or "validate_capture: capture <source>: <what>"
// for a capture that has a source) naming the first field that is not: a zero
// layers / heads / head_dim, no sequences, a zero length, a size product that
// overflows, queries / keys / values whose size is not
// layers * heads * tokens() * head_dim (values may be empty), settings that
// are not layers * heads entries, an alpha outside [1, kCaptureMaxAlpha], a
// scale that is not finite and > 0 or is beyond the float32 maximum, texts that are neither empty nor one per
// sequence or are not valid UTF-8, provenance that is not a JSON object (of
// at most 64 levels of nested arrays and objects, no key repeated), NaN or
// infinity in queries, keys or values (naming the array, layer, head and
// token of the first one), and a head whose queries and keys could make a
// score overflow float32: max |q| * max |k| * max(1, scale) above
// kCaptureMaxScore (naming the layer and head).
void validate_capture(const Capture& capture);

// Writes dir/capture.json, dir/queries.npy, dir/keys.npy and, if the capture
// has values, dir/values.npy (other files in dir are left alone), creating
// dir and its parents if needed. The capture appears whole or not at all:
// the files are written into a staging folder beside or inside dir and moved
// into place only once complete (capture.json last), so a failure (full
// disk, file size limit, read-only folder) leaves an existing capture in dir
// as it was. A capture larger than the free space of dir's file system is
// refused before anything is written. dtype is
// NpyDtype::float32 (exact) or NpyDtype::float16 (rounded to nearest even).
// "alpha", "causal" and "scale" are written as one value when every head
// agrees, else as [layers][heads] arrays. The capture is validated, and for
// float16 every value checked against the float16 range, before any file is
// written. Throws entgraph::Error ("write_capture: <dir>: <what>") if the
// capture is invalid (see validate_capture), dtype is another type, a value
// rounds beyond the float16 range (naming the array, layer, head and token),
// or a file or the folder cannot be written.
void write_capture(const std::string& dir, const Capture& capture, NpyDtype dtype = NpyDtype::float32);

// Writes a capture one sequence at a time, so that memory does not grow with
// the number of sequences (e.g. a teacher run over many long texts; see
// Teacher::capture_to in model.hpp). The files are byte-identical to what
// write_capture writes for the same capture.
//
//   CaptureWriter w(dir, layers, heads, head_dim, lengths, /*with_values=*/true, settings, texts, provenance);
//   for (s = 0; s < lengths.size(); ++s) w.write_sequence(s, queries_s, keys_s, values_s);
//   w.finish();  // writes capture.json
//
// Nothing in dir changes before finish(). The constructor refuses a capture
// larger than the free space of dir's file system (capture_file_bytes gives
// the size), then creates queries.npy, keys.npy and, with values, values.npy
// at their full size in a staging folder (beside dir if dir does not exist,
// else a hidden folder inside it); write_sequence puts each (layer, head)
// slice of a sequence at its final place in them; finish() writes
// capture.json and moves the files into dir, capture.json last. A writer
// destroyed before finish() (an error, an exception elsewhere) removes its
// staging folder and leaves an existing capture in dir as it was.
//
// Errors are entgraph::Error "CaptureWriter: <dir>: <what>", in the words of
// write_capture's and validate_capture's: from the constructor for what
// validate_capture checks except the arrays (sizes, lengths, settings, texts,
// provenance), an unsupported dtype, or a folder or file that cannot be
// written; from write_sequence for a sequence out of range or written
// already, arrays of the wrong size, or with no values where the capture has
// them (or the reverse), NaN or infinity or (float16) a value beyond its
// range, naming the array, layer, head and token (nothing of that sequence
// is written then), and write errors; from finish() for a sequence never
// written. After a write error, every later call fails.
class CaptureWriter {
 public:
  // settings: layers * heads entries (index layer * heads + head); texts:
  // empty, or one per sequence; provenance: a JSON object. dtype is
  // NpyDtype::float32 or NpyDtype::float16 (rounded to nearest even).
  CaptureWriter(const std::string& dir, std::size_t layers, std::size_t heads, std::size_t head_dim,
                std::vector<std::size_t> lengths, bool with_values, std::vector<HeadSettings> settings,
                std::vector<std::string> texts = {}, std::string provenance = "{}",
                NpyDtype dtype = NpyDtype::float32);
  CaptureWriter(CaptureWriter&&) noexcept;
  CaptureWriter& operator=(CaptureWriter&&) noexcept;
  ~CaptureWriter();

  // One sequence's arrays, each [layers, heads, lengths[sequence], head_dim]
  // in C order (what Teacher::forward returns for one text); values empty
  // unless the capture has values. Sequences may come in any order.
  void write_sequence(std::size_t sequence, const std::vector<float>& queries, const std::vector<float>& keys,
                      const std::vector<float>& values = {});
  // Closes the arrays and writes capture.json. Once only.
  void finish();

  std::size_t sequences() const;          // lengths.size()
  std::size_t sequences_written() const;  // how many write_sequence has taken

  struct State;  // opaque

 private:
  std::unique_ptr<State> state_;
};

// The exact number of bytes CaptureWriter (or write_capture) writes for a
// capture of these sizes, settings, texts and provenance: every .npy file
// and capture.json. For a check against a limit before any work. Throws
// entgraph::Error ("capture_file_bytes: ...") for what the constructor
// rejects before writing (see CaptureWriter).
std::uint64_t capture_file_bytes(std::size_t layers, std::size_t heads, std::size_t head_dim,
                                 std::vector<std::size_t> lengths, bool with_values, std::vector<HeadSettings> settings,
                                 std::vector<std::string> texts = {}, std::string provenance = "{}",
                                 NpyDtype dtype = NpyDtype::float32);

// The byte offset of the first byte of text that is not part of valid UTF-8
// (what a capture's texts must be: they are stored as JSON strings), or
// text.size() if all of it is valid. Overlong forms, surrogates and code
// points past U+10FFFF are invalid; a sequence cut by the end is invalid.
std::size_t utf8_invalid_offset(std::string_view text);

// Reads the capture in dir (float16 files are widened to float32 exactly).
// Throws entgraph::Error ("read_capture: <dir>: <what>") if dir or
// capture.json is missing or unreadable, capture.json is not a JSON object
// (or nests arrays and objects more than 65 levels deep, i.e. 64 in
// provenance, or is larger than 1 GiB), "format" is not
// "entgraph-capture", "version" is not 1, a key is unknown (named: this
// catches typos like "casual") or repeated (in any object, provenance
// included), a required key is missing, a value has the wrong JSON type or is
// out of range (sizes and lengths must be integers >= 1, alpha in
// [1, kCaptureMaxAlpha], scale > 0, texts one string per sequence,
// provenance an object), a [layers][heads] array has the wrong size, a file
// name is empty, absolute, or contains ".." or a path separator, a .npy file
// is missing, malformed or truncated (read_npy's checks) or is not float16 or
// float32, a .npy shape is not (layers, heads, sum of lengths, head_dim), or
// the data holds NaN or infinity (naming the array, layer, head and token of
// the first one), or a head's queries and keys could make a score overflow
// (see validate_capture). The result passes validate_capture(); its source
// is dir, so that errors raised while working on one of its heads (gold
// graphs, fitting, prediction, evaluation) read "capture <dir>, layer L,
// head H: ...".
Capture read_capture(const std::string& dir);

// How errors name one head of a capture: "capture caps/x, layer 1, head 0"
// ("layer 1, head 0" for a capture with no source, one built in memory).
std::string head_context(const Capture& capture, std::size_t layer, std::size_t head);

// f(), with an entgraph::Error it throws restated as "<head_context>: <what>" (its code kept),
// unless its message starts with that context already (work on a head nested
// in work on the same head). The library wraps all its work on one head of a
// capture (gold graphs, fitting, prediction, evaluation) this way; so can a
// program, for errors that name the head alike:
//
//   graphs[i] = in_head(capture, layer, head, [&] { return gold_graph(...); });
template <class F>
decltype(auto) in_head(const Capture& capture, std::size_t layer, std::size_t head, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    const Message context(head_context(capture, layer, head) + ": ");
    if (e.message().starts_with(context)) throw;
    throw Error(context + e.message(), e.code());
  }
}

// The gold graph (graph.hpp) of head (layer, head) and sequence s of a
// capture, errors named by the head as in_head does.
Graph gold_graph(const Capture& capture, std::size_t layer, std::size_t head, std::size_t sequence);

}  // namespace entgraph
