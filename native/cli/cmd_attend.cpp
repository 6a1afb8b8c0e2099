// entgraph attend: dense attention against attention on a predicted graph
// (prediction included), per head of a capture: time, how each row was
// settled, and the largest difference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph attend --capture DIR (--params FILE | --method M [--set key=value]...)\n"
    "                       [--layer L --head H] [--exact] [--json] [options]\n"
    "\n"
    "Runs dense attention and attention on the predicted graph (the prediction\n"
    "included in its time) on every sequence of every selected head of the\n"
    "capture (which needs values.npy), and prints per head and in total: dense\n"
    "and graph seconds, their ratio, rows, rows settled by the graph alone,\n"
    "repaired rows, dense rows, and max |graph - dense|.\n"
    "\n"
    "Without --exact the graph's rows are used as they are (fast mode); a second,\n"
    "untimed pass (certify) counts the rows the bounds prove exact and bounds the\n"
    "others' missed mass: the weight dense attention gives to the keys a graph\n"
    "row leaves out (docs/EXACT.md, \"Fast mode's error\"). It prints the largest\n"
    "and mean bound, the rows with one (softmax: only rows holding every key;\n"
    "top-k: only proven rows), and the bound on max |graph - dense| it implies\n"
    "(the largest bound times the widest range of a column of V). With --exact\n"
    "every row is proven equal to dense attention or repaired (bound and\n"
    "repair, docs/EXACT.md); the transform needs a threshold (not softmax).\n"
    "\n"
    "Options:\n"
    "  --capture DIR      capture folder with queries, keys and values (required)\n"
    "  --params FILE      a fitted predictor's parameter file (entgraph fit)\n"
    "  --method M         or a predictor by name, with --set key=value settings\n"
    "  --layer L          only this layer (default: all)\n"
    "  --head H           only this head (default: all)\n"
    "  --fn NAME          transform instead of the capture's entmax alpha: softmax,\n"
    "                     sparsemax, entmax15, entmax (--alpha A), topk (--k K)\n"
    "  --exact            bound and repair: every row equals dense attention; says\n"
    "                     which bound kernel ran ($ENTGRAPH_BOUND_KERNEL: auto,\n"
    "                     float32, bf16, int16, int8)\n"
    "  --rank R           rank of the score bounds, or auto (default: per head, 8 or\n"
    "                     16 when the keys are nearly that low-rank, else d)\n"
    "  --repeat N         time each run N times, keep the fastest (default 1)\n"
    "  --json             one JSON object: totals (dense_s, graph_s, ratio, rows,\n"
    "                     rows_exact, rows_certified, max_abs_err, rows_bounded,\n"
    "                     max_missed_mass, mean_missed_mass, output_error_bound\n"
    "                     (null when unknown), ...) and heads\n";

// A number in the --json output: JSON has no infinity or NaN, so a value
// that is not finite is written as null (docs/FORMATS.md, "JSON output").
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The transform of a head: --fn if given, else the capture's alpha.
Transform head_transform(const std::optional<Transform>& chosen, double alpha) {
  if (chosen) return *chosen;
  if (alpha == 1.0) return Transform::softmax();
  if (alpha == 1.5) return Transform::entmax15();
  if (alpha == 2.0) return Transform::sparsemax();
  return Transform::entmax(alpha);
}

// Totals over sequences (one head) or heads (the whole run).
struct Tally {
  double dense_s = 0, graph_s = 0, max_abs_err = 0, max_abs_dense = 0;
  std::size_t rows = 0, rows_exact = 0, rows_certified = 0, repaired_rows = 0, dense_rows = 0;
  std::size_t graph_pairs = 0, repair_pairs = 0, bound_pairs = 0, allowed_pairs = 0, predicted_pairs = 0;
  // Missed-mass bounds (GraphAttentionReport): rows with one, their sum and
  // largest, and the output error bound (NaN once a row has none).
  std::size_t rows_bounded = 0;
  double missed_sum = 0, max_missed = 0, output_error_bound = 0;
  std::string bound_kernel;  // exact mode: the bound kernels that ran, joined by '+' ("none" otherwise)

  void add(const Tally& o) {
    dense_s += o.dense_s;
    graph_s += o.graph_s;
    max_abs_err = std::max(max_abs_err, o.max_abs_err);
    max_abs_dense = std::max(max_abs_dense, o.max_abs_dense);
    rows += o.rows;
    rows_exact += o.rows_exact;
    rows_certified += o.rows_certified;
    repaired_rows += o.repaired_rows;
    dense_rows += o.dense_rows;
    graph_pairs += o.graph_pairs;
    repair_pairs += o.repair_pairs;
    bound_pairs += o.bound_pairs;
    allowed_pairs += o.allowed_pairs;
    predicted_pairs += o.predicted_pairs;
    rows_bounded += o.rows_bounded;
    missed_sum += o.missed_sum;
    max_missed = std::max(max_missed, o.max_missed);
    output_error_bound =
        std::isnan(o.output_error_bound) ? o.output_error_bound : std::max(output_error_bound, o.output_error_bound);
    if (!o.bound_kernel.empty() && ("+" + bound_kernel + "+").find("+" + o.bound_kernel + "+") == std::string::npos)
      bound_kernel += (bound_kernel.empty() ? "" : "+") + o.bound_kernel;
  }
  double ratio() const { return dense_s > 0 ? graph_s / dense_s : 0.0; }
  double max_missed_mass() const { return rows_bounded ? max_missed : std::nan(""); }
  double mean_missed_mass() const { return rows_bounded ? missed_sum / double(rows_bounded) : std::nan(""); }
  std::string json() const {
    const double sparsity = allowed_pairs ? 1.0 - double(predicted_pairs) / double(allowed_pairs) : 0.0;
    std::ostringstream s;
    s << "\"dense_s\": " << json_number(dense_s) << ", \"graph_s\": " << json_number(graph_s)
      << ", \"ratio\": " << json_number(ratio()) << ", \"rows\": " << rows << ", \"rows_exact\": " << rows_exact
      << ", \"rows_certified\": " << rows_certified << ", \"repaired_rows\": " << repaired_rows
      << ", \"dense_rows\": " << dense_rows << ", \"max_abs_err\": " << json_number(max_abs_err)
      << ", \"max_abs_dense\": " << json_number(max_abs_dense) << ", \"graph_pairs\": " << graph_pairs
      << ", \"repair_pairs\": " << repair_pairs << ", \"bound_pairs\": " << bound_pairs
      << ", \"allowed_pairs\": " << allowed_pairs << ", \"predicted_sparsity\": " << json_number(sparsity)
      << ", \"rows_bounded\": " << rows_bounded << ", \"max_missed_mass\": " << json_number(max_missed_mass())
      << ", \"mean_missed_mass\": " << json_number(mean_missed_mass())
      << ", \"output_error_bound\": " << json_number(output_error_bound) << ", \"bound_kernel\": \""
      << (bound_kernel.empty() ? "none" : bound_kernel) << "\"";
    return s.str();
  }
};

// One sequence of one head: dense, then predict + graph attention, each the
// fastest of `repeat` runs.
Tally attend_sequence(const Capture& capture, const Predictor& predictor, std::size_t layer, std::size_t head,
                      std::size_t sequence, const Transform& transform, bool exact, std::size_t rank,
                      std::size_t repeat) {
  const HeadSettings& hs = capture.head(layer, head);
  const MatrixView<const float> q = capture.queries_of(layer, head, sequence);
  const MatrixView<const float> k = capture.keys_of(layer, head, sequence);
  const MatrixView<const float> v = capture.values_of(layer, head, sequence);
  const std::size_t n = q.rows, dv = v.cols;
  AttentionOptions<float> ao;
  ao.transform = transform;
  ao.scale = hs.scale;
  ao.causal = hs.causal;
  GraphAttentionOptions<float> go;
  go.attention = ao;
  go.mode = exact ? GraphAttentionMode::exact : GraphAttentionMode::fast;
  go.bound_rank = rank;

  std::vector<float> dense(n * dv), graph(n * dv);
  GraphAttentionReport report;
  Tally t;
  t.dense_s = t.graph_s = 1e300;
  Graph g;
  for (std::size_t r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    attention_forward<float>(q, k, v, {dense.data(), n, dv}, ao);
    t.dense_s = std::min(t.dense_s, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    g = predictor.predict(q, k, layer, head, hs.causal);
    graph_attention_forward<float>(q, k, v, g, {graph.data(), n, dv}, go, &report);
    t.graph_s = std::min(t.graph_s, seconds_since(t0));
  }
  t.rows = n;
  t.graph_pairs = report.graph_pairs;
  t.repair_pairs = report.repair_pairs;
  t.bound_pairs = report.bound_pairs;
  t.repaired_rows = report.repaired_rows;
  t.dense_rows = report.dense_rows;
  t.allowed_pairs = allowed_pair_count(n, k.rows, hs.causal);
  t.predicted_pairs = allowed_edge_count(g, hs.causal);
  // Which rows of the fast output are provably exact, and the others' missed
  // mass: an untimed certify pass.
  GraphAttentionReport certified = report;
  if (exact) {
    t.rows_exact = report.exact_rows();
    t.rows_certified = report.graph_rows;
    if (report.bound_kernel != BoundKernel::automatic) t.bound_kernel = bound_kernel_name(report.bound_kernel);
  } else {
    if (has_threshold(transform)) {
      go.mode = GraphAttentionMode::certify;
      std::vector<float> scratch(n * dv);
      graph_attention_forward<float>(q, k, v, g, {scratch.data(), n, dv}, go, &certified);
    }
    t.rows_exact = t.rows_certified = certified.graph_rows;
  }
  t.rows_bounded = certified.bounded_rows;
  t.missed_sum = certified.bounded_rows ? certified.mean_missed_mass * double(certified.bounded_rows) : 0.0;
  t.max_missed = certified.bounded_rows ? certified.max_missed_mass : 0.0;
  t.output_error_bound = certified.output_error_bound;
  // The difference in double: two finite outputs of opposite sign near the
  // float32 limit differ by more than float32 can hold.
  for (std::size_t x = 0; x < n * dv; ++x) {
    t.max_abs_err = std::max(t.max_abs_err, std::abs(static_cast<double>(dense[x]) - graph[x]));
    t.max_abs_dense = std::max(t.max_abs_dense, static_cast<double>(std::abs(dense[x])));
  }
  return t;
}

// --layer / --head: one index, or every one when absent.
std::vector<std::size_t> selection(const Args& args, const char* name, std::size_t count) {
  const auto value = args.integer(name);
  if (!value) {
    std::vector<std::size_t> all(count);
    for (std::size_t i = 0; i < count; ++i) all[i] = i;
    return all;
  }
  if (*value >= count)
    throw args.error(std::string("--") + name + ": out of range (got " + std::to_string(*value) + ", the capture has " +
                     std::to_string(count) + ")");
  return {static_cast<std::size_t>(*value)};
}

}  // namespace

int run_attend(const std::vector<std::string>& raw) {
  std::vector<std::string> argv = raw;
  const PredictorSettings settings = take_settings(argv, "attend");
  const Args args("attend", argv,
                  {{"capture", true},
                   {"params", true},
                   {"method", true},
                   {"layer", true},
                   {"head", true},
                   {"fn", true},
                   {"alpha", true},
                   {"k", true},
                   {"exact", false},
                   {"rank", true},
                   {"repeat", true},
                   {"json", false},
                   kIsaOption,
                   kThreadsOption});
  if (args.help()) {
    std::printf("%s%s", kUsage, kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  if (!args.has("capture")) throw args.error("--capture is required");
  if (args.has("params") == args.has("method")) throw args.error("give exactly one of --params FILE and --method M");
  if (args.has("params") && !settings.empty()) throw args.error("--set applies to --method, not to --params");
  apply_runtime_options(args);
  const std::optional<Transform> chosen =
      args.has("fn") ? std::optional<Transform>(parse_transform_option(args)) : std::nullopt;
  if (!args.has("fn") && (args.has("alpha") || args.has("k"))) throw args.error("--alpha and --k need --fn");
  const bool exact = args.has("exact");
  std::size_t rank = kAutoBoundRank;
  if (args.has("rank") && *args.get("rank") != "auto") {
    rank = static_cast<std::size_t>(*args.integer("rank"));
    if (rank > 4096)
      throw args.error("--rank: too large (got " + *args.get("rank") + ", expected auto or at most 4096)");
  }
  const std::uint64_t repeat = args.integer("repeat").value_or(1);
  if (repeat < 1 || repeat > 1000) throw args.error("--repeat: must be in [1, 1000] (got " + *args.get("repeat") + ")");

  std::unique_ptr<Predictor> predictor;
  if (args.has("params")) {
    predictor = read_predictor(*args.get("params"), "attend: --params");
  } else {
    predictor = make_predictor_option(args, *args.get("method"), settings);
    if (predictor->learned())
      throw args.error("--method " + predictor->method() +
                       " learns its parameters: fit it first (entgraph fit) and pass --params FILE");
  }
  const Capture capture = read_capture(*args.get("capture"));
  if (!capture.has_values())
    throw Error("attend: --capture " + *args.get("capture") +
                ": the capture has no values (values.npy); attention "
                "needs V");
  const std::vector<std::size_t> layers = selection(args, "layer", capture.layers);
  const std::vector<std::size_t> heads = selection(args, "head", capture.heads);
  // Every head's transform is checked before any work starts.
  for (std::size_t l : layers)
    for (std::size_t h : heads) {
      const Transform t = head_transform(chosen, capture.head(l, h).alpha);
      if (exact && !has_threshold(t))
        throw args.error("--exact: " + t.name() + " (layer " + std::to_string(l) + ", head " + std::to_string(h) +
                         ") has no threshold: every key gets weight > 0, so no key can be skipped (use --fn "
                         "sparsemax, entmax15, entmax or topk)");
    }

  const bool json = args.has("json");
  Tally total;
  std::ostringstream per_head;
  if (!json)
    std::printf("%-5s %-4s %7s %10s %10s %7s %7s %8s %7s %11s\n", "layer", "head", "rows", "dense_s", "graph_s",
                "ratio", "by_graph", "repaired", "dense", "max_abs_err");
  for (std::size_t l : layers)
    for (std::size_t h : heads) {
      const Transform t = head_transform(chosen, capture.head(l, h).alpha);
      Tally head_total;
      for (std::size_t s = 0; s < capture.sequences(); ++s)
        head_total.add(in_head(capture, l, h, [&] {
          return attend_sequence(capture, *predictor, l, h, s, t, exact, rank, repeat);
        }));
      total.add(head_total);
      if (json) {
        per_head << (per_head.tellp() > 0 ? ", " : "") << "{\"layer\": " << l << ", \"head\": " << h << ", "
                 << head_total.json() << "}";
      } else {
        std::printf("%-5zu %-4zu %7zu %10.6f %10.6f %7.3f %8zu %8zu %7zu %11.3g\n", l, h, head_total.rows,
                    head_total.dense_s, head_total.graph_s, head_total.ratio(), head_total.rows_certified,
                    head_total.repaired_rows, head_total.dense_rows, head_total.max_abs_err);
      }
    }
  if (json) {
    std::printf("{\"mode\": \"%s\", \"method\": \"%s\", %s, \"heads\": [%s]}\n", exact ? "exact" : "fast",
                predictor->method().c_str(), total.json().c_str(), per_head.str().c_str());
  } else {
    std::printf("%-10s %7zu %10.6f %10.6f %7.3f %8zu %8zu %7zu %11.3g\n", "total", total.rows, total.dense_s,
                total.graph_s, total.ratio(), total.rows_certified, total.repaired_rows, total.dense_rows,
                total.max_abs_err);
    std::printf(
        "%s mode, %s: %zu of %zu rows exact (%zu by the graph alone); predicted sparsity %.4f; "
        "repair scored %zu pairs beyond the graph's %zu\n",
        exact ? "exact" : "fast", predictor->method().c_str(), total.rows_exact, total.rows, total.rows_certified,
        total.allowed_pairs ? 1.0 - double(total.predicted_pairs) / total.allowed_pairs : 0.0, total.repair_pairs,
        total.graph_pairs);
    if (exact) std::printf("bound kernel: %s\n", total.bound_kernel.empty() ? "none" : total.bound_kernel.c_str());
    if (!exact)
      std::printf("missed mass bounded on %zu of %zu rows: largest %.3g, mean %.3g; max |graph - dense| <= %.3g%s\n",
                  total.rows_bounded, total.rows, total.max_missed_mass(), total.mean_missed_mass(),
                  total.output_error_bound,
                  std::isnan(total.output_error_bound) ? " (unknown: rows without a bound)" : "");
  }
  return 0;
}

}  // namespace entgraph::cli
