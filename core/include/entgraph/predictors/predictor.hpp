// entgraph: predictors of attention graphs — they guess, from Q and K, which
// (query, key) pairs of a head get non-zero entmax weight, without computing
// all of Q K^T.
//
// One interface for every method (see docs/PREDICTORS.md for the list and
// their settings): fixed patterns (window, global, longformer, bigbird),
// hashing and clustering (reformer, routing) and Sparsefinder's learned
// projections (sparsefinder-distance, -quantization, -kmeans).
//
//   auto p = make_predictor("sparsefinder-kmeans", {{"r", "4"}, {"clusters", "8"}});
//   p->fit(train_capture, {});                 // no-op for fixed patterns
//   Graph g = p->predict(q, k, layer, head, causal);
//   std::string json = p->to_json();           // parameters + settings, versioned
//   auto same = load_predictor(json);
//
// Settings are strings (as typed on the command line, --set key=value) that
// each method parses; unknown keys and bad values throw entgraph::Error naming
// the key. Every method also accepts the union settings
//   extra_window = w   (keys i-w..i+w, only the past under a causal mask; -1 = none)
//   extra_global = g   (the first g tokens attend to and are attended by all)
// whose edges are added to the prediction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "entgraph/device.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

using PredictorSettings = std::map<std::string, std::string>;
struct SparsefinderHead;      // entgraph/backend.hpp
struct LowRankThresholdHead;  // entgraph/backend.hpp

// The limits of Predictor::fit: 2^24 learned values (64 MiB as float32, a
// parameter file of at most about 300 MB) and 1e11 multiply-adds, under a
// minute on one core: each method's estimate (fit_size) counts the work its
// fit really does, so every setting in range either fits in about a minute or
// is refused before any work (docs/PREDICTORS.md, "Fit-size limits").
// A larger capture may take proportionally more: the limit on a capture is
// the larger of kMaxFitOperations and kFitOperationsPerAttention times its
// attention's cost (fit_operations_limit), as computing its gold graphs is
// work its user has already accepted.
inline constexpr std::uint64_t kMaxFitParameters = std::uint64_t{1} << 24;
inline constexpr double kMaxFitOperations = 1e11;
inline constexpr double kFitOperationsPerAttention = 256;
// The capture's attention cost, layers x heads x sum over sequences of
// (allowed query-key pairs, all n^2 of a sequence of n) x head_dim
// multiply-adds, and the fit limit it gives.
double attention_operations(const Capture& capture);
double fit_operations_limit(const Capture& capture);

struct FitOptions {
  std::uint64_t seed = 0;  // overrides nothing: methods also read "seed" from their settings
  bool quiet = true;       // false: progress bars on stderr for long fits
};

class Predictor {
 public:
  virtual ~Predictor() = default;

  // The method's name, e.g. "window".
  virtual std::string method() const = 0;
  // Whether fit() learns anything (false for fixed patterns).
  virtual bool learned() const { return false; }
  // Learns parameters for every layer and head of the capture. Settings whose
  // fit on this capture would build more than kMaxFitParameters learned
  // values or take more than kMaxFitOperations are refused (entgraph::Error
  // naming the method, the size and the settings that drive it) before any
  // work: in-range settings can still be absurd for a capture's size.
  void fit(const Capture& capture, const FitOptions& options);
  // What a fit on `capture` would build, from the settings and the capture's
  // sizes alone: learned values (floats in the parameter file) and, roughly,
  // multiply-adds. Zero for fixed patterns.
  struct FitSize {
    std::uint64_t parameters = 0;
    double operations = 0.0;
  };
  virtual FitSize fit_size(const Capture& capture) const;
  // Throws entgraph::Error if a setting does not fit the capture (e.g. more
  // clusters than points) or fit_size(capture) is beyond the limits (what
  // fit() checks first; sweeps check every grid value before fitting any).
  void check_fit_size(const Capture& capture) const;
  // The predicted graph of one head for one sequence: q is n x d, k is m x d
  // (n = m for self-attention). Includes the extra_window / extra_global edges.
  Graph predict(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                bool causal) const;
  // The same on `device` (entgraph/device.hpp): the same graph, computed
  // there from this predictor's parameters in memory (the extra_window /
  // extra_global edges are added on the host). Methods the device has no
  // kernel for throw entgraph::Error naming the method and the device; on
  // cuda the Sparsefinder methods and lowrank-threshold (bits >= 2) run.
  Graph predict(Device device, MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                std::size_t head, bool causal) const;
  // The same with q and k in `memory` (entgraph/device.hpp). Memory::device:
  // q and k lie in the device's memory and are not copied (the parameters
  // and the graph are host memory). Device::cpu takes host memory either way.
  Graph predict(Device device, Memory memory, MatrixView<const float> q, MatrixView<const float> k,
                std::size_t layer, std::size_t head, bool causal) const;
  // The parameter file: {"format": "entgraph-predictor", "version": 1,
  // "method": ..., "settings": {...}, "parameters": {...}}.
  std::string to_json() const;
  const PredictorSettings& settings() const { return settings_; }
  // Changes the union patterns without refitting (sweeps vary the window).
  void set_union_patterns(long extra_window, std::size_t extra_global);
  // A copy of this (fitted) predictor with some settings changed, without
  // refitting. Only the method's predict-time settings
  // (predict_time_settings()) and the union settings may change; any other
  // key throws entgraph::Error naming it, as does a bad value.
  std::unique_ptr<Predictor> with_settings(const PredictorSettings& changes) const;
  // This method fitted on `capture` with some settings changed, reusing what
  // of this predictor's fit the change leaves valid: nothing to fit for
  // predict-time settings (with_settings), Sparsefinder's projections when
  // only its bucket settings change, otherwise a full fit. `capture` must be
  // the one this predictor was fitted on. Sweeps call it for each grid value.
  std::unique_ptr<Predictor> refit(const Capture& capture, const PredictorSettings& changes,
                                   const FitOptions& options) const;

 protected:
  explicit Predictor(PredictorSettings settings);
  // The method's own prediction, before the union with window / global edges.
  virtual Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                                std::size_t head, bool causal) const = 0;
  // refit() for changes that include a fit-time setting: a full fit of the
  // changed settings unless the method can reuse part of its own fit.
  virtual std::unique_ptr<Predictor> refit_changed(const Capture& capture, const PredictorSettings& changes,
                                                   const FitOptions& options) const;
  // One head of a Sparsefinder method, for a device's kernel (its views point
  // into this predictor): false for other methods. Throws what predict()
  // throws for an unfitted predictor, a head out of range or the wrong head_dim.
  virtual bool sparsefinder_head(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                                 std::size_t head, SparsefinderHead& out) const;
  // The same for lowrank-threshold (false for other methods and for its
  // float32 estimate, bits = 0, which no device runs).
  virtual bool lowrank_threshold_head(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                                      std::size_t head, LowRankThresholdHead& out) const;
  // The "parameters" object as JSON text ("{}" for fixed patterns).
  virtual std::string parameters_json() const { return "{}"; }

  // Throws entgraph::Error naming the setting if one cannot apply to the
  // capture whatever its cost (check_fit_size calls it first).
  virtual void check_fit_settings(const Capture&) const {}
  // fit() after check_fit_size(): the method's learning (nothing for fixed patterns).
  virtual void fit_parameters(const Capture& capture, const FitOptions& options);

  PredictorSettings settings_;
  long extra_window_ = -1;
  std::size_t extra_global_ = 0;
};

// Every method's name, in a fixed order.
std::vector<std::string> predictor_methods();
// The settings of a method that only prediction reads (e.g. the distance
// threshold t of sparsefinder-distance): a fitted predictor can take new
// values of them through with_settings(). Throws for an unknown method.
std::vector<std::string> predict_time_settings(const std::string& method);
// Whether the method reads a setting of that name (the union settings
// extra_window and extra_global included). Throws for an unknown method.
bool predictor_has_setting(const std::string& method, const std::string& key);
// A predictor of the named method with the given settings (missing settings
// take the method's defaults). Throws entgraph::Error for an unknown method,
// an unknown setting or a bad value.
std::unique_ptr<Predictor> make_predictor(const std::string& method, const PredictorSettings& settings = {});
// Reads a parameter file written by to_json(); name is used in errors
// ("load_predictor: <name>: ..."). Throws entgraph::Error for invalid JSON, a
// key repeated in any object, more than 64 levels of nesting, a wrong format
// or version, or parameters the method rejects (every number must be finite
// as the float32 it is stored in).
std::unique_ptr<Predictor> load_predictor(const std::string& json_text, const std::string& name = "<memory>");
// Largest parameter file read_predictor accepts: 512 MiB, above what a fit
// within kMaxFitParameters writes.
inline constexpr std::size_t kMaxParameterFileBytes = std::size_t{1} << 29;
// load_predictor of the file at path, refused before reading if larger than
// kMaxParameterFileBytes. op names the caller in errors ("<op>: <path>: ...").
std::unique_ptr<Predictor> read_predictor(const std::string& path, const char* op = "read_predictor");

}  // namespace entgraph
