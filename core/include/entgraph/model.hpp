// entgraph: the teacher model's forward pass.
//
// A teacher is a small byte-level transformer with entmax attention, trained
// by tools/train_teacher.py; data/teacher-causal and data/teacher-masked ship
// with entgraph. A teacher folder holds config.json (the architecture, see
// docs/FORMATS.md) and the weights as safetensors (float16 or float32).
//
// The architecture (pre-LayerNorm; Linear(x) = x W^T + b as in PyTorch):
//   x_t = tok_emb[byte_t] + pos_emb[t]
//   per layer: h = ln1(x);  q, k, v = Linear_q/k/v(h), split into heads;
//              per head a = entmax_alpha(scale q k^T [causal mask]) v;
//              x += Linear_o(concat heads a);
//              x += Linear_fc2(relu(Linear_fc1(ln2(x))))
//   logits = Linear_head(ln_f(x))   (one per byte value)
//
// The forward pass runs in float32 on the library's own kernels (SIMD matmul
// and the entmax transforms of transforms.hpp) and reproduces PyTorch's
// float32 forward of the same weights to about 1e-5 (tests/model).
//
// Errors (entgraph::Error, naming the file and the field or tensor): a
// missing or malformed config, sizes out of range, a weights file missing a
// tensor, holding an unexpected one, or one of the wrong shape or with
// NaN/Inf; empty text, or text longer than the context.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "entgraph/io/capture.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct SafetensorsFile;

struct TeacherConfig {
  std::string name;             // e.g. "entgraph-teacher-causal"
  std::string kind;             // "causal" (language model) or "masked" (bidirectional)
  bool causal = true;           // causal attention mask
  std::size_t vocab = 257;      // token embeddings: 256 bytes + [MASK]
  std::size_t outputs = 256;    // logits per token
  std::size_t mask_token = 256; // id of [MASK] (masked models)
  std::size_t context = 256;    // longest sequence (position embeddings)
  std::size_t d_model = 128;
  std::size_t layers = 4;
  std::size_t heads = 4;
  std::size_t d_mlp = 512;
  double alpha = 1.5;           // entmax alpha of every head
  double layer_norm_eps = 1e-5;
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
  MatrixView<const float> logits_view() const { return {logits.data(), tokens, outputs}; }
};

struct ForwardOptions {
  bool attention_probs = false;  // record P of every head ([layers, heads, n, n] floats)
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
