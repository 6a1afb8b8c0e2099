// entgraph demo: every transform applied to one row of scores, printed as a
// table, so that the sparsity of each is visible at a glance.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "npy_input.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph demo [--in FILE.npy [--row I] | --n N [--seed S]] [--isa NAME] [--threads N]\n"
    "\n"
    "Applies every attention transform to one row of scores and prints a table:\n"
    "per transform, its support (entries with weight > 0), its largest weight,\n"
    "its Shannon entropy (nats) and the weights, with '.' for a weight of exactly 0.\n"
    "The transforms: softmax, sparsemax, 1.5-entmax, alpha-entmax with alpha 1.25 and 3,\n"
    "top-k softmax with k = 3, adaptive span (the row is the query at the last position),\n"
    "and constrained softmax and sparsemax with an upper bound u on every weight.\n"
    "Runs in float32 with the kernels of the active ISA.\n"
    "\n"
    "The row is a built-in one of 10 scores unless one of these is given:\n"
    "  --in FILE.npy      a 2-D float32 or float64 array of scores (e.g. data/sample_scores.npy)\n"
    "  --row I            which row of FILE.npy (default 0)\n"
    "  --n N              N random scores (Gaussian, scale 1.5, rounded to 0.01; N in [1, 100000])\n"
    "  --seed S           seed of the random scores (default 1; implies --n 10 if --n is absent)\n"
    "%s"
    "  -h, --help         show this help\n";

constexpr std::size_t kMaxShown = 16;  // weights printed per line
constexpr double kTwoPi = 6.283185307179586;

// A fixed, unsorted row: big and small scores mixed, so that adaptive span
// (which depends on position) and the others pick visibly different keys.
const std::vector<float> kBuiltinRow = {1.2f, -0.3f, 2.4f, 0.8f, -1.5f, 0.1f, 1.9f, -0.7f, 0.5f, 2.0f};

// Box-Muller on mt19937_64's raw bits: the same numbers on every platform
// (std::normal_distribution is implementation-defined).
std::vector<float> random_row(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  std::vector<float> row(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double g = std::sqrt(-2.0 * std::log(uniform())) * std::cos(kTwoPi * uniform());
    row[i] = static_cast<float>(std::round(150.0 * g) / 100.0);
  }
  return row;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

struct Entry {
  std::string name;
  std::function<void(MatrixView<const float>, MatrixView<float>)> apply;
};

}  // namespace

int run_demo(const std::vector<std::string>& argv) {
  const Args args("demo", argv, {{"in", true}, {"row", true}, {"n", true}, {"seed", true}, kIsaOption, kThreadsOption});
  if (args.help()) {
    std::printf(kUsage, kRuntimeOptionsHelp);
    return 0;
  }
  args.expect_positional(0, "no file arguments (use --in FILE.npy)");
  if (args.has("in") && (args.has("n") || args.has("seed")))
    throw args.error("--in cannot be combined with --n or --seed");
  if (args.has("row") && !args.has("in")) throw args.error("--row needs --in FILE.npy");
  apply_runtime_options(args);

  std::vector<float> scores = kBuiltinRow;
  std::string source = "the built-in row";
  if (const auto in = args.get("in")) {
    const std::uint64_t row = args.integer("row").value_or(0);
    const NpyArray a = read_score_matrix("demo", *in);
    if (row >= a.shape[0])
      throw Error("demo: " + *in + ": --row " + std::to_string(row) + " is out of range (the array has " +
                  std::to_string(a.shape[0]) + " rows)");
    const NpyMatrix<float> m = a.to_matrix<float>();
    const float* r = m.view().row(static_cast<std::size_t>(row));
    scores.assign(r, r + m.cols);
    source = "row " + std::to_string(row) + " of " + *in;
  } else if (args.has("n") || args.has("seed")) {
    const std::uint64_t n = args.integer("n").value_or(10);
    if (n < 1 || n > 100000) throw args.error("--n: must be in [1, 100000] (got " + std::to_string(n) + ")");
    const std::uint64_t seed = args.integer("seed").value_or(1);
    scores = random_row(static_cast<std::size_t>(n), seed);
    source = "random scores, seed " + std::to_string(seed);
  }
  const std::size_t n = scores.size();

  // Adaptive span: the row is the query at the last position; keys farther
  // than span + ramp get exactly 0.
  const float span = static_cast<float>(std::max<std::size_t>(1, n / 3));
  AdaptiveSpan span_shape;
  span_shape.ramp = 2.0;
  span_shape.query_offset = static_cast<std::ptrdiff_t>(n) - 1;
  // Constrained: one bound for every key, loose enough that the bounds of a
  // row sum to at least 1 (else no distribution satisfies them).
  const float bound = static_cast<float>(std::max(0.2, 2.0 / static_cast<double>(n)));
  const std::vector<float> upper(n, std::min(bound, 1.0f));
  const MatrixView<const float> upper_view(upper.data(), 1, n);

  const std::string span_label = "adaptive_span(z=" + format("%g", span) + ",R=2)";
  const std::string bound_label = "(u=" + format("%.3g", upper[0]) + ")";
  const std::vector<Entry> entries = {
      {"softmax", [](auto s, auto p) { softmax<float>(s, p); }},
      {"sparsemax", [](auto s, auto p) { sparsemax<float>(s, p); }},
      {"entmax15", [](auto s, auto p) { entmax15<float>(s, p); }},
      {Transform::entmax(1.25).name(), [](auto s, auto p) { entmax<float>(s, p, 1.25); }},
      {Transform::entmax(3.0).name(), [](auto s, auto p) { entmax<float>(s, p, 3.0); }},
      {Transform::topk_softmax(3).name(), [](auto s, auto p) { topk_softmax<float>(s, p, 3); }},
      {span_label, [&](auto s, auto p) { adaptive_span<float>(s, &span, span_shape, p); }},
      {"constrained_softmax" + bound_label, [&](auto s, auto p) { constrained_softmax<float>(s, upper_view, p); }},
      {"constrained_sparsemax" + bound_label, [&](auto s, auto p) { constrained_sparsemax<float>(s, upper_view, p); }},
  };

  // Everything is computed before anything is printed, so an error (NaN in
  // a file's row) prints only the error.
  const MatrixView<const float> row_view(scores.data(), 1, n);
  std::vector<std::vector<float>> results;
  for (const Entry& e : entries) {
    std::vector<float> probs(n, 0.0f);
    try {
      e.apply(row_view, MatrixView<float>(probs.data(), 1, n));
    } catch (const Error& err) {
      throw Error("demo: " + source + ": " + err.what());
    }
    results.push_back(std::move(probs));
  }

  std::string isas;
  for (CpuIsa isa : available_cpu_isas()) isas += std::string(isas.empty() ? "" : " ") + cpu_isa_name(isa);
  std::printf("entgraph demo: %zu scores from %s\n", n, source.c_str());
  std::printf("isa: %s (available: %s), threads: %zu\n\n", cpu_isa_name(cpu_isa()), isas.c_str(), num_threads());

  std::size_t name_width = 9;
  for (const Entry& e : entries) name_width = std::max(name_width, e.name.size());
  const int nw = static_cast<int>(name_width);
  const std::size_t shown = std::min(n, kMaxShown);
  const char* more = shown < n ? "  ..." : "";

  std::printf("%-*s  support  max p  entropy |", nw, "transform");
  for (std::size_t j = 0; j < shown; ++j) std::printf(" %5s", ("w" + std::to_string(j)).c_str());
  std::printf("%s\n", more);
  std::printf("%-*s  %7s  %5s  %7s |", nw, "scores", "", "", "");
  for (std::size_t j = 0; j < shown; ++j) std::printf(" %5.2f", static_cast<double>(scores[j]));
  std::printf("%s\n", more);

  for (std::size_t t = 0; t < entries.size(); ++t) {
    const std::vector<float>& probs = results[t];
    std::size_t support = 0;
    double max_p = 0.0, entropy = 0.0;
    for (float pf : probs) {
      const double p = pf;
      if (p > 0.0) {
        ++support;
        entropy -= p * std::log(p);
      }
      max_p = std::max(max_p, p);
    }
    const std::string support_text = std::to_string(support) + "/" + std::to_string(n);
    std::printf("%-*s  %7s  %5.3f  %7.3f |", nw, entries[t].name.c_str(), support_text.c_str(), max_p, entropy);
    for (std::size_t j = 0; j < shown; ++j) {
      if (probs[j] == 0.0f) {
        std::printf(" %5s", ".");
      } else {
        std::printf(" %5.2f", static_cast<double>(probs[j]));
      }
    }
    std::printf("%s\n", more);
  }
  std::printf("\n'.' is a weight of exactly 0 (a 0.00 is a small positive weight).");
  if (shown < n) std::printf(" The first %zu of %zu weights are shown.", shown, n);
  std::printf("\nSoftmax never gives exact zeros; sparsemax and entmax (alpha > 1) do, more as alpha grows.\n");
  return 0;
}

}  // namespace entgraph::cli
