// entgraph: evaluating predictors on a capture, sweeping their
// hyperparameters, and the sparsity–recall Pareto frontier.
//
// evaluate() compares a predictor's graphs with the gold graphs of every
// layer, head and sequence of a (held-out) capture. Per head, the counts are
// summed over sequences; the capture's sparsity and recall are the means over
// heads (each head weighs the same, as in the Sparsefinder paper's plots).
//
// A sweep follows the paper's protocol: for each value of the method's own
// hyperparameter (the paper's grid by default) the predictor is fitted on the
// training capture, then evaluated on the test capture with each window size
// of the union pattern (extra_window in {0, 1, 3, ..., 27}, or none). The
// first value of a grid is fitted; the others refit from it
// (Predictor::refit), so a grid over a predict-time setting (the distance
// threshold t, k-means' top, lowrank-threshold's margin) is fitted once, and
// Sparsefinder's bucket and cluster grids train their projections once. Evaluation runs on all threads
// (runtime.hpp); the results do not depend on the thread count. The frontier
// keeps the points no other point beats in both sparsity and recall.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph {

struct EvalReport {
  std::size_t layers = 0, heads = 0;
  std::vector<GraphMetrics> per_head;  // layer * heads + head, summed over sequences
  double sparsity = 0.0;               // mean over heads of the prediction's sparsity
  double recall = 0.0;                 // mean over heads of the recall
  double gold_sparsity = 0.0;          // mean over heads of the gold graph's sparsity
  double predict_seconds = 0.0;        // wall time of all predict() calls
};

EvalReport evaluate(const Predictor& predictor, const Capture& capture);
// Several predictors on one capture, each also united with each window of
// `windows` (w >= 0: keys i-w..i+w, only the past under a causal mask; -1:
// the prediction alone; the predictor's own extra_window / extra_global
// edges are always included, as in predict()). The gold graphs are computed
// once and every (predictor, layer, head, sequence) runs through the thread
// pool. One report per (predictor, window), predictor-major: report
// p * windows.size() + w. A predictor with window -1 gives exactly
// evaluate()'s numbers. Throws entgraph::Error for an empty or null
// predictor, no windows, or a window < -1.
std::vector<EvalReport> evaluate_many(const std::vector<const Predictor*>& predictors, const Capture& capture,
                                      const std::vector<long>& windows);
// The report as JSON text: the means and one entry per head.
std::string eval_report_json(const EvalReport& report, const Predictor& predictor);

// The grid of one method: the setting varied and its values.
struct SweepGrid {
  std::string method;
  std::string parameter;  // empty: the method has no own parameter (window, where the window is the union)
  std::vector<std::string> values;
  PredictorSettings settings;  // shared by every point of this grid (e.g. r, seed)
};
// The paper's grid for a method (docs/PREDICTORS.md lists them).
SweepGrid default_grid(const std::string& method);
// The paper's window sizes for the union pattern: {0, 1, 3, 5, ..., 27}.
std::vector<long> default_windows();

struct SweepPoint {
  std::string method;
  std::string parameter, value;  // the method's own setting at this point ("" if none)
  long window = -1;              // extra_window of the union (-1: none)
  double sparsity = 0.0, recall = 0.0;
  double fit_seconds = 0.0;      // spent fitting this grid value (less where it reuses the first fit)
  double predict_seconds = 0.0;  // wall time of predicting and scoring the test capture; the
                                 // method's own prediction is shared by a value's windows (split evenly)
  bool pareto = false;           // on its method's frontier
};

struct SweepOptions {
  std::vector<long> windows = default_windows();  // may be {-1}: no union window
  std::size_t global = 0;              // extra_global of every point
  FitOptions fit;
  // Called once per grid value with the predictor just fitted (before any
  // union pattern is set), e.g. to save its parameter file.
  std::function<void(const SweepGrid& grid, const std::string& value, const Predictor& predictor)> on_fitted;
};

struct SweepResult {
  std::vector<SweepPoint> points;  // grid after grid
  double gold_sparsity = 0.0;      // mean over the test capture's heads
};

// Runs the grids; the test capture's gold graphs are computed once for all.
// Marks each point's pareto flag within its method. With options.fit.quiet
// false, prints one line per grid value on stderr: the fit time, the
// evaluation time, the time elapsed and an estimate of the time left.
SweepResult run_sweep(const std::vector<SweepGrid>& grids, const Capture& train, const Capture& test,
                      const SweepOptions& options);

// Indices of the points not dominated in (sparsity, recall): no other point
// has both >= and one >. Sorted by sparsity.
std::vector<std::size_t> pareto_front(const std::vector<SweepPoint>& points);
// Recall of the frontier at a given sparsity (linear interpolation between
// frontier points; the best recall at any sparsity >= target if outside).
// Returns -1 if no point reaches that sparsity.
double recall_at_sparsity(const std::vector<SweepPoint>& points, double sparsity);

std::string sweep_csv(const std::vector<SweepPoint>& points);
// The points, and per method its frontier's recall at the gold sparsity and
// at each of at_sparsity ("recall_at": {method: {"gold": r, "0.9": r, ...}},
// null where the frontier does not reach that sparsity).
std::string sweep_json(const std::vector<SweepPoint>& points, double gold_sparsity,
                       const std::vector<double>& at_sparsity = {});
// An SVG plot: recall (y) vs sparsity (x), one colour per method, each
// method's frontier as a line over its points, the gold sparsity as a dashed
// vertical line.
std::string pareto_svg(const std::vector<SweepPoint>& points, double gold_sparsity, const std::string& title);

}  // namespace entgraph
