#!/usr/bin/python3
"""Top-k softmax: entgraph's kernel against a plain PyTorch top-k softmax
(torch.topk for the k-th value, then a masked softmax), on the same shapes, one
thread each, in one run. Float32 N(0, 1) scores, 2^20 of them per call (the
benchmark's rows x n); the best of several timed calls on each side.

    /usr/bin/python3 tools/torch_topk.py [--bench build/release/native/bench/entgraph_bench]

Needs Debian's python3-torch (apt-get install python3-torch), which installs for /usr/bin/python3.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time

ELEMENTS = 1 << 20
SIZES = (512, 4096)


def torch_topk_softmax(torch, z, k):
    kth = torch.topk(z, k, dim=-1).values[:, -1:]
    return torch.softmax(z.masked_fill(z < kth, float("-inf")), dim=-1)


def time_torch(torch, n, k, repeats):
    gen = torch.Generator().manual_seed(42)
    z = torch.randn(ELEMENTS // n, n, generator=gen, dtype=torch.float32)
    torch_topk_softmax(torch, z, k)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch_topk_softmax(torch, z, k)
        best = min(best, time.perf_counter() - start)
    return best


def time_entgraph(bench, repeats):
    """Best real time (s) of each topk benchmark at threads:1, by (n, k-name)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, "--benchmark_filter=BM_forward/(topk_softmax|topk_softmax_k8)/n:(512|4096)/threads:1/",
                        f"--benchmark_repetitions={repeats}", "--benchmark_min_time=0.1",
                        f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        doc = json.load(open(out.name))
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    best = {}
    for b in doc["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        parts = b["run_name"].split("/")
        key = (int(parts[2].split(":")[1]), parts[1])
        best[key] = min(best.get(key, float("inf")), b["real_time"] * scale[b["time_unit"]])
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/release/native/bench/entgraph_bench")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch_topk.py: PyTorch is missing (apt-get install python3-torch)")
    torch.set_num_threads(1)
    ours = time_entgraph(args.bench, args.repeats)
    print(f"PyTorch {torch.__version__}, one thread; entgraph_bench threads:1; {ELEMENTS} scores per call\n")
    print("| n | rows | k | PyTorch ms | entgraph ms | PyTorch / entgraph |")
    print("|---|---|---|---|---|---|")
    slower = 0
    for n in SIZES:
        for name, k in (("topk_softmax_k8", 8), ("topk_softmax", n // 8)):
            t = time_torch(torch, n, k, args.repeats)
            e = ours.get((n, name))
            if e is None:
                print(f"| {n} | {ELEMENTS // n} | {k} | {t * 1e3:.2f} | n/a | n/a |")
                continue
            slower += e >= t
            print(f"| {n} | {ELEMENTS // n} | {k} | {t * 1e3:.2f} | {e * 1e3:.2f} | {t / e:.2f} |")
    print(f"\nentgraph faster in {4 - slower} of 4 shapes")


if __name__ == "__main__":
    main()
