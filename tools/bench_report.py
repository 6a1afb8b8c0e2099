#!/usr/bin/env python3
"""Summarise an entgraph_bench JSON run as markdown tables of ratios.

Usage:
    python3 tools/bench_report.py bench.json [--strict]

Reads the output of
    entgraph_bench --benchmark_out=bench.json --benchmark_out_format=json
and prints:
  1. the performance targets (float32, one thread, all from this one run),
     each PASS or MISS; at n = 512 and 4096:
       entmax15 forward            <= 1.5 x softmax forward
       sparsemax forward           <= 2.5 x softmax forward
       general-alpha entmax fwd    <= 6.0 x softmax forward (every alpha run)
       top-k softmax fwd (k = n/8, k = 8)       <= 2.0 x softmax forward
       constrained softmax / sparsemax fwd      <= 5.0 x softmax forward
       general-alpha bwd with grad_alpha        <= 3.0 x softmax forward
       every backward              <= 2.0 x its own forward
     (BM_backward, without the optional parameter gradients, except the
     grad_alpha target above), and at n = 64 (short rows):
       general-alpha entmax fwd    <= 4.0 x softmax forward
       entmax15 forward            <= 2.5 x softmax forward
  2. every transform's forward and backward time as a ratio to the softmax
     forward of the same n and thread count, one table per thread count;
  3. backward / own forward, and the speed-up from one thread to all;
  4. dense attention: entmax15 and sparsemax against softmax, backward against
     forward;
  5. the per-ISA benchmarks, in ns per element and speed-up over `reference`.

Times are wall-clock (`real_time`; --time cpu uses `cpu_time`). With --benchmark_repetitions the median of
the repetitions is used. --strict makes the exit status 1 when a target is
missed. Python standard library only.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
TARGET_SIZES = (512, 4096)
SHORT_ROWS = 64
TARGET_THREADS = 1
# Suffixes Google Benchmark itself may append to a name; not part of the key.
GB_SUFFIXES = {"repeats", "min_time", "min_warmup_time", "iterations"}


def parse_name(run_name):
    """'BM_forward/entmax15/n:4096/threads:1/real_time' -> (family, transform, params)."""
    parts = run_name.split("/")
    family = parts[0]
    transform = parts[1] if len(parts) > 1 else ""
    params = {}
    for p in parts[2:]:
        if ":" in p:
            key, value = p.split(":", 1)
            if key not in GB_SUFFIXES:
                params[key] = value
    return family, transform, params


def as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


class Run:
    """Median wall time (ns) of each benchmark, indexed by its parsed name."""

    def __init__(self, doc, time_field="real_time"):
        self.context = doc.get("context", {})
        samples = defaultdict(list)  # run_name -> [ns] from iteration entries
        medians = {}  # run_name -> ns from a 'median' aggregate
        self.errors = {}
        self.elements = {}
        self.info = {}  # run_name -> (family, transform, params)
        for b in doc.get("benchmarks", []):
            name = b.get("run_name", b.get("name", ""))
            self.info[name] = parse_name(name)
            if b.get("error_occurred"):
                self.errors[name] = b.get("error_message", "error")
                continue
            if time_field not in b:
                continue
            ns = float(b[time_field]) * UNIT_NS.get(b.get("time_unit", "ns"), 1.0)
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    medians[name] = ns
            else:
                samples[name].append(ns)
        self.time = {}  # (family, transform, frozenset(params)) -> ns
        for name in self.info:
            if name in samples:
                ns = statistics.median(samples[name])
            elif name in medians:
                ns = medians[name]
            else:
                continue
            family, transform, params = self.info[name]
            self.time[self.key(family, transform, **params)] = ns

    @staticmethod
    def key(family, transform, **params):
        return (family, transform, frozenset((k, str(v)) for k, v in params.items()))

    def get(self, family, transform, **params):
        return self.time.get(self.key(family, transform, **params))

    def values(self, family, param):
        """Distinct values of one name parameter within a family."""
        out = []
        for fam, _, params in self.info.values():
            if fam == family and param in params and as_int(params[param]) not in out:
                out.append(as_int(params[param]))
        if all(isinstance(v, int) for v in out):
            out.sort()
        return out  # strings (ISA names) stay in run order

    def transforms(self, family):
        """Transforms of a family in a fixed order (runs may be interleaved)."""
        seen = {transform for fam, transform, _ in self.info.values() if fam == family}
        return sorted(seen, key=transform_order)


ORDER = ["softmax", "sparsemax", "entmax15", "entmax_alpha", "topk_softmax", "topk_softmax_k8", "adaptive_span",
         "constrained_softmax", "constrained_sparsemax"]


def transform_order(name):
    """Sort key: the order of transforms.hpp, general alphas ascending."""
    for i, prefix in enumerate(ORDER):
        if name == prefix or (prefix == "entmax_alpha" and name.startswith(prefix)):
            alpha = name[len(prefix):] if prefix == "entmax_alpha" else ""
            try:
                return (i, float(alpha) if alpha else 0.0, name)
            except ValueError:
                return (i, 0.0, name)
    return (len(ORDER), 0.0, name)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def targets(run, other=None):
    """Rows of (target, n, ratio, limit, ratio in `other`) for the issue's targets.

    `other` is the same run read with the other time field (a cross-check)."""
    rows = []
    t = TARGET_THREADS
    fwd = run.transforms("BM_forward")
    general = [x for x in fwd if x.startswith("entmax_alpha")]

    def both(num, den):
        r = ratio(run.get(*num[0], **num[1]), run.get(*den[0], **den[1]))
        o = None if other is None else ratio(other.get(*num[0], **num[1]), other.get(*den[0], **den[1]))
        return r, o

    for n in TARGET_SIZES:
        soft = (("BM_forward", "softmax"), {"n": n, "threads": t})
        checks = [("entmax15 fwd / softmax fwd", "entmax15", 1.5), ("sparsemax fwd / softmax fwd", "sparsemax", 2.5)]
        checks += [(f"{g} fwd / softmax fwd", g, 6.0) for g in general]
        checks += [(f"{tr} fwd / softmax fwd", tr, 2.0) for tr in ("topk_softmax", "topk_softmax_k8") if tr in fwd]
        checks += [(f"{tr} fwd / softmax fwd", tr, 5.0) for tr in ("constrained_softmax", "constrained_sparsemax")
                   if tr in fwd]
        for label, tr, limit in checks:
            r, o = both((("BM_forward", tr), {"n": n, "threads": t}), soft)
            rows.append((label, n, r, limit, o))
        for g in general:
            r, o = both((("BM_backward_params", g), {"n": n, "threads": t}), soft)
            if r is not None:
                rows.append((f"{g} bwd + grad_alpha / softmax fwd", n, r, 3.0, o))
    if SHORT_ROWS in run.values("BM_forward", "n"):
        n = SHORT_ROWS
        soft = (("BM_forward", "softmax"), {"n": n, "threads": t})
        for label, tr, limit in [("entmax15 fwd / softmax fwd", "entmax15", 2.5)] + [
                (f"{g} fwd / softmax fwd", g, 4.0) for g in general]:
            r, o = both((("BM_forward", tr), {"n": n, "threads": t}), soft)
            rows.append((label, n, r, limit, o))
    for n in TARGET_SIZES:
        for tr in run.transforms("BM_backward"):
            r, o = both((("BM_backward", tr), {"n": n, "threads": t}), (("BM_forward", tr), {"n": n, "threads": t}))
            rows.append((f"{tr} bwd / {tr} fwd", n, r, 2.0, o))
    return rows


def report(run, out, time_kind="real", other=None):
    ctx = run.context
    w = out.write
    w("## Run\n\n")
    for label, key in [
        ("date", "date"),
        ("git", "git"),
        ("host", "host_name"),
        ("CPUs", "num_cpus"),
        ("MHz", "mhz_per_cpu"),
        ("entgraph ISA", "entgraph_cpu_isa"),
        ("available ISAs", "entgraph_available_isas"),
        ("all threads", "entgraph_threads_all"),
        ("scores", "entgraph_scores"),
        ("elements per iteration", "entgraph_elements_per_iteration"),
    ]:
        if key in ctx:
            w(f"- {label}: {ctx[key]}\n")
    if ctx.get("load_avg"):
        w(f"- load average at start: {', '.join(f'{x:.2f}' for x in ctx['load_avg'])}\n")
    w("\n")

    # 1. Targets.
    rows = []
    misses = 0
    other_kind = "CPU" if time_kind == "real" else "wall"
    for label, n, r, limit, o in targets(run, other):
        if r is None:
            verdict = "n/a"
        elif r <= limit:
            verdict = "PASS"
        else:
            verdict = f"MISS ({r / limit:.2f}x over)"
            misses += 1
        rows.append((label, n, fmt(r), f"<= {limit:g}", verdict, fmt(o)))
    kind = "wall" if time_kind == "real" else "CPU"
    w(f"## Targets (float32, threads:{TARGET_THREADS}, judged on {kind} time)\n\n")
    w(table(["ratio", "n", "measured", "target", "result", f"{other_kind}-time ratio (cross-check)"], rows) + "\n\n")
    w(f"{sum(1 for r in rows if r[4] == 'PASS')} PASS, {misses} MISS\n\n")

    # 2. Ratio to softmax forward.
    sizes = run.values("BM_forward", "n")
    threads = run.values("BM_forward", "threads")
    names = run.transforms("BM_forward")
    elements = float(ctx.get("entgraph_elements_per_iteration", 1 << 20))
    for t in threads:
        w(f"## Transforms: time / softmax forward (same n, threads:{t})\n\n")
        header = ["transform", "dir"] + [f"n={n}" for n in sizes]
        rows = [["softmax fwd, ns/element", ""] + [
            fmt(None if run.get("BM_forward", "softmax", n=n, threads=t) is None else
                run.get("BM_forward", "softmax", n=n, threads=t) / elements, 3) for n in sizes]]
        for tr in names:
            for fam, d in (("BM_forward", "fwd"), ("BM_backward", "bwd"), ("BM_backward_params", "bwd+param grad")):
                if fam == "BM_backward_params" and tr not in run.transforms(fam):
                    continue
                rows.append([tr, d] + [
                    fmt(ratio(run.get(fam, tr, n=n, threads=t), run.get("BM_forward", "softmax", n=n, threads=t)))
                    for n in sizes])
        w(table(header, rows) + "\n\n")

    # 3. Backward / forward, and thread scaling.
    for t in threads:
        w(f"## Backward / own forward (threads:{t})\n\n")
        rows = []
        for tr in names:
            rows.append([tr] + [fmt(ratio(run.get("BM_backward", tr, n=n, threads=t),
                                          run.get("BM_forward", tr, n=n, threads=t))) for n in sizes])
            if tr in run.transforms("BM_backward_params"):
                rows.append([f"{tr} (+param grad)"] + [fmt(ratio(run.get("BM_backward_params", tr, n=n, threads=t),
                                                                 run.get("BM_forward", tr, n=n, threads=t)))
                                                       for n in sizes])
        w(table(["transform"] + [f"n={n}" for n in sizes], rows) + "\n\n")
    if len(threads) > 1:
        t_all = threads[-1]
        w(f"## Speed-up, threads:{t_all} over threads:1 (forward / backward)\n\n")
        rows = []
        for tr in names:
            cells = []
            for n in sizes:
                f = ratio(run.get("BM_forward", tr, n=n, threads=1), run.get("BM_forward", tr, n=n, threads=t_all))
                b = ratio(run.get("BM_backward", tr, n=n, threads=1), run.get("BM_backward", tr, n=n, threads=t_all))
                cells.append(f"{fmt(f)} / {fmt(b)}")
            rows.append([tr] + cells)
        w(table(["transform"] + [f"n={n}" for n in sizes], rows) + "\n\n")

    # 4. Attention.
    att_sizes = run.values("BM_attention_forward", "n")
    if att_sizes:
        att_threads = run.values("BM_attention_forward", "threads")
        dims = run.values("BM_attention_forward", "d")
        d = dims[0] if dims else 64
        w(f"## Dense attention (n = m, d = {d})\n\n")
        header = ["n", "threads", "softmax fwd ms", "softmax fwd GFLOP/s", "softmax bwd ms",
                  "entmax15 fwd / softmax fwd", "sparsemax fwd / softmax fwd",
                  "entmax15 bwd / softmax bwd", "sparsemax bwd / softmax bwd",
                  "softmax bwd/fwd", "entmax15 bwd/fwd", "sparsemax bwd/fwd"]
        rows = []
        for n in att_sizes:
            for t in att_threads:
                def g(fam, tr):
                    return run.get(fam, tr, n=n, d=d, threads=t)
                sf, sb = g("BM_attention_forward", "softmax"), g("BM_attention_backward", "softmax")
                ef, eb = g("BM_attention_forward", "entmax15"), g("BM_attention_backward", "entmax15")
                pf, pb = g("BM_attention_forward", "sparsemax"), g("BM_attention_backward", "sparsemax")
                gflops = None if sf is None else 4.0 * n * n * d / sf  # flop per ns = GFLOP/s
                rows.append([n, t, fmt(None if sf is None else sf / 1e6, 1), fmt(gflops, 0),
                             fmt(None if sb is None else sb / 1e6, 1),
                             fmt(ratio(ef, sf)), fmt(ratio(pf, sf)), fmt(ratio(eb, sb)), fmt(ratio(pb, sb)),
                             fmt(ratio(sb, sf)), fmt(ratio(eb, ef)), fmt(ratio(pb, pf))])
        w(table(header, rows) + "\n\n")

    # 5. Per-ISA.
    isas = run.values("BM_isa_forward", "isa")
    known = ctx.get("entgraph_available_isas", "reference,sse2,avx2,avx512,simd128").split(",")
    isas.sort(key=lambda i: known.index(i) if i in known else len(known))
    elements = float(ctx.get("entgraph_elements_per_iteration", 1 << 20))
    if isas:
        n_isa = run.values("BM_isa_forward", "n")
        n = n_isa[0] if n_isa else 4096
        w(f"## Per ISA (n={n}, threads:1): ns per element (speed-up over reference)\n\n")
        rows = []
        for tr in run.transforms("BM_isa_forward"):
            for fam, dname in (("BM_isa_forward", "fwd"), ("BM_isa_backward", "bwd")):
                ref = run.get(fam, tr, n=n, isa="reference", threads=1)
                cells = []
                for isa in isas:
                    ns = run.get(fam, tr, n=n, isa=isa, threads=1)
                    if ns is None:
                        cells.append("n/a")
                    else:
                        s = ratio(ref, ns)
                        cells.append(f"{ns / elements:.3f}" + ("" if s is None or isa == "reference" else f" ({s:.1f}x)"))
                rows.append([tr, dname] + cells)
        w(table(["transform", "dir"] + list(isas), rows) + "\n\n")

    if run.errors:
        w("## Benchmarks that reported an error\n\n")
        for name, msg in sorted(run.errors.items()):
            w(f"- `{name}`: {msg}\n")
        w("\n")
    return misses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="Google Benchmark JSON output of entgraph_bench")
    ap.add_argument("--strict", action="store_true", help="exit with status 1 if a target is missed")
    ap.add_argument("--time", choices=("real", "cpu"), default="real",
                    help="wall time (default) or the benchmark thread's CPU time; CPU time undercounts "
                         "multi-threaded runs and is only meaningful at threads:1")
    args = ap.parse_args(argv)
    with open(args.json, encoding="utf-8") as f:
        doc = json.load(f)
    other_kind = "cpu" if args.time == "real" else "real"
    misses = report(Run(doc, args.time + "_time"), sys.stdout, args.time, Run(doc, other_kind + "_time"))
    return 1 if (args.strict and misses) else 0


if __name__ == "__main__":
    sys.exit(main())
