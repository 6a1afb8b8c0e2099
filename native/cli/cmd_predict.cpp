// entgraph fit / eval / sweep: fit a graph predictor on a capture, evaluate a
// parameter file on a capture, and sweep every method into Pareto curves.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/files.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"
#include "entgraph/text.hpp"

namespace entgraph::cli {
namespace {

void write_text(const std::string& path, const std::string& text, const char* command) {
  write_file_bytes(command, path, text.data(), text.size());
}

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

}  // namespace

int run_fit(const std::vector<std::string>& raw) {
  std::vector<std::string> argv = raw;
  const PredictorSettings settings = take_settings(argv, "fit");
  const Args args("fit", argv, {{"capture", true}, {"method", true}, {"out", true}, {"quiet", false}, kIsaOption,
                                kThreadsOption});
  if (args.help()) {
    std::printf(
        "Usage: entgraph fit --capture DIR --method M [--set key=value ...] --out params.json\n"
        "\n"
        "Fits a graph predictor on a capture (a no-op for fixed patterns) and writes\n"
        "its parameter file. Methods: %s.\n"
        "Settings per method: docs/PREDICTORS.md.\n"
        "\n"
        "Options:\n"
        "  --quiet            no progress bar\n%s",
        predictor_method_list().c_str(), kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"capture", "method", "out"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  std::unique_ptr<Predictor> p = make_predictor_option(args, *args.get("method"), settings);
  const Capture capture = read_capture(*args.get("capture"));
  FitOptions options;
  options.quiet = args.has("quiet");
  p->fit(capture, options);
  write_text(*args.get("out"), p->to_json() + "\n", "fit");
  std::printf("%s: %s fitted on %zu layers x %zu heads\n", args.get("out")->c_str(), p->method().c_str(),
              capture.layers, capture.heads);
  return 0;
}

int run_eval(const std::vector<std::string>& argv) {
  const Args args("eval", argv, {{"capture", true}, {"params", true}, {"out", true}, kIsaOption, kThreadsOption});
  if (args.help()) {
    std::printf(
        "Usage: entgraph eval --capture DIR --params params.json [--out report.json]\n"
        "\n"
        "Predicts the graph of every head and sequence of the capture and compares\n"
        "it with the gold graph: a JSON report with the mean sparsity and recall over\n"
        "heads, and per head sparsity, recall, precision and edge counts (stdout,\n"
        "or --out).\n\nOptions:\n%s",
        kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"capture", "params"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  const std::unique_ptr<Predictor> p = read_predictor(*args.get("params"), "eval: --params");
  const Capture capture = read_capture(*args.get("capture"));
  const std::string report = eval_report_json(evaluate(*p, capture), *p) + "\n";
  if (args.has("out"))
    write_text(*args.get("out"), report, "eval");
  else
    std::printf("%s", report.c_str());
  return 0;
}

namespace {

// --methods A,B,...: names checked against the registry (a usage error lists
// the valid ones); all methods when absent.
std::vector<std::string> sweep_methods(const Args& args) {
  if (!args.has("methods")) return predictor_methods();
  const std::vector<std::string> known = predictor_methods();
  std::vector<std::string> methods;
  for (const std::string& m : split_list(*args.get("methods"))) {
    if (std::find(known.begin(), known.end(), m) == known.end())
      throw args.error("--methods: unknown method '" + m + "' (valid: " + predictor_method_list() + ")");
    if (std::find(methods.begin(), methods.end(), m) == methods.end()) methods.push_back(m);
  }
  if (methods.empty()) throw args.error("--methods: no method named");
  return methods;
}

// --grid METHOD:key=v1,v2,...: replaces METHOD's default grid. Every value
// is checked by building the predictor, so a typo fails before any fit.
SweepGrid parse_grid(const Args& args, const std::string& spec) {
  const std::size_t colon = spec.find(':'), eq = spec.find('=', colon == std::string::npos ? 0 : colon);
  if (colon == std::string::npos || colon == 0 || eq == std::string::npos || eq == colon + 1)
    throw args.error("--grid expects METHOD:key=v1,v2,... (got '" + spec + "')");
  SweepGrid grid;
  grid.method = spec.substr(0, colon);
  grid.parameter = spec.substr(colon + 1, eq - colon - 1);
  grid.values = split_list(spec.substr(eq + 1));
  if (grid.values.empty()) throw args.error("--grid " + spec + ": no value given");
  // A value given twice would be one point fitted twice, and its parameter
  // file written twice (--save-params).
  for (std::size_t i = 0; i < grid.values.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (grid.values[i] == grid.values[j])
        throw args.error("--grid " + spec + ": the value " + grid.values[i] + " is given twice");
  for (const std::string& v : grid.values)
    make_predictor_option(args, grid.method, {{grid.parameter, v}}, "--grid", "--grid");
  return grid;
}

// --windows w1,w2,...: the union windows (integers >= 0, or "none").
std::vector<long> parse_windows(const Args& args) {
  std::vector<long> windows;
  for (const std::string& w : split_list(*args.get("windows"))) {
    if (w == "none") {
      windows.push_back(-1);
      continue;
    }
    double v = 0.0;  // plain decimal digits only: " 3", "0x3", "3e0" are mistakes
    if (w.find_first_not_of("0123456789") != std::string::npos || !parse_decimal(w, v) || v > (1L << 20))
      throw args.error("--windows: expected integers in [0, 1048576] or 'none' (got '" + w + "')");
    windows.push_back(static_cast<long>(v));
  }
  if (windows.empty()) throw args.error("--windows: no window given");
  return windows;
}

// --at-sparsity S (repeatable): numbers in [0, 1].
std::vector<double> parse_sparsities(const Args& args, const std::vector<std::string>& texts) {
  std::vector<double> out;
  for (const std::string& t : texts) {
    double s = -1.0;  // a plain decimal: "0x1p-1", " 0.5", "nan" are mistakes
    if (!parse_decimal(t, s) || !(s >= 0.0 && s <= 1.0))
      throw args.error("--at-sparsity: expected a number in [0, 1] (got '" + t + "')");
    out.push_back(s);
  }
  return out;
}

}  // namespace

int run_sweep(const std::vector<std::string>& raw) {
  std::vector<std::string> argv = raw;
  const PredictorSettings settings = take_settings(argv, "sweep");
  const std::vector<std::string> grid_specs = take_repeated(argv, "grid", "sweep");
  const std::vector<std::string> at_texts = take_repeated(argv, "at-sparsity", "sweep");
  const Args args("sweep", argv, {{"train", true}, {"test", true}, {"out", true}, {"methods", true},
                                  {"windows", true}, {"global", true}, {"no-window", false}, {"quiet", false},
                                  {"save-params", true}, kIsaOption, kThreadsOption});
  if (args.help()) {
    std::printf(
        "Usage: entgraph sweep --train DIR --test DIR --out OUTDIR [options]\n"
        "\n"
        "Runs every method over its grid (the Sparsefinder paper's, docs/PREDICTORS.md),\n"
        "each point unioned with a window of size {0, 1, 3, ..., 27}, fitted on --train\n"
        "and evaluated on --test. A grid over a setting that only prediction reads\n"
        "(t, top, margin) is fitted once. Writes OUTDIR/sweep.json, sweep.csv and\n"
        "pareto.svg (in an existing sweep: sweep.g1.csv ..., named by sweep.json's\n"
        "\"files\"; docs/FORMATS.md), and prints each method's Pareto frontier.\n"
        "\n"
        "Options:\n"
        "  --methods A,B,...  only these methods (default: all: %s)\n"
        "  --set key=value    a setting for every method that accepts it (e.g. r=8, seed=1);\n"
        "                     repeatable; a key no chosen method knows is an error\n"
        "  --grid M:key=v1,v2,...  the grid of method M (repeatable; default: its paper grid)\n"
        "  --windows w1,w2,...     union windows (integers, or 'none'; default 0,1,3,...,27)\n"
        "  --no-window        no union window (same as --windows none)\n"
        "  --at-sparsity S    also report each frontier's recall at sparsity S (repeatable)\n"
        "  --global G         first G tokens global in every point (default 0)\n"
        "  --save-params DIR  also write each fitted predictor's parameter file,\n"
        "                     DIR/METHOD.json or DIR/METHOD-PARAMETER-VALUE.json\n"
        "  --quiet            no progress lines\n%s",
        predictor_method_list().c_str(), kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"train", "test", "out"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  const std::vector<std::string> methods = sweep_methods(args);
  if (args.has("no-window") && args.has("windows")) throw args.error("--no-window and --windows exclude each other");
  const std::vector<double> at_sparsity = parse_sparsities(args, at_texts);

  std::vector<SweepGrid> grids;
  for (const std::string& method : methods) grids.push_back(default_grid(method));
  std::vector<std::string> gridded;
  for (const std::string& spec : grid_specs) {
    SweepGrid grid = parse_grid(args, spec);
    const auto it = std::find_if(grids.begin(), grids.end(), [&](const SweepGrid& g) { return g.method == grid.method; });
    if (it == grids.end()) throw args.error("--grid " + spec + ": method " + grid.method + " is not in --methods");
    if (std::find(gridded.begin(), gridded.end(), grid.method) != gridded.end())
      throw args.error("--grid: method " + grid.method + " given twice");
    gridded.push_back(grid.method);
    grid.settings = it->settings;  // e.g. longformer's window=0 stays
    grid.settings.erase(grid.parameter);
    *it = grid;
  }
  // Shared settings apply to the methods that know them; a key that no chosen
  // method knows, or a bad value, is a usage error before anything is read.
  for (const auto& [key, value] : settings) {
    bool known = false;
    for (SweepGrid& grid : grids) {
      if (!predictor_has_setting(grid.method, key)) continue;
      known = true;
      if (key == grid.parameter)
        throw args.error("--set " + key + ": " + grid.method + " sweeps " + key + " (use --grid to choose its values)");
      PredictorSettings with = grid.settings;
      with[key] = value;
      make_predictor_option(args, grid.method, with);
      grid.settings = with;
    }
    if (!known) throw args.error("--set " + key + ": no method of this sweep has a setting '" + key + "'");
  }

  const Capture train = read_capture(*args.get("train"));
  const Capture test = read_capture(*args.get("test"));
  SweepOptions options;
  options.global = static_cast<std::size_t>(args.integer("global").value_or(0));
  if (args.has("no-window")) options.windows = {-1};
  if (args.has("windows")) options.windows = parse_windows(args);
  options.fit.quiet = args.has("quiet");

  // Both folders appear whole or not at all: their files are staged and
  // moved into place once the sweep has succeeded (OutputFolder), and
  // nothing is committed unless both can be (see the end).
  std::optional<OutputFolder> params_out;
  std::vector<std::string> params_names;
  if (args.has("save-params")) {
    if (same_path(*args.get("save-params"), *args.get("out")))
      throw args.error("--save-params: names the --out folder (" + *args.get("out") + "); give it a folder of its own");
    params_out.emplace("sweep: --save-params", *args.get("save-params"));
    options.on_fitted = [&](const SweepGrid& grid, const std::string& value, const Predictor& p) {
      const std::string name = grid.parameter.empty() ? grid.method : grid.method + "-" + grid.parameter + "-" + value;
      write_text(params_out->path(name + ".json"), p.to_json() + "\n", "sweep: --save-params");
      params_names.push_back(name + ".json");
    };
  }
  OutputFolder out("sweep: --out", *args.get("out"));
  // A folder in the way of an output file fails here, before the sweep runs.
  out.check_targets({"sweep.csv", "pareto.svg", "sweep.json"});

  const SweepResult sweep = run_sweep(grids, train, test, options);
  const std::vector<SweepPoint>& all = sweep.points;
  const double gold = sweep.gold_sparsity;
  write_text(out.path("sweep.csv"), sweep_csv(all), "sweep: --out");
  write_text(out.path("pareto.svg"),
             pareto_svg(all, gold, "Sparsity-recall Pareto curves (" + *args.get("test") + ")"), "sweep: --out");
  if (params_out) params_out->check_targets(params_names);
  // sweep.json is the manifest: it names the csv and svg files as committed
  // (sweep.g2.csv ... when rewriting an existing sweep, docs/FORMATS.md).
  const std::string report = sweep_json(all, gold, at_sparsity);
  out.prepare({"sweep.csv", "pareto.svg"}, "sweep.json", [&](const OutputFolder::Names& names) {
    return "{\n \"files\": {\"csv\": \"" + names.at("sweep.csv") + "\", \"svg\": \"" + names.at("pareto.svg") +
           "\"}," + report.substr(1) + "\n";
  });
  // Everything that may fail in --out is done; its manifest's rename, the
  // one step left, is all that can fail after --save-params is committed,
  // and then --save-params is put back as it was.
  if (params_out) params_out->commit(params_names);
  try {
    out.commit();
  } catch (...) {
    if (params_out) params_out->rollback();
    throw;
  }

  std::printf("gold sparsity %.6f; Pareto frontier of each method (sparsity -> recall):\n", gold);
  std::printf("  %-26s %-22s %8s %8s\n", "method", "point", "sparsity", "recall");
  for (const std::string& method : methods) {
    std::vector<SweepPoint> own;
    for (const SweepPoint& p : all)
      if (p.method == method) own.push_back(p);
    for (std::size_t i : pareto_front(own)) {
      const SweepPoint& p = own[i];
      const std::string point = (p.parameter.empty() ? "" : p.parameter + "=" + p.value) +
                                (p.window >= 0 ? " w=" + std::to_string(p.window) : "");
      std::printf("  %-26s %-22s %8.4f %8.4f\n", method.c_str(), point.c_str(), p.sparsity, p.recall);
    }
    auto report = [&](const std::string& where, double sparsity) {
      const double r = recall_at_sparsity(own, sparsity);
      if (r >= 0)
        std::printf("  %-26s recall at %s: %.4f\n", method.c_str(), where.c_str(), r);
      else
        std::printf("  %-26s does not reach %s\n", method.c_str(), where.c_str());
    };
    report("the gold sparsity", gold);
    for (double s : at_sparsity) {
      char where[48];
      std::snprintf(where, sizeof where, "sparsity %g", s);
      report(where, s);
    }
  }
  std::printf("wrote %s/sweep.json, %s, %s\n", args.get("out")->c_str(), out.names().at("sweep.csv").c_str(),
              out.names().at("pareto.svg").c_str());
  return 0;
}

}  // namespace entgraph::cli
