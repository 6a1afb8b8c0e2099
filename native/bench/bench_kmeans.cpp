// entgraph_bench_kmeans: times entgraph::kmeans on a point set read from a
// .npy file (float32, n x dim), for native/bench/kmeans_vs_sklearn.py, which
// generates the points and times scikit-learn's KMeans on the same file in
// the same run (docs/PERFORMANCE.md, "k-means against scikit-learn").
//
// One thread. For each k: --reps calls of kmeans(points, {k, --restarts,
// --iterations, --seed, --tolerance}); seconds is the median call (wall
// time of the call only, not of reading the file). Output: one JSON object
// per k, e.g.
//   {"k": 4, "seconds": 0.0123, "inertia": 123456.7, "iterations": 9, "total_iterations": 80, "times": [...]}
// and, with --centroids DIR, the centroids of the last call as
// DIR/entgraph_k<k>.npy (k x dim float32), so that the driver can score both
// libraries' centroids the same way. Usage:
//   entgraph_bench_kmeans POINTS.npy [--k 4,8,16] [--restarts 10] [--iterations 300]
//                         [--tolerance 1e-4] [--seed 0] [--reps 3] [--centroids DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "entgraph/io/npy.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/training/kmeans.hpp"

namespace {

struct Options {
  std::string points;
  std::vector<std::size_t> ks = {4, 8, 16};
  entgraph::KMeansOptions kmeans;
  int reps = 3;
  std::string centroids_dir;
};

Options parse(int argc, char** argv) {
  Options o;
  o.kmeans.restarts = 10;
  o.kmeans.iterations = 300;
  o.kmeans.seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--k") {
      o.ks.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.ks.push_back(std::stoul(item));
    } else if (a == "--restarts") {
      o.kmeans.restarts = std::stoul(value());
    } else if (a == "--iterations") {
      o.kmeans.iterations = std::stoul(value());
    } else if (a == "--tolerance") {
      o.kmeans.tolerance = std::stod(value());
    } else if (a == "--seed") {
      o.kmeans.seed = std::stoull(value());
    } else if (a == "--reps") {
      o.reps = std::max(1, std::stoi(value()));
    } else if (a == "--centroids") {
      o.centroids_dir = value();
    } else if (!a.empty() && a[0] != '-' && o.points.empty()) {
      o.points = a;
    } else {
      throw std::runtime_error("unknown argument '" + a + "'");
    }
  }
  if (o.points.empty()) throw std::runtime_error("usage: entgraph_bench_kmeans POINTS.npy [--k 4,8,16] ...");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    entgraph::set_num_threads(1);
    const entgraph::NpyMatrix<float> points = entgraph::read_npy(opt.points).to_matrix<float>();
    for (std::size_t k : opt.ks) {
      entgraph::KMeansOptions ko = opt.kmeans;
      ko.clusters = k;
      std::vector<double> times;
      entgraph::KMeansResult result;
      for (int r = 0; r < opt.reps; ++r) {
        const auto start = std::chrono::steady_clock::now();
        result = entgraph::kmeans(points.view(), ko);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::vector<double> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      std::printf(
          "{\"k\": %zu, \"seconds\": %.6f, \"inertia\": %.17g, \"iterations\": %zu, \"total_iterations\": %zu, "
          "\"times\": [",
          k, sorted[sorted.size() / 2], result.inertia, result.iterations, result.total_iterations);
      for (std::size_t i = 0; i < times.size(); ++i) std::printf("%s%.6f", i ? ", " : "", times[i]);
      std::printf("]}\n");
      std::fflush(stdout);
      if (!opt.centroids_dir.empty())
        entgraph::write_npy(opt.centroids_dir + "/entgraph_k" + std::to_string(k) + ".npy", result.centroids.data(),
                            {result.clusters, result.dim});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "entgraph_bench_kmeans: %s\n", e.what());
    return 1;
  }
  return 0;
}
