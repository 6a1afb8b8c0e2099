// entgraph: the teacher's weights and forward pass (see model.hpp).
//
// Linear layers keep their weights transposed ([in, out]) so that every
// product is one row-major GEMM (x W^T = x Wt) on the library's matmul
// kernels; Q, K and V share one [d, 3d] matrix so that a layer's projections
// are a single GEMM. Attention is attention_forward of attention.hpp, per
// head, on strided views into the [n, 3d] projection buffer; rotary models
// rotate q and k in that buffer first, from one cos/sin table per forward.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/safetensors.hpp"
#include "entgraph/model.hpp"
#include "entgraph/runtime.hpp"
#include "io/binary.hpp"
#include "kernels/matmul_kernels.hpp"
#include "runtime/parallel.hpp"

namespace entgraph {

namespace {

struct Linear {
  std::size_t in = 0, out = 0;
  std::vector<float> wt;    // [in, out]
  std::vector<float> bias;  // [out]
};

struct LayerNorm {
  std::vector<float> gain, bias;
};

struct Layer {
  LayerNorm ln1, ln2;
  Linear qkv;  // [d, 3d]: q | k | v
  Linear o, fc1, fc2;
};

}  // namespace

struct Teacher::Weights {
  std::vector<float> tok_emb;  // [vocab, d]
  std::vector<float> pos_emb;  // [context, d]; empty for rotary positions
  std::vector<Layer> layers;
  LayerNorm ln_f;
  Linear head;
};

namespace {

// Takes tensors out of a safetensors file by name, checking shapes, and
// remembers which were used so that leftovers can be reported.
class TensorSource {
 public:
  TensorSource(const SafetensorsFile& file, std::string name) : file_(file), name_(std::move(name)) {}

  std::vector<float> take(const std::string& tensor, std::vector<std::size_t> shape) {
    const SafeTensor* t = file_.find(tensor);
    if (t == nullptr) fail("missing tensor '" + tensor + "'");
    if (t->shape != shape)
      fail("tensor '" + tensor + "' has shape " + shape_string(t->shape) + ", the config implies " +
           shape_string(shape));
    // Weights are real numbers: an integer or boolean tensor is a wrong file,
    // not something to convert silently.
    if (t->dtype != "F32" && t->dtype != "F16" && t->dtype != "BF16" && t->dtype != "F64")
      fail("tensor '" + tensor + "' has dtype " + t->dtype + " (expected a float dtype: F32, F16, BF16 or F64)");
    std::vector<float> values = t->to_float();
    for (float v : values)
      if (!std::isfinite(v)) fail("tensor '" + tensor + "' holds NaN or Inf");
    used_.insert(tensor);
    return values;
  }

  Linear linear(const std::string& prefix, std::size_t in, std::size_t out) {
    Linear l;
    l.in = in;
    l.out = out;
    const std::vector<float> w = take(prefix + ".weight", {out, in});  // PyTorch layout [out, in]
    l.wt.resize(in * out);
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < in; ++i) l.wt[i * out + o] = w[o * in + i];
    l.bias = take(prefix + ".bias", {out});
    return l;
  }

  LayerNorm layer_norm(const std::string& prefix, std::size_t d) {
    return {take(prefix + ".weight", {d}), take(prefix + ".bias", {d})};
  }

  void check_all_used() const {
    for (const SafeTensor& t : file_.tensors)
      if (used_.count(t.name) == 0) fail("unexpected tensor '" + t.name + "' (does the config match the weights?)");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error("teacher weights: " + name_ + ": " + what); }
  static std::string shape_string(const std::vector<std::size_t>& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }

  const SafetensorsFile& file_;
  std::string name_;
  std::set<std::string> used_;
};

// Q, K, V of one layer fused into one [d, 3d] Linear.
Linear fuse_qkv(const Linear& q, const Linear& k, const Linear& v) {
  Linear f;
  f.in = q.in;
  f.out = 3 * q.out;
  f.wt.resize(f.in * f.out);
  for (std::size_t i = 0; i < f.in; ++i) {
    std::copy_n(q.wt.begin() + i * q.out, q.out, f.wt.begin() + i * f.out);
    std::copy_n(k.wt.begin() + i * q.out, q.out, f.wt.begin() + i * f.out + q.out);
    std::copy_n(v.wt.begin() + i * q.out, q.out, f.wt.begin() + i * f.out + 2 * q.out);
  }
  f.bias = q.bias;
  f.bias.insert(f.bias.end(), k.bias.begin(), k.bias.end());
  f.bias.insert(f.bias.end(), v.bias.begin(), v.bias.end());
  return f;
}

// y[n, out] = x[n, in] Wt + b, or y += that with accumulate.
// Blocks of rows on the library's threads: every row is computed by the same
// kernel in the same order whichever block it is in, so the result does not
// depend on the thread count.
void apply(const Linear& l, const float* x, std::size_t n, float* y, bool accumulate = false) {
  const auto& mm = detail::matmul_kernels(cpu_isa());
  constexpr std::size_t kRowsPerTask = 32;
  detail::parallel_for(n, kRowsPerTask, [&](std::size_t r0, std::size_t r1) {
    float* yr = y + r0 * l.out;
    if (!accumulate)
      for (std::size_t r = r0; r < r1; ++r) std::copy(l.bias.begin(), l.bias.end(), y + r * l.out);
    else
      for (std::size_t r = r0; r < r1; ++r)
        for (std::size_t c = 0; c < l.out; ++c) y[r * l.out + c] += l.bias[c];
    mm.gemm_nn(r1 - r0, l.out, l.in, 1.0f, x + r0 * l.in, l.in, l.wt.data(), l.out, yr, l.out, true, false);
  });
}

// y = LayerNorm(x) row by row (biased variance, as PyTorch), in double sums.
void layer_norm(const LayerNorm& ln, const float* x, std::size_t n, std::size_t d, double eps, float* y) {
  for (std::size_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    double mean = 0;
    for (std::size_t c = 0; c < d; ++c) mean += xr[c];
    mean /= static_cast<double>(d);
    double var = 0;
    for (std::size_t c = 0; c < d; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
    for (std::size_t c = 0; c < d; ++c)
      y[r * d + c] = static_cast<float>((xr[c] - mean) * inv) * ln.gain[c] + ln.bias[c];
  }
}

// cos(t theta_i) and sin(t theta_i) for positions t < n and i < head_dim / 2,
// theta_i = base^(-2i / head_dim): the angles in double, then rounded to
// float, as tools/train_teacher.py computes them in PyTorch.
class RotaryTable {
 public:
  RotaryTable() = default;
  RotaryTable(std::size_t n, std::size_t head_dim, double base) : half_(head_dim / 2), cos_(n * half_), sin_(n * half_) {
    for (std::size_t i = 0; i < half_; ++i) {
      const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      for (std::size_t t = 0; t < n; ++t) {
        const double angle = static_cast<double>(t) * theta;
        cos_[t * half_ + i] = static_cast<float>(std::cos(angle));
        sin_[t * half_ + i] = static_cast<float>(std::sin(angle));
      }
    }
  }

  // Rotates the first width columns of n rows (row stride ld), taken as
  // consecutive heads of 2 * half_ columns each, by the row's position.
  void rotate(float* x, std::size_t n, std::size_t width, std::size_t ld) const {
    const std::size_t h = half_;
    for (std::size_t t = 0; t < n; ++t) {
      const float* c = cos_.data() + t * h;
      const float* s = sin_.data() + t * h;
      for (std::size_t head = 0; head < width; head += 2 * h) {
        float* a = x + t * ld + head;
        float* b = a + h;
        for (std::size_t i = 0; i < h; ++i) {
          const float ai = a[i], bi = b[i];
          a[i] = ai * c[i] - bi * s[i];
          b[i] = ai * s[i] + bi * c[i];
        }
      }
    }
  }

 private:
  std::size_t half_ = 0;
  std::vector<float> cos_, sin_;  // [n, half]
};

}  // namespace

Teacher::Teacher(TeacherConfig config, std::unique_ptr<Weights> weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}
Teacher::Teacher(Teacher&&) noexcept = default;
Teacher& Teacher::operator=(Teacher&&) noexcept = default;
Teacher::~Teacher() = default;

const TeacherConfig& Teacher::config() const { return config_; }

Teacher Teacher::load(const std::string& dir) {
  // What it finds wrong is the folder's fault: ErrorCode::bad_file.
  return reading_file([&] {
    const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
    const std::vector<unsigned char> text = detail::read_file_bytes("teacher config", config_path, 1u << 20);
    const TeacherConfig config = parse_teacher_config(std::string(text.begin(), text.end()), config_path);
    return from_parts(config, (std::filesystem::path(dir) / config.weights).string());
  });
}

Teacher Teacher::from_parts(const TeacherConfig& c, const std::string& weights_path) {
  return from_safetensors(c, read_safetensors(weights_path), weights_path);
}

Teacher Teacher::from_memory(const TeacherConfig& c, const void* weights, std::size_t size, const std::string& name) {
  return from_safetensors(c, read_safetensors_bytes(weights, size, name), name);
}

Teacher Teacher::from_safetensors(const TeacherConfig& c, const SafetensorsFile& file, const std::string& name) {
  // parse_teacher_config checks these; a config built in code may not have been.
  if (c.positions == PositionScheme::rotary &&
      (c.heads == 0 || c.head_dim() % 2 != 0 || !(std::isfinite(c.rotary_base) && c.rotary_base > 1.0)))
    throw Error("teacher config: " + name + ": rotary positions need an even head dimension and a finite rotary_base > 1");
  TensorSource src(file, name);
  auto w = std::make_unique<Weights>();
  const std::size_t d = c.d_model;
  w->tok_emb = src.take("tok_emb.weight", {c.vocab, d});
  // A rotary model has no position table; one in its weights would mean the
  // config and the weights disagree (check_all_used reports it).
  if (c.positions == PositionScheme::learned) w->pos_emb = src.take("pos_emb.weight", {c.context, d});
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer layer;
    layer.ln1 = src.layer_norm(p + "ln1", d);
    layer.qkv = fuse_qkv(src.linear(p + "q", d, d), src.linear(p + "k", d, d), src.linear(p + "v", d, d));
    layer.o = src.linear(p + "o", d, d);
    layer.ln2 = src.layer_norm(p + "ln2", d);
    layer.fc1 = src.linear(p + "fc1", d, c.d_mlp);
    layer.fc2 = src.linear(p + "fc2", c.d_mlp, d);
    w->layers.push_back(std::move(layer));
  }
  w->ln_f = src.layer_norm("ln_f", d);
  w->head = src.linear("head", d, c.outputs);
  src.check_all_used();
  return Teacher(c, std::move(w));
}

TeacherOutput Teacher::forward(std::string_view text, const ForwardOptions& options) const {
  std::vector<std::size_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  if (config_.vocab < 256) throw Error(at_op("Teacher::forward") + "the model's vocab (" + std::to_string(config_.vocab) +
                                      ") does not cover bytes; use forward_tokens");
  return forward_tokens(tokens, options);
}

TeacherOutput Teacher::forward_tokens(const std::vector<std::size_t>& tokens, const ForwardOptions& options) const {
  const TeacherConfig& c = config_;
  const std::size_t n = tokens.size();
  if (n == 0) throw Error(at_op("Teacher::forward") + "text is empty");
  if (n > c.context)
    throw Error(at_op("Teacher::forward") + "text has " + std::to_string(n) + " tokens, more than the model's context of " +
                    std::to_string(c.context) + " (split it with " + cpp_name("split_text") + ")",
                ErrorCode::limit);
  for (std::size_t t : tokens)
    if (t >= c.vocab)
      throw Error(at_op("Teacher::forward") + "token " + std::to_string(t) + " is outside the vocab of " + std::to_string(c.vocab));

  if (options.layers > c.layers)
    throw Error(at_op("Teacher::forward") + cpp_name("ForwardOptions::layers") + " is " + std::to_string(options.layers) + ", the model has " +
                std::to_string(c.layers));
  const std::size_t layers = options.layers == 0 ? c.layers : options.layers;
  const bool logits = options.logits && layers == c.layers;

  const std::size_t d = c.d_model, hd = c.head_dim(), heads = c.heads;
  const bool rotary = c.positions == PositionScheme::rotary;
  TeacherOutput out;
  out.layers = layers;
  out.heads = heads;
  out.tokens = n;
  out.head_dim = hd;
  out.outputs = c.outputs;
  const std::size_t per_layer = heads * n * hd;
  out.queries.resize(layers * per_layer);
  out.keys.resize(layers * per_layer);
  out.values.resize(layers * per_layer);
  out.attention.resize(layers * per_layer);
  if (options.attention_probs) out.probs.resize(layers * heads * n * n);

  std::vector<float> x(n * d), h(n * d), qkv(n * 3 * d), a(n * d), mlp(n * c.d_mlp);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < d; ++j)
      x[t * d + j] = weights_->tok_emb[tokens[t] * d + j] + (rotary ? 0.0f : weights_->pos_emb[t * d + j]);
  const RotaryTable table = rotary ? RotaryTable(n, hd, c.rotary_base) : RotaryTable();

  AttentionOptions<float> attention;
  attention.transform = Transform::for_alpha(c.alpha);
  attention.scale = 1.0 / std::sqrt(static_cast<double>(hd));
  attention.causal = c.causal;

  for (std::size_t l = 0; l < layers; ++l) {
    const Layer& layer = weights_->layers[l];
    layer_norm(layer.ln1, x.data(), n, d, c.layer_norm_eps, h.data());
    apply(layer.qkv, h.data(), n, qkv.data());
    if (rotary) table.rotate(qkv.data(), n, 2 * d, 3 * d);  // q | k, every head, in place
    for (std::size_t hh = 0; hh < heads; ++hh) {
      const MatrixView<const float> q(qkv.data() + hh * hd, n, hd, 3 * d);
      const MatrixView<const float> k(qkv.data() + d + hh * hd, n, hd, 3 * d);
      const MatrixView<const float> v(qkv.data() + 2 * d + hh * hd, n, hd, 3 * d);
      const MatrixView<float> ah(a.data() + hh * hd, n, hd, d);
      MatrixView<float> probs;
      if (options.attention_probs) probs = {out.probs.data() + (l * heads + hh) * n * n, n, n};
      attention_forward<float>(q, k, v, ah, attention, probs);
      const std::size_t base = l * per_layer + hh * n * hd;
      for (std::size_t t = 0; t < n; ++t) {
        std::copy_n(q.row(t), hd, out.queries.begin() + base + t * hd);
        std::copy_n(k.row(t), hd, out.keys.begin() + base + t * hd);
        std::copy_n(v.row(t), hd, out.values.begin() + base + t * hd);
        std::copy_n(ah.row(t), hd, out.attention.begin() + base + t * hd);
      }
    }
    if (l + 1 == layers && !logits) return out;  // the heads asked for are all there
    apply(layer.o, a.data(), n, x.data(), /*accumulate=*/true);
    layer_norm(layer.ln2, x.data(), n, d, c.layer_norm_eps, h.data());
    apply(layer.fc1, h.data(), n, mlp.data());
    for (float& m : mlp) m = m > 0.0f ? m : 0.0f;
    apply(layer.fc2, mlp.data(), n, x.data(), /*accumulate=*/true);
  }
  layer_norm(weights_->ln_f, x.data(), n, d, c.layer_norm_eps, h.data());
  out.logits.resize(n * c.outputs);
  apply(weights_->head, h.data(), n, out.logits.data());
  return out;
}

namespace {
// What capture and capture_to share: the lengths of the texts, checked (op
// names the caller in errors), every head's settings, and the provenance.
std::vector<std::size_t> capture_lengths(const TeacherConfig& c, const std::vector<std::string>& texts, const char* op) {
  if (texts.empty()) throw Error(at_op(op) + "texts is empty");
  std::vector<std::size_t> lengths;
  for (std::size_t s = 0; s < texts.size(); ++s) {
    if (texts[s].empty() || texts[s].size() > c.context)
      throw Error(at_op(op) + "texts[" + std::to_string(s) + "] has " + std::to_string(texts[s].size()) +
                  " bytes; each text must have 1 to " + std::to_string(c.context) + " (the model's context)");
    lengths.push_back(texts[s].size());
  }
  return lengths;
}

HeadSettings capture_settings(const TeacherConfig& c) {
  HeadSettings hs;
  hs.alpha = c.alpha;
  hs.causal = c.causal;
  hs.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
  return hs;
}

std::string capture_provenance(const TeacherConfig& c) {
  return nlohmann::json{{"model", c.name}, {"made_by", "entgraph Teacher::capture"}}.dump();
}
}  // namespace

Capture Teacher::capture(const std::vector<std::string>& texts) const {
  const TeacherConfig& c = config_;
  Capture cap = Capture::make(c.layers, c.heads, c.head_dim(), capture_lengths(c, texts, "Teacher::capture"),
                              /*with_values=*/true);
  for (HeadSettings& hs : cap.settings) hs = capture_settings(c);
  for (std::size_t s = 0; s < texts.size(); ++s) {
    const TeacherOutput o = forward(texts[s]);
    for (std::size_t l = 0; l < c.layers; ++l)
      for (std::size_t h = 0; h < c.heads; ++h) {
        const MatrixView<float> dq = cap.queries_of(l, h, s), dk = cap.keys_of(l, h, s), dv = cap.values_of(l, h, s);
        const MatrixView<const float> sq = o.queries_of(l, h), sk = o.keys_of(l, h), sv = o.values_of(l, h);
        for (std::size_t t = 0; t < o.tokens; ++t) {
          std::copy_n(sq.row(t), o.head_dim, dq.row(t));
          std::copy_n(sk.row(t), o.head_dim, dk.row(t));
          std::copy_n(sv.row(t), o.head_dim, dv.row(t));
        }
      }
  }
  cap.texts = texts;
  cap.provenance = capture_provenance(c);
  return cap;
}

std::uint64_t Teacher::capture_bytes(const std::vector<std::string>& texts, NpyDtype dtype) const {
  const TeacherConfig& c = config_;
  return capture_file_bytes(c.layers, c.heads, c.head_dim(), capture_lengths(c, texts, "Teacher::capture_bytes"),
                            /*with_values=*/true, std::vector<HeadSettings>(c.layers * c.heads, capture_settings(c)),
                            texts, capture_provenance(c), dtype);
}

void Teacher::capture_to(const std::string& dir, const std::vector<std::string>& texts, NpyDtype dtype,
                         const std::function<void(std::size_t, std::size_t)>& progress) const {
  const TeacherConfig& c = config_;
  CaptureWriter writer(dir, c.layers, c.heads, c.head_dim(), capture_lengths(c, texts, "Teacher::capture_to"),
                       /*with_values=*/true, std::vector<HeadSettings>(c.layers * c.heads, capture_settings(c)), texts,
                       capture_provenance(c), dtype);
  for (std::size_t s = 0; s < texts.size(); ++s) {
    const TeacherOutput o = forward(texts[s]);  // [layers, heads, tokens, head_dim]: the writer's layout
    writer.write_sequence(s, o.queries, o.keys, o.values);
    if (progress) progress(s + 1, texts.size());
  }
  writer.finish();
}

namespace {
MatrixView<const float> head_view(const std::vector<float>& data, std::size_t layer, std::size_t head,
                                  const TeacherOutput& o, std::size_t cols, const char* what) {
  if (layer >= o.layers || head >= o.heads)
    throw Error(at_op(std::string("TeacherOutput::") + what) + "layer " + std::to_string(layer) + ", head " +
                std::to_string(head) + " out of range (" + std::to_string(o.layers) + " layers, " +
                std::to_string(o.heads) + " heads)");
  if (data.empty()) throw Error(at_op(std::string("TeacherOutput::") + what) + "not recorded (" + cpp_name("ForwardOptions::attention_probs") + ")");
  return {data.data() + (layer * o.heads + head) * o.tokens * cols, o.tokens, cols};
}
}  // namespace

MatrixView<const float> TeacherOutput::queries_of(std::size_t l, std::size_t h) const {
  return head_view(queries, l, h, *this, head_dim, "queries_of");
}
MatrixView<const float> TeacherOutput::keys_of(std::size_t l, std::size_t h) const {
  return head_view(keys, l, h, *this, head_dim, "keys_of");
}
MatrixView<const float> TeacherOutput::values_of(std::size_t l, std::size_t h) const {
  return head_view(values, l, h, *this, head_dim, "values_of");
}
MatrixView<const float> TeacherOutput::attention_of(std::size_t l, std::size_t h) const {
  return head_view(attention, l, h, *this, head_dim, "attention_of");
}
MatrixView<const float> TeacherOutput::probs_of(std::size_t l, std::size_t h) const {
  return head_view(probs, l, h, *this, tokens, "probs_of");
}
MatrixView<const float> TeacherOutput::logits_view() const {
  if (logits.size() != tokens * outputs)
    throw Error(at_op("TeacherOutput::logits_view") + "not computed (" + cpp_name("ForwardOptions::logits was false") + ")");
  return {logits.data(), tokens, outputs};
}

std::vector<std::string> split_text(std::string_view text, std::size_t max_bytes) {
  if (max_bytes == 0) throw Error(at_op("split_text") + cpp_name("max_bytes") + " must be >= 1");
  std::vector<std::string> pieces;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = std::min(text.size(), start + max_bytes);
    // Back up over UTF-8 continuation bytes (10xxxxxx) so a character is not cut.
    std::size_t cut = end;
    if (end < text.size())
      while (cut > start && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
    if (cut == start) cut = end;
    pieces.emplace_back(text.substr(start, cut - start));
    start = cut;
  }
  return pieces;
}

}  // namespace entgraph
