// entgraph info: what is in a .npy file or a capture (for people, and for the
// CLI tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/gold_stats.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph info FILE.npy|CAPTURE_DIR...\n"
    "\n"
    "For a capture folder: its layers, heads, head_dim and sequence lengths,\n"
    "then per head the gold graph (the support of entmax attention, recomputed\n"
    "from Q and K): its sparsity 1 - |G| / allowed pairs (allowed = n(n+1)/2\n"
    "per sequence under the causal mask, n*n otherwise) and the mean number of\n"
    "keys per query, with the edge and allowed-pair counts; then the mean\n"
    "sparsity per layer and over all heads (each head weighs the same) and the\n"
    "total edge count.\n"
    "\n"
    "Prints each file's dtype and shape. For a 2-D array with at least one\n"
    "element it also prints the smallest and largest value, how many values are\n"
    "exactly 0, and the smallest and largest row sum, e.g.\n"
    "  p.npy: float32 (6, 12)\n"
    "    min 0 max 0.8473 zeros 41/72\n"
    "    row sums: min 1 max 1\n"
    "\n"
    "Options:\n"
    "  -h, --help         show this help\n";

void describe_capture(const std::string& dir) {
  const Capture c = read_capture(dir);
  std::printf("%s: capture, %zu layers x %zu heads, head_dim %zu, %zu sequences, %zu tokens%s\n", dir.c_str(),
              c.layers, c.heads, c.head_dim, c.sequences(), c.tokens(), c.has_values() ? ", with values" : "");
  std::string lengths;
  for (std::size_t s = 0; s < c.sequences() && s < 16; ++s) lengths += (s ? " " : "") + std::to_string(c.lengths[s]);
  if (c.sequences() > 16) lengths += " ...";
  std::printf("  lengths: %s\n", lengths.c_str());
  std::printf("  provenance: %s\n", c.provenance.c_str());
  std::printf("  layer head  alpha  causal  scale     gold sparsity   gold edges  allowed pairs  mean support\n");
  double total = 0.0;
  std::vector<double> per_layer(c.layers, 0.0);
  GoldStats all;
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t h = 0; h < c.heads; ++h) {
      const HeadSettings& hs = c.head(l, h);
      const GoldStats g = gold_stats(c, l, h);
      std::printf("  %5zu %4zu  %5.3g  %-6s  %-8.4g  %13.6f  %11zu  %13zu  %12.2f\n", l, h, hs.alpha,
                  hs.causal ? "yes" : "no", hs.scale, g.sparsity(), g.edges, g.allowed, g.mean_support());
      all += g;
      per_layer[l] += g.sparsity() / static_cast<double>(c.heads);
      total += g.sparsity() / static_cast<double>(c.layers * c.heads);
    }
  for (std::size_t l = 0; l < c.layers; ++l) std::printf("  layer %zu: mean gold sparsity %.6f\n", l, per_layer[l]);
  std::printf("  mean gold sparsity %.6f over %zu heads\n", total, c.layers * c.heads);
  std::printf("  gold edges %zu of %zu allowed pairs\n", all.edges, all.allowed);
}

}  // namespace

int run_info(const std::vector<std::string>& argv) {
  const Args args("info", argv, {kIsaOption, kThreadsOption});
  if (args.help()) {
    std::printf("%s%s", kUsage, kRuntimeOptionsHelp);
    return 0;
  }
  apply_runtime_options(args);
  if (args.positional().empty()) throw args.error("expected at least one FILE.npy or CAPTURE_DIR");
  for (const std::string& path : args.positional()) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      describe_capture(path);
      continue;
    }
    const NpyArray a = read_npy(path);
    std::printf("%s: %s %s\n", path.c_str(), npy_dtype_name(a.dtype), npy_shape_string(a.shape).c_str());
    if (a.ndim() != 2 || a.size() == 0) continue;
    const NpyMatrix<double> m = a.to_matrix<double>();
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    double sum_lo = lo, sum_hi = -lo;
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < m.rows; ++i) {
      double sum = 0.0;
      for (std::size_t j = 0; j < m.cols; ++j) {
        const double v = m.data[i * m.cols + j];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        zeros += v == 0.0 ? 1 : 0;
        sum += v;
      }
      sum_lo = std::min(sum_lo, sum);
      sum_hi = std::max(sum_hi, sum);
    }
    std::printf("  min %.6g max %.6g zeros %zu/%zu\n", lo, hi, zeros, m.data.size());
    std::printf("  row sums: min %.6g max %.6g\n", sum_lo, sum_hi);
  }
  return 0;
}

}  // namespace entgraph::cli
