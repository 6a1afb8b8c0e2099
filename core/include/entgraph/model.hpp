// entgraph: the teacher model's forward pass.
//
// A teacher is a small byte-level transformer with entmax attention, trained
// by tools/train_teacher.py; data/teacher-causal, data/teacher-masked and
// data/teacher-long ship with entgraph. A teacher folder holds config.json
// (the architecture, see docs/FORMATS.md) and the weights as safetensors
// (float16 or float32).
//
// The architecture (pre-LayerNorm; Linear(x) = x W^T + b as in PyTorch):
//   x_t = tok_emb[byte_t] + pos_emb[t]     (positions "learned")
//   x_t = tok_emb[byte_t]                  (positions "rotary": no pos_emb)
//   per layer: h = ln1(x);  q, k, v = Linear_q/k/v(h), split into heads;
//              rotary: q and k of every head rotated by their position t;
//              per head a = entmax_alpha(scale q k^T [causal mask]) v;
//              x += Linear_o(concat heads a);
//              x += Linear_fc2(relu(Linear_fc1(ln2(x))))
//   logits = Linear_head(ln_f(x))   (one per byte value)
// Rotary positions (RoFormer) use the half-split layout: with dh = head_dim,
// h = dh / 2 and theta_i = rotary_base^(-2i / dh), for i < h
//   q'[i]   = q[i] cos(t theta_i) - q[i+h] sin(t theta_i)
//   q'[i+h] = q[i] sin(t theta_i) + q[i+h] cos(t theta_i)
// (angles in double, cos and sin rounded to float, as PyTorch does), and the
// same for k. The rotated q and k are what TeacherOutput and captures hold:
// the scores are their plain scaled dot products, so everything downstream of
// a capture (gold graphs, predictors, graph attention) needs no position logic.
//
// The forward pass runs in float32 on the library's own kernels (SIMD matmul
// and the entmax transforms of transforms.hpp) and reproduces PyTorch's
// float32 forward of the same weights to about 1e-5 (tests/model). Attention
// runs in blocks of query rows, so memory grows linearly with the length n
// (the outputs take 4 * layers * d_model + outputs floats per token, 9 KiB
// for the shipped sizes) unless attention_probs asks for the n x n weights
// of every head.
//
// Errors (entgraph::Error, naming the file and the field or tensor): a
// missing or malformed config, sizes out of range, an unknown position
// scheme or a bad rotary_base, a weights file missing a tensor (pos_emb.weight
// for learned positions), holding an unexpected one (pos_emb.weight for
// rotary ones), or one of the wrong shape or with NaN/Inf; empty text, or
// text longer than the context.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "entgraph/io/capture.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct SafetensorsFile;

// How a teacher knows where a token is.
enum class PositionScheme {
  learned,  // a [context, d_model] table pos_emb added to the token embeddings
  rotary,   // q and k rotated by the position (see above); no table
};

// "learned" or "rotary", the config.json spelling.
const char* position_scheme_name(PositionScheme scheme);

struct TeacherConfig {
  std::string name;             // e.g. "entgraph-teacher-causal"
  std::string kind;             // "causal" (language model) or "masked" (bidirectional)
  bool causal = true;           // causal attention mask
  std::size_t vocab = 257;      // token embeddings: 256 bytes + [MASK]
  std::size_t outputs = 256;    // logits per token
  std::size_t mask_token = 256; // id of [MASK] (masked models)
  std::size_t context = 256;    // longest sequence (rows of pos_emb for learned positions)
  std::size_t d_model = 128;
  std::size_t layers = 4;
  std::size_t heads = 4;
  std::size_t d_mlp = 512;
  double alpha = 1.5;           // entmax alpha of every head
  double layer_norm_eps = 1e-5;
  PositionScheme positions = PositionScheme::learned;
  double rotary_base = 10000.0;  // rotary positions: theta_i = rotary_base^(-2i/head_dim); finite, > 1
  std::string weights = "model.safetensors";  // relative to the folder

  std::size_t head_dim() const { return d_model / heads; }
};

// Parses and checks a teacher's config.json text; name is used in errors.
TeacherConfig parse_teacher_config(const std::string& json_text, const std::string& name = "<memory>");

// What forward() returns for one sequence of n tokens.
struct TeacherOutput {
  std::size_t layers = 0, heads = 0, tokens = 0, head_dim = 0, outputs = 0;
  // [layers, heads, tokens, head_dim], C order: per head the projections and
  // the attention output a = P v (before the output projection).
  std::vector<float> queries, keys, values, attention;
  // [layers, heads, tokens, tokens]: the entmax attention P; filled only if
  // asked for (ForwardOptions::attention_probs).
  std::vector<float> probs;
  std::vector<float> logits;  // [tokens, outputs]

  MatrixView<const float> queries_of(std::size_t layer, std::size_t head) const;
  MatrixView<const float> keys_of(std::size_t layer, std::size_t head) const;
  MatrixView<const float> values_of(std::size_t layer, std::size_t head) const;
  MatrixView<const float> attention_of(std::size_t layer, std::size_t head) const;
  // tokens x tokens; throws entgraph::Error if probs were not recorded.
  MatrixView<const float> probs_of(std::size_t layer, std::size_t head) const;
  // tokens x outputs; throws entgraph::Error if the logits were not computed.
  MatrixView<const float> logits_view() const;
};

struct ForwardOptions {
  bool attention_probs = false;  // record P of every head ([layers, heads, n, n] floats)
  // false: stop after the last layer's attention, for callers that want the
  // heads only (attention graphs): its output projection and MLP, the final
  // norm and the head are skipped (about a sixth of the work for the shipped
  // teachers) and logits stays empty.
  bool logits = true;
  // 0: every layer. k in [1, layers]: the first k layers only, up to the k-th
  // layer's attention (TeacherOutput::layers = k; no logits unless k is every
  // layer and logits is set). Their heads equal the full forward's, bit for
  // bit: a viewer can show one head of an early layer before the rest is done.
  std::size_t layers = 0;
};

class Teacher {
 public:
  // Loads dir/config.json and the weights it names.
  static Teacher load(const std::string& dir);
  // A config and an already-read weights file (e.g. from memory in the browser).
  static Teacher from_parts(const TeacherConfig& config, const std::string& weights_path);
  // A config and the bytes of its weights file (e.g. fetched by a browser
  // page); name stands for the file in errors.
  static Teacher from_memory(const TeacherConfig& config, const void* weights, std::size_t size,
                             const std::string& name = "<memory>");

  Teacher(Teacher&&) noexcept;
  Teacher& operator=(Teacher&&) noexcept;
  ~Teacher();

  const TeacherConfig& config() const;

  // Runs the model on the bytes of text (1 to context bytes; any bytes, the
  // tokens are the bytes). The token [MASK] is not reachable from text; use
  // forward_tokens for that.
  TeacherOutput forward(std::string_view text, const ForwardOptions& options = {}) const;
  // Runs the model on token ids (each < vocab).
  TeacherOutput forward_tokens(const std::vector<std::size_t>& tokens, const ForwardOptions& options = {}) const;

  // A capture of the model's Q, K and V on each text (one sequence per text,
  // each 1..context bytes) with the model's alpha, causal flag and scale.
  Capture capture(const std::vector<std::string>& texts) const;
  // The same capture written to dir as write_capture(dir, capture(texts),
  // dtype) writes it, byte for byte, but one text at a time (a CaptureWriter):
  // memory is that of one forward pass, whatever the number of texts.
  // progress, if set, is called after each text with (done, total).
  void capture_to(const std::string& dir, const std::vector<std::string>& texts, NpyDtype dtype = NpyDtype::float32,
                  const std::function<void(std::size_t, std::size_t)>& progress = {}) const;
  // The exact bytes capture_to(dir, texts, dtype) writes (capture_file_bytes),
  // with the texts checked as capture_to checks them: to refuse a capture
  // before any forward pass.
  std::uint64_t capture_bytes(const std::vector<std::string>& texts, NpyDtype dtype = NpyDtype::float32) const;

 private:
  struct Weights;
  Teacher(TeacherConfig config, std::unique_ptr<Weights> weights);
  static Teacher from_safetensors(const TeacherConfig& config, const SafetensorsFile& file, const std::string& name);
  TeacherConfig config_;
  std::unique_ptr<Weights> weights_;
};

// Splits text into consecutive pieces of at most max_bytes bytes (the last
// one shorter), for captures of texts longer than a teacher's context.
// Never splits inside a UTF-8 sequence unless one piece would be empty.
std::vector<std::string> split_text(std::string_view text, std::size_t max_bytes);

}  // namespace entgraph
