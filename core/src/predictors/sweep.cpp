// entgraph: evaluation, sweeps, Pareto frontiers and their plot (see
// predictors/sweep.hpp).
#include "entgraph/predictors/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "entgraph/error.hpp"
#include "io/capture_context.hpp"
#include "runtime/parallel.hpp"

namespace entgraph {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Gold graphs of every (layer, head, sequence), computed once per capture
// (in parallel: each graph is independent).
struct GoldGraphs {
  std::vector<Graph> graphs;  // (layer * heads + head) * sequences + sequence
  explicit GoldGraphs(const Capture& c) : graphs(c.layers * c.heads * c.sequences()) {
    const std::size_t per_layer = c.heads * c.sequences();
    detail::parallel_for(graphs.size(), 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i)
        graphs[i] = gold_graph(c, i / per_layer, i % per_layer / c.sequences(), i % c.sequences());
    });
  }
};

// Predicts every (predictor, layer, head, sequence) once, all of them through
// one parallel_for, and scores that graph united with each window of
// `windows` (-1: none) and the first `global` tokens: one report per
// (predictor, window), predictor-major. Items run head-major (every
// predictor of one head sequence next to each other) so that each chunk of
// the parallel_for mixes cheap and costly methods. Per-head counts are summed
// in sequence order afterwards, so the reports do not depend on the thread
// count. Each report's predict_seconds is an equal share of the wall time.
std::vector<EvalReport> evaluate_windows(const std::vector<const Predictor*>& predictors, const Capture& c,
                                         const GoldGraphs& gold, const std::vector<long>& windows,
                                         std::size_t global) {
  const std::size_t sequences = c.sequences(), count = windows.size(), models = predictors.size();
  const std::size_t graphs = gold.graphs.size();
  // each[(p * graphs + g) * count + w]
  std::vector<GraphMetrics> each(models * graphs * count);
  const auto t0 = std::chrono::steady_clock::now();
  detail::parallel_for(graphs * models, 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t item = begin; item < end; ++item) {
      const std::size_t i = item / models, p = item % models;
      const std::size_t l = i / (c.heads * sequences), h = i / sequences % c.heads, s = i % sequences;
      detail::in_head(c, l, h, [&] {
        const bool causal = c.head(l, h).causal;
        const MatrixView<const float> q = c.queries_of(l, h, s), k = c.keys_of(l, h, s);
        const Graph own = predictors[p]->predict(q, k, l, h, causal);
        GraphMetrics* out = &each[(p * graphs + i) * count];
        for (std::size_t w = 0; w < count; ++w)
          out[w] = windows[w] < 0 && global == 0
                       ? compare_graphs(own, gold.graphs[i], causal)
                       : compare_graphs(graph_union(own, window_global_graph(q.rows, k.rows, windows[w], global, causal)),
                                        gold.graphs[i], causal);
      });
    }
  });
  const double seconds = seconds_since(t0);
  std::vector<EvalReport> reports(models * count);
  for (std::size_t p = 0; p < models; ++p)
    for (std::size_t w = 0; w < count; ++w) {
      EvalReport& r = reports[p * count + w];
      r.layers = c.layers;
      r.heads = c.heads;
      r.per_head.resize(c.layers * c.heads);
      r.predict_seconds = seconds / static_cast<double>(models * count);
      for (std::size_t i = 0; i < graphs; ++i) r.per_head[i / sequences] += each[(p * graphs + i) * count + w];
      const double heads = static_cast<double>(r.per_head.size());
      for (const GraphMetrics& m : r.per_head) {
        r.sparsity += m.sparsity() / heads;
        r.recall += m.recall() / heads;
        r.gold_sparsity += m.gold_sparsity() / heads;
      }
    }
  return reports;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

}  // namespace

EvalReport evaluate(const Predictor& predictor, const Capture& capture) {
  return evaluate_windows({&predictor}, capture, GoldGraphs(capture), {-1}, 0).front();
}

std::vector<EvalReport> evaluate_many(const std::vector<const Predictor*>& predictors, const Capture& capture,
                                      const std::vector<long>& windows) {
  if (predictors.empty()) throw Error(at_op("evaluate_many") + "predictors is empty (expected at least one)");
  for (std::size_t i = 0; i < predictors.size(); ++i)
    if (predictors[i] == nullptr) throw Error(at_op("evaluate_many") + "predictors[" + std::to_string(i) + "] is null");
  if (windows.empty()) throw Error(at_op("evaluate_many") + "windows is empty (expected at least one; -1: none)");
  for (std::size_t i = 0; i < windows.size(); ++i)
    if (windows[i] < -1)
      throw Error(at_op("evaluate_many") + "windows[" + std::to_string(i) + "] is " + std::to_string(windows[i]) +
                  " (expected a window >= 0, or -1: none)");
  return evaluate_windows(predictors, capture, GoldGraphs(capture), windows, 0);
}

std::string eval_report_json(const EvalReport& r, const Predictor& predictor) {
  nlohmann::ordered_json j;
  j["method"] = predictor.method();
  j["settings"] = nlohmann::json(predictor.settings());
  j["sparsity"] = r.sparsity;
  j["recall"] = r.recall;
  j["gold_sparsity"] = r.gold_sparsity;
  j["predict_seconds"] = r.predict_seconds;
  nlohmann::ordered_json heads = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.per_head.size(); ++i) {
    const GraphMetrics& m = r.per_head[i];
    heads.push_back({{"layer", i / r.heads}, {"head", i % r.heads}, {"sparsity", m.sparsity()},
                     {"recall", m.recall()}, {"precision", m.precision()}, {"gold_sparsity", m.gold_sparsity()},
                     {"gold_edges", m.gold}, {"predicted_edges", m.predicted}, {"hits", m.hits}});
  }
  j["heads"] = heads;
  return j.dump(1);
}

std::vector<long> default_windows() { return {0, 1, 3, 5, 7, 9, 11, 15, 19, 23, 27}; }

SweepGrid default_grid(const std::string& method) {
  const std::vector<std::string> b = {"2", "4", "6", "8", "10", "12", "16", "20"};
  if (method == "window") return {method, "window", {"0", "1", "3", "5", "7", "9", "11", "15", "19", "23", "27"}, {}};
  if (method == "global") return {method, "global", {"1", "2", "4", "8", "16"}, {}};
  // Longformer and BigBird keep no window of their own, so that the union
  // window is their only source of locality (as in the paper).
  if (method == "longformer") return {method, "global", b, {{"window", "0"}}};
  if (method == "bigbird") return {method, "random", b, {{"window", "0"}, {"global", "0"}}};
  if (method == "reformer") return {method, "buckets", {"2", "4", "6", "8", "10", "12"}, {}};
  if (method == "routing") return {method, "clusters", {"2", "4", "6", "8", "10"}, {}};
  if (method == "sparsefinder-distance")
    return {method, "t", {"0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "4.5", "5.0"}, {}};
  if (method == "sparsefinder-quantization") return {method, "buckets", b, {}};
  if (method == "sparsefinder-kmeans") return {method, "clusters", b, {}};
  if (method == "lowrank-threshold")
    return {method, "margin", {"-0.5", "-0.3", "-0.2", "-0.1", "-0.05", "-0.02", "0", "0.02", "0.05", "0.1", "0.2", "0.5"}, {}};
  throw Error(at_op("default_grid") + "no grid for method '" + method + "'");
}

namespace {

// The predictor of each grid value: the first is fitted, the others refit
// from it (Predictor::refit reuses whatever the changed value leaves valid).
class GridFits {
 public:
  GridFits(const SweepGrid& grid, const Capture& train, const FitOptions& fit)
      : grid_(grid), train_(train), fit_(fit) {}

  // The fitted predictor for one value and the seconds spent fitting it.
  std::unique_ptr<Predictor> at(const std::string& value, double& fit_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Predictor> p;
    if (first_ && !grid_.parameter.empty()) {
      p = first_->refit(train_, {{grid_.parameter, value}}, fit_);
    } else {
      PredictorSettings settings = grid_.settings;
      if (!grid_.parameter.empty()) settings[grid_.parameter] = value;
      p = make_predictor(grid_.method, settings);
      if (p->learned()) p->fit(train_, fit_);
      if (p->learned()) first_ = p->with_settings({});
    }
    fit_seconds = seconds_since(t0);
    return p;
  }

 private:
  const SweepGrid& grid_;
  const Capture& train_;
  const FitOptions& fit_;
  std::unique_ptr<Predictor> first_;  // a copy of the first fit (learned methods)
};

std::string duration_text(double seconds) {
  char buf[32];
  if (seconds < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", static_cast<long>(seconds) / 60, static_cast<long>(seconds) % 60);
  return buf;
}

}  // namespace

SweepResult run_sweep(const std::vector<SweepGrid>& grids, const Capture& train, const Capture& test,
                      const SweepOptions& options) {
  if (train.layers != test.layers || train.heads != test.heads || train.head_dim != test.head_dim)
    throw Error(at_op("run_sweep") + "the train capture " + (train.source.empty() ? "" : train.source + " ") + "has " +
                std::to_string(train.layers) + " layers x " + std::to_string(train.heads) + " heads, head_dim " +
                std::to_string(train.head_dim) + ", the test capture " + (test.source.empty() ? "" : test.source + " ") +
                std::to_string(test.layers) + " x " + std::to_string(test.heads) + ", head_dim " +
                std::to_string(test.head_dim) + " (they must match)");
  // Every grid value's settings against the fit limits, before any work.
  for (const SweepGrid& grid : grids)
    for (const std::string& value : grid.values) {
      PredictorSettings settings = grid.settings;
      if (!grid.parameter.empty()) settings[grid.parameter] = value;
      make_predictor(grid.method, settings)->check_fit_size(train);
    }
  const auto start = std::chrono::steady_clock::now();
  const GoldGraphs gold(test);
  SweepResult result;
  for (std::size_t l = 0; l < test.layers; ++l)
    for (std::size_t h = 0; h < test.heads; ++h) {
      std::size_t edges = 0, allowed = 0;
      for (std::size_t s = 0; s < test.sequences(); ++s) {
        const Graph& g = gold.graphs[(l * test.heads + h) * test.sequences() + s];
        edges += g.edges();
        allowed += allowed_pair_count(g.queries, g.keys, test.head(l, h).causal);
      }
      const double sparsity = allowed == 0 ? 0.0 : 1.0 - static_cast<double>(edges) / static_cast<double>(allowed);
      result.gold_sparsity += sparsity / static_cast<double>(test.layers * test.heads);
    }
  std::size_t total = 0, done = 0;
  for (const SweepGrid& grid : grids) total += grid.values.size();
  for (const SweepGrid& grid : grids) {
    // The window method's own parameter is the window: no union on top.
    const std::vector<long> windows = grid.method == "window" ? std::vector<long>{-1} : options.windows;
    GridFits fits(grid, train, options.fit);
    std::vector<SweepPoint> points;
    for (const std::string& value : grid.values) {
      double fit_seconds = 0.0;
      std::unique_ptr<Predictor> p = fits.at(value, fit_seconds);
      const auto t0 = std::chrono::steady_clock::now();
      if (options.on_fitted) options.on_fitted(grid, value, *p);
      p->set_union_patterns(-1, 0);  // the unions are scored below, on one prediction
      const std::vector<EvalReport> reports = evaluate_windows({p.get()}, test, gold, windows, options.global);
      for (std::size_t wi = 0; wi < windows.size(); ++wi) {
        const long w = windows[wi];
        const EvalReport& r = reports[wi];
        SweepPoint pt;
        pt.method = grid.method;
        pt.parameter = grid.parameter;
        pt.value = value;
        pt.window = w;
        pt.sparsity = r.sparsity;
        pt.recall = r.recall;
        pt.fit_seconds = fit_seconds;
        pt.predict_seconds = r.predict_seconds;
        points.push_back(pt);
      }
      ++done;
      if (!options.fit.quiet) {
        const double elapsed = seconds_since(start);
        const double left = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
        std::fprintf(stderr, "sweep [%zu/%zu] %s%s%s: fit %s, %zu point%s %s; %s elapsed, about %s left\n", done, total,
                     grid.method.c_str(), grid.parameter.empty() ? "" : (" " + grid.parameter + "=").c_str(),
                     grid.parameter.empty() ? "" : value.c_str(),
                     duration_text(fit_seconds).c_str(), windows.size(),
                     windows.size() == 1 ? "" : "s", duration_text(seconds_since(t0)).c_str(),
                     duration_text(elapsed).c_str(), duration_text(left).c_str());
      }
    }
    for (std::size_t i : pareto_front(points)) points[i].pareto = true;
    result.points.insert(result.points.end(), points.begin(), points.end());
  }
  return result;
}

std::vector<std::size_t> pareto_front(const std::vector<SweepPoint>& points) {
  std::vector<std::size_t> order(points.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // By sparsity descending, recall descending: a point is on the front iff
  // its recall beats every sparser (or equally sparse, earlier) point's.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (points[a].sparsity != points[b].sparsity) return points[a].sparsity > points[b].sparsity;
    return points[a].recall > points[b].recall;
  });
  std::vector<std::size_t> front;
  double best_recall = -1.0;
  for (std::size_t i : order)
    if (points[i].recall > best_recall) {
      front.push_back(i);
      best_recall = points[i].recall;
    }
  std::reverse(front.begin(), front.end());  // ascending sparsity
  return front;
}

double recall_at_sparsity(const std::vector<SweepPoint>& points, double sparsity) {
  const std::vector<std::size_t> front = pareto_front(points);
  if (front.empty() || points[front.back()].sparsity < sparsity) return -1.0;
  for (std::size_t f = 0; f < front.size(); ++f) {
    const SweepPoint& hi = points[front[f]];
    if (hi.sparsity < sparsity) continue;
    if (f == 0 || hi.sparsity == sparsity) return hi.recall;
    // Between the previous (less sparse, higher recall) point and this one.
    const SweepPoint& lo = points[front[f - 1]];
    const double t = (sparsity - lo.sparsity) / (hi.sparsity - lo.sparsity);
    return lo.recall + t * (hi.recall - lo.recall);
  }
  return -1.0;
}

std::string sweep_csv(const std::vector<SweepPoint>& points) {
  std::string out = "method,parameter,value,window,sparsity,recall,pareto,fit_seconds,predict_seconds\n";
  for (const SweepPoint& p : points)
    out += p.method + "," + p.parameter + "," + p.value + "," + std::to_string(p.window) + "," +
           format_number(p.sparsity) + "," + format_number(p.recall) + "," + (p.pareto ? "1" : "0") + "," +
           format_number(p.fit_seconds) + "," + format_number(p.predict_seconds) + "\n";
  return out;
}

std::string sweep_json(const std::vector<SweepPoint>& points, double gold_sparsity,
                       const std::vector<double>& at_sparsity) {
  nlohmann::ordered_json j;
  j["format"] = "entgraph-sweep";
  j["version"] = 1;
  j["gold_sparsity"] = gold_sparsity;
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const SweepPoint& p : points)
    arr.push_back({{"method", p.method}, {"parameter", p.parameter}, {"value", p.value}, {"window", p.window},
                   {"sparsity", p.sparsity}, {"recall", p.recall}, {"pareto", p.pareto},
                   {"fit_seconds", p.fit_seconds}, {"predict_seconds", p.predict_seconds}});
  j["points"] = arr;
  nlohmann::ordered_json recall_at = nlohmann::ordered_json::object();
  for (const SweepPoint& p : points) {
    if (recall_at.contains(p.method)) continue;
    std::vector<SweepPoint> own;
    for (const SweepPoint& q : points)
      if (q.method == p.method) own.push_back(q);
    nlohmann::ordered_json at = nlohmann::ordered_json::object();
    auto put = [&](const std::string& key, double sparsity) {
      const double r = recall_at_sparsity(own, sparsity);
      at[key] = r < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r);
    };
    put("gold", gold_sparsity);
    for (double s : at_sparsity) put(format_number(s), s);
    recall_at[p.method] = at;
  }
  j["recall_at"] = recall_at;
  return j.dump(1);
}

std::string pareto_svg(const std::vector<SweepPoint>& points, double gold_sparsity, const std::string& title) {
  static const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  const double width = 760, height = 500, left = 60, right = 220, top = 40, bottom = 50;
  const double pw = width - left - right, ph = height - top - bottom;
  // x from the least sparse point (rounded down to 0.1) to 1.
  double xmin = 1.0;
  for (const SweepPoint& p : points) xmin = std::min(xmin, p.sparsity);
  xmin = std::max(0.0, std::floor(std::min(xmin, gold_sparsity) * 10.0) / 10.0);
  if (xmin >= 1.0) xmin = 0.9;
  auto x = [&](double s) { return left + (s - xmin) / (1.0 - xmin) * pw; };
  auto y = [&](double r) { return top + (1.0 - r) * ph; };
  auto num = [](double v) { return format_number(std::round(v * 10.0) / 10.0); };
  auto escape = [](const std::string& s) {
    std::string o;
    for (char c : s) o += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
    return o;
  };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(left) + "\" y=\"24\" font-size=\"15\">" + escape(title) + "</text>\n";
  for (int t = 0; t <= 10; ++t) {  // recall grid and ticks
    const double r = t / 10.0;
    svg += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + pw) + "\" y1=\"" + num(y(r)) + "\" y2=\"" + num(y(r)) +
           "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + num(left - 6) + "\" y=\"" + num(y(r) + 4) + "\" text-anchor=\"end\">" + format_number(r) +
           "</text>\n";
  }
  // Sparsity ticks at round values: every 0.1, or 0.02 on a narrow range.
  const double step = 1.0 - xmin > 0.3 ? 0.1 : 0.02;
  const int ticks = static_cast<int>(std::lround((1.0 - xmin) / step));
  for (int t = 0; t <= ticks; ++t) {
    const double sx = xmin + step * t;
    char label[16];
    std::snprintf(label, sizeof label, step < 0.1 ? "%.2f" : "%.1f", sx);
    svg += "<text x=\"" + num(x(sx)) + "\" y=\"" + num(top + ph + 16) + "\" text-anchor=\"middle\">" + label +
           "</text>\n";
  }
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
         "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(height - 10) +
         "\" text-anchor=\"middle\">sparsity (1 - predicted / allowed pairs)</text>\n";
  svg += "<text transform=\"translate(16 " + num(top + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">recall of the gold graph</text>\n";
  if (gold_sparsity >= xmin && gold_sparsity <= 1.0)
    svg += "<line x1=\"" + num(x(gold_sparsity)) + "\" x2=\"" + num(x(gold_sparsity)) + "\" y1=\"" + num(top) +
           "\" y2=\"" + num(top + ph) + "\" stroke=\"#333\" stroke-dasharray=\"6 4\"/>\n";

  std::vector<std::string> methods;
  for (const SweepPoint& p : points)
    if (std::find(methods.begin(), methods.end(), p.method) == methods.end()) methods.push_back(p.method);
  for (std::size_t mi = 0; mi < methods.size(); ++mi) {
    const std::string colour = kColours[mi % 10];
    std::vector<SweepPoint> own;
    for (const SweepPoint& p : points)
      if (p.method == methods[mi]) own.push_back(p);
    for (const SweepPoint& p : own)
      svg += "<circle cx=\"" + num(x(p.sparsity)) + "\" cy=\"" + num(y(p.recall)) + "\" r=\"2.5\" fill=\"" + colour +
             "\" fill-opacity=\"0.35\"/>\n";
    std::string line;
    for (std::size_t i : pareto_front(own)) line += num(x(own[i].sparsity)) + "," + num(y(own[i].recall)) + " ";
    svg += "<polyline points=\"" + line + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\"/>\n";
    const double ly = top + 10 + 20.0 * static_cast<double>(mi);
    svg += "<line x1=\"" + num(left + pw + 16) + "\" x2=\"" + num(left + pw + 40) + "\" y1=\"" + num(ly) + "\" y2=\"" +
           num(ly) + "\" stroke=\"" + colour + "\" stroke-width=\"3\"/>\n";
    svg += "<text x=\"" + num(left + pw + 46) + "\" y=\"" + num(ly + 4) + "\">" + escape(methods[mi]) + "</text>\n";
  }
  const double gy = top + 10 + 20.0 * static_cast<double>(methods.size());
  svg += "<line x1=\"" + num(left + pw + 16) + "\" x2=\"" + num(left + pw + 40) + "\" y1=\"" + num(gy) + "\" y2=\"" +
         num(gy) + "\" stroke=\"#333\" stroke-dasharray=\"6 4\"/>\n";
  svg += "<text x=\"" + num(left + pw + 46) + "\" y=\"" + num(gy + 4) + "\">gold sparsity</text>\n</svg>\n";
  return svg;
}

}  // namespace entgraph
