#!/usr/bin/env python3
"""entgraph's k-means against scikit-learn's KMeans, one thread, in one run.

Generates a point set (a mixture of --components Gaussians, --n x --dim
float32, fixed --seed), writes it to OUT/points.npy, runs
native/bench/bench_kmeans.cpp (entgraph::kmeans: k-means++, --restarts
restarts) and scikit-learn's KMeans(algorithm="lloyd", init="k-means++",
n_init=--restarts, tol=1e-4, max_iter=300) on it at each k, and prints a
Markdown table: median seconds of --reps calls each, the speed-up
(scikit-learn / entgraph), inertia and iterations of the kept restart.

Both inertias are recomputed here the same way, in float64 from each
library's float32 centroids (every point to its nearest centroid), because
scikit-learn accumulates its own inertia_ in float32 for float32 input.

Usage (make bench-kmeans does this after building the release preset):
  /usr/bin/python3 native/bench/kmeans_vs_sklearn.py \
      [--bin build/release/native/bench/entgraph_bench_kmeans] [--out build/bench-kmeans]
      [--k 4,8,16] [--restarts 10] [--reps 3] [--n 100000] [--dim 4] [--components 16] [--seed 0]
Needs NumPy and scikit-learn (Debian: python3-sklearn).
"""
import os

# One thread everywhere, set before NumPy and scikit-learn load their
# OpenMP and BLAS runtimes (and inherited by the entgraph process).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ENTGRAPH_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def make_points(n, dim, components, seed):
    """A mixture of Gaussians: centres uniform in [-10, 10]^dim, standard
    deviations uniform in [0.5, 1.5], mixture weights from Dirichlet(5)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10.0, 10.0, size=(components, dim))
    scales = rng.uniform(0.5, 1.5, size=components)
    weights = rng.dirichlet(np.full(components, 5.0))
    labels = rng.choice(components, size=n, p=weights)
    points = centres[labels] + rng.standard_normal((n, dim)) * scales[labels, None]
    return points.astype(np.float32)


def inertia(points, centroids):
    """Sum over points of the squared distance to the nearest centroid, float64."""
    x = points.astype(np.float64)
    c = np.asarray(centroids, dtype=np.float64)
    total = 0.0
    for begin in range(0, len(x), 16384):
        block = x[begin:begin + 16384]
        d = ((block[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
        total += float(d.min(axis=1).sum())
    return total


def time_sklearn(points, k, restarts, seed, reps):
    from sklearn.cluster import KMeans
    times, model = [], None
    for _ in range(reps):
        start = time.perf_counter()
        model = KMeans(n_clusters=k, init="k-means++", n_init=restarts, algorithm="lloyd", tol=1e-4,
                       max_iter=300, random_state=seed).fit(points)
        times.append(time.perf_counter() - start)
    return statistics.median(times), model.cluster_centers_, int(model.n_iter_)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/release/native/bench/entgraph_bench_kmeans")
    ap.add_argument("--out", default="build/bench-kmeans")
    ap.add_argument("--k", default="4,8,16")
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--components", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import sklearn
    os.makedirs(args.out, exist_ok=True)
    points = make_points(args.n, args.dim, args.components, args.seed)
    path = os.path.join(args.out, "points.npy")
    np.save(path, points)

    run = subprocess.run([args.bin, path, "--k", args.k, "--restarts", str(args.restarts), "--iterations", "300",
                          "--seed", str(args.seed), "--reps", str(args.reps), "--centroids", args.out],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{args.bin} failed (exit {run.returncode}): {run.stderr.strip()}")
    ours = {r["k"]: r for r in map(json.loads, run.stdout.splitlines())}

    print(f"{args.n} x {args.dim} float32 points, mixture of {args.components} Gaussians (seed {args.seed}); "
          f"k-means++, {args.restarts} restarts, one thread; median of {args.reps} calls; "
          f"scikit-learn {sklearn.__version__}, NumPy {np.__version__}\n")
    print("| k | entgraph (s) | scikit-learn (s) | speed-up | inertia entgraph | inertia scikit-learn "
          "| inertia ratio | iterations entgraph | iterations scikit-learn |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in (int(v) for v in args.k.split(",")):
        sk_seconds, sk_centroids, sk_iterations = time_sklearn(points, k, args.restarts, args.seed, args.reps)
        ours_inertia = inertia(points, np.load(os.path.join(args.out, f"entgraph_k{k}.npy")))
        sk_inertia = inertia(points, sk_centroids)
        r = ours[k]
        print(f"| {k} | {r['seconds']:.4f} | {sk_seconds:.4f} | {sk_seconds / r['seconds']:.2f}x "
              f"| {ours_inertia:.7g} | {sk_inertia:.7g} | {ours_inertia / sk_inertia:.6f} "
              f"| {r['iterations']} | {sk_iterations} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
