#!/usr/bin/env python3
"""Ratios from a GPU check (tools/gpu_check.sh): fused entmax vs fused softmax,
fused vs cuBLAS, graph vs dense attention, GPU vs CPU transforms. Markdown.

    python3 tools/gpu_report.py gpu-check/
"""
import json
import re
import sys
from pathlib import Path


def times(path):
    """name (without /manual_time or /real_time) -> benchmark entry."""
    out = {}
    for b in json.loads(Path(path).read_text())["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b:
            continue
        out[re.sub(r"/(manual|real)_time$", "", b["name"])] = b
    return out


def ms(b):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b["real_time"] * scale


def main():
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-check")
    gpu = times(folder / "cuda_bench.json")
    cpu = times(folder / "cpu_bench.json") if (folder / "cpu_bench.json").exists() else {}

    print("| n | d | causal | fused softmax ms | fused entmax15 ms | entmax15 / softmax | cuBLAS softmax ms | cuBLAS entmax15 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for key, s in gpu.items():
        m = re.fullmatch(r"cuda_attention/fused/softmax/n:(\d+)/d:(\d+)/causal:(\d)", key)
        e = gpu.get(key.replace("/softmax/", "/entmax15/"))
        if not m or not e:
            continue
        n, d, causal = m.groups()
        cs = gpu.get(f"cuda_attention/cublas/softmax/n:{n}/d:{d}")
        ce = gpu.get(f"cuda_attention/cublas/entmax15/n:{n}/d:{d}")
        cub = (f"{ms(cs):.3f} | {ms(ce):.3f}" if cs and ce and causal == "0" else "- | -")
        print(f"| {n} | {d} | {causal} | {ms(s):.3f} | {ms(e):.3f} | {ms(e) / ms(s):.2f} | {cub} |")

    print("\n| graph | sparsity | n | graph ms | dense fused entmax15 ms | speed-up | dense fused softmax ms |")
    print("|---|---|---|---|---|---|---|")
    for key, g in gpu.items():
        m = re.fullmatch(r"cuda_attention/graph/(\w+)/sparsity:([\d.]+)/n:(\d+)/d:64", key)
        if not m:
            continue
        pattern, sparsity, n = m.groups()
        e = gpu.get(f"cuda_attention/fused/entmax15/n:{n}/d:64/causal:0")
        s = gpu.get(f"cuda_attention/fused/softmax/n:{n}/d:64/causal:0")
        if e and s:
            print(f"| {pattern} | {sparsity} | {n} | {ms(g):.3f} | {ms(e):.3f} | {ms(e) / ms(g):.1f}x | {ms(s):.3f} |")

    if cpu:
        threads = max(int(m.group(1)) for k in cpu if (m := re.search(r"/threads:(\d+)$", k)))
        # The GPU and CPU benchmarks take their names from the same case list
        # (tests/support/cases.hpp, tag kBenchCuda).
        names = {g: g for g in ("softmax", "sparsemax", "entmax15", "entmax_alpha1.25", "entmax_alpha1.75",
                                "entmax_alpha3", "topk_softmax_k8")}
        print(f"\n| transform | n | pass | GPU M rows/s | CPU 1 thread | CPU {threads} threads | GPU / CPU {threads} threads |")
        print("|---|---|---|---|---|---|---|")
        for direction in ("forward", "backward"):
            for g_name, c_name in names.items():  # noqa: B007 (identical by construction)
                for n in (512, 4096):
                    gb = gpu.get(f"cuda_transform_{direction}/{g_name}/n:{n}")
                    c1 = cpu.get(f"BM_{direction}/{c_name}/n:{n}/threads:1")
                    ct = cpu.get(f"BM_{direction}/{c_name}/n:{n}/threads:{threads}")
                    if not (gb and c1 and ct):
                        continue
                    g_rows, r1, rt = gb["rows/s"], c1["items_per_second"] / n, ct["items_per_second"] / n
                    print(f"| {g_name} | {n} | {direction} | {g_rows / 1e6:.1f} | {r1 / 1e6:.2f} | {rt / 1e6:.2f} | {g_rows / rt:.0f}x |")


if __name__ == "__main__":
    main()
