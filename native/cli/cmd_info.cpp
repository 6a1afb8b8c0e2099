// entgraph info: what is in a .npy file (for people, and for the CLI tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/io/npy.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph info FILE.npy...\n"
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

}  // namespace

int run_info(const std::vector<std::string>& argv) {
  const Args args("info", argv, {});
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.positional().empty()) throw args.error("expected at least one FILE.npy");
  for (const std::string& path : args.positional()) {
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
