// entgraph fit / eval / sweep: fit a graph predictor on a capture, evaluate a
// parameter file on a capture, and sweep every method into Pareto curves.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"
#include "io/binary.hpp"

namespace entgraph::cli {
namespace {

void write_text(const std::string& path, const std::string& text, const char* command) {
  detail::write_file_bytes(command, path, text.data(), text.size());
}

std::string read_text(const std::string& path, const char* command) {
  const std::vector<unsigned char> bytes = detail::read_file_bytes(command, path, std::size_t{1} << 30);
  return std::string(bytes.begin(), bytes.end());
}

std::string method_list() {
  std::string list;
  for (const std::string& m : predictor_methods()) list += (list.empty() ? "" : ", ") + m;
  return list;
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
        method_list().c_str(), kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"capture", "method", "out"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  std::unique_ptr<Predictor> p = make_predictor(*args.get("method"), settings);
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
  const std::unique_ptr<Predictor> p = load_predictor(read_text(*args.get("params"), "eval"), *args.get("params"));
  const Capture capture = read_capture(*args.get("capture"));
  const std::string report = eval_report_json(evaluate(*p, capture), *p) + "\n";
  if (args.has("out"))
    write_text(*args.get("out"), report, "eval");
  else
    std::printf("%s", report.c_str());
  return 0;
}

int run_sweep(const std::vector<std::string>& raw) {
  std::vector<std::string> argv = raw;
  const PredictorSettings settings = take_settings(argv, "sweep");
  const Args args("sweep", argv, {{"train", true}, {"test", true}, {"out", true}, {"methods", true},
                                  {"global", true}, {"no-window", false}, {"quiet", false}, {"save-params", true}, kIsaOption,
                                  kThreadsOption});
  if (args.help()) {
    std::printf(
        "Usage: entgraph sweep --train DIR --test DIR --out OUTDIR [options]\n"
        "\n"
        "Runs every method over its grid (the Sparsefinder paper's, docs/PREDICTORS.md),\n"
        "each point unioned with a window of size {0, 1, 3, ..., 27}, fitted on --train\n"
        "and evaluated on --test. Writes OUTDIR/sweep.json, sweep.csv and pareto.svg,\n"
        "and prints each method's Pareto frontier.\n"
        "\n"
        "Options:\n"
        "  --methods A,B,...  only these methods (default: all: %s)\n"
        "  --set key=value    a setting for every method that accepts it (e.g. r=8, seed=1)\n"
        "  --global G         first G tokens global in every point (default 0)\n"
        "  --no-window        no union window\n"
        "  --save-params DIR  also write each fitted predictor's parameter file,\n"
        "                     DIR/METHOD.json or DIR/METHOD-PARAMETER-VALUE.json\n"
        "  --quiet            no progress lines\n%s",
        method_list().c_str(), kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "");
  for (const char* required : {"train", "test", "out"})
    if (!args.has(required)) throw args.error(std::string("--") + required + " is required");
  apply_runtime_options(args);
  std::vector<std::string> methods;
  if (args.has("methods")) {
    std::string list = *args.get("methods");
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) methods.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
    if (methods.empty()) throw args.error("--methods: no method named");
  } else {
    methods = predictor_methods();
  }
  const Capture train = read_capture(*args.get("train"));
  const Capture test = read_capture(*args.get("test"));
  SweepOptions options;
  options.global = static_cast<std::size_t>(args.integer("global").value_or(0));
  if (args.has("no-window")) options.windows = {-1};
  options.fit.quiet = args.has("quiet");

  if (args.has("save-params")) {
    const std::filesystem::path dir(*args.get("save-params"));
    std::error_code mkdir_error;
    std::filesystem::create_directories(dir, mkdir_error);
    if (mkdir_error)
      throw Error("sweep: --save-params: " + dir.string() + ": cannot create (" + mkdir_error.message() + ")");
    options.on_fitted = [dir](const SweepGrid& grid, const std::string& value, const Predictor& p) {
      const std::string name = grid.parameter.empty() ? grid.method : grid.method + "-" + grid.parameter + "-" + value;
      write_text((dir / (name + ".json")).string(), p.to_json() + "\n", "sweep");
    };
  }

  std::vector<SweepGrid> grids;
  for (const std::string& method : methods) {
    grids.push_back(default_grid(method));  // throws for an unknown method
    // Shared settings apply to the methods that know them.
    for (const auto& [k, v] : settings) {
      try {
        make_predictor(method, {{k, v}});
        grids.back().settings[k] = v;
      } catch (const Error&) {
      }
    }
  }
  const SweepResult sweep = run_sweep(grids, train, test, options);
  const std::vector<SweepPoint>& all = sweep.points;
  const double gold = sweep.gold_sparsity;
  const std::filesystem::path out(*args.get("out"));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error("sweep: --out: " + out.string() + ": cannot create (" + ec.message() + ")");
  write_text((out / "sweep.json").string(), sweep_json(all, gold) + "\n", "sweep");
  write_text((out / "sweep.csv").string(), sweep_csv(all), "sweep");
  write_text((out / "pareto.svg").string(),
             pareto_svg(all, gold, "Sparsity-recall Pareto curves (" + *args.get("test") + ")"), "sweep");

  std::printf("gold sparsity %.4f; Pareto frontier of each method (sparsity -> recall):\n", gold);
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
    const double r = recall_at_sparsity(own, gold);
    if (r >= 0)
      std::printf("  %-26s recall at the gold sparsity: %.4f\n", method.c_str(), r);
    else
      std::printf("  %-26s does not reach the gold sparsity\n", method.c_str());
  }
  std::printf("wrote %s/sweep.json, sweep.csv, pareto.svg\n", out.string().c_str());
  return 0;
}

}  // namespace entgraph::cli
