#!/usr/bin/env python3
"""Markdown tables of `entgraph sweep` results (sweep.json), for docs/RESULTS.md.

    python3 tools/results_table.py NAME=DIR/sweep.json [NAME=DIR/sweep.json ...]

Per method: recall of its Pareto frontier at the gold sparsity and at
sparsities 0.90 and 0.95 (linear interpolation between frontier points, as
`entgraph sweep` prints), the gain over the window baseline at the gold
sparsity, the frontier point closest to the gold sparsity from above, and the
seconds of the method's longest fit (all heads; sweeps refit the other grid
values from the first fit, docs/PREDICTORS.md); then, on sparsities 0.50..0.99 that both reach, how often
and by how much each method's frontier is above the window's. Standard library only.
"""
import json
import sys


def frontier(points):
    pts = sorted(points, key=lambda p: (-p["sparsity"], -p["recall"]))
    out, best = [], -1.0
    for p in pts:
        if p["recall"] > best:
            out.append(p)
            best = p["recall"]
    return out[::-1]  # ascending sparsity


def recall_at(front, s):
    if not front or front[-1]["sparsity"] < s:
        return None
    for i, hi in enumerate(front):
        if hi["sparsity"] < s:
            continue
        if i == 0 or hi["sparsity"] == s:
            return hi["recall"]
        lo = front[i - 1]
        t = (s - lo["sparsity"]) / (hi["sparsity"] - lo["sparsity"])
        return lo["recall"] + t * (hi["recall"] - lo["recall"])
    return None


def cell(recall):
    return "—" if recall is None else f"{recall:.3f}"


def point_name(p):
    name = f'{p["parameter"]}={p["value"]}' if p["parameter"] else ""
    if p["window"] >= 0:
        name += f' w={p["window"]}'
    return name.strip()


def table(name, path):
    with open(path) as f:
        sweep = json.load(f)
    gold = sweep["gold_sparsity"]
    methods = []
    for p in sweep["points"]:
        if p["method"] not in methods:
            methods.append(p["method"])
    fronts = {m: frontier([p for p in sweep["points"] if p["method"] == m]) for m in methods}
    base = recall_at(fronts.get("window", []), gold)
    print(f"### {name}: gold sparsity {gold:.4f}\n")
    print("| method | recall at gold sparsity | vs window | at 0.90 | at 0.95 | frontier point nearest above | fit s |")
    print("|---|---|---|---|---|---|---|")
    for m in methods:
        r = recall_at(fronts[m], gold)
        above = [p for p in fronts[m] if p["sparsity"] >= gold]
        near = f'{point_name(above[0])}: {above[0]["sparsity"]:.3f} / {above[0]["recall"]:.3f}' if above else "—"
        gain = "" if r is None or base is None or m == "window" else f"{r - base:+.3f}"
        fit = max(p["fit_seconds"] for p in sweep["points"] if p["method"] == m)
        at90, at95 = (cell(recall_at(fronts[m], s)) for s in (0.90, 0.95))
        print(f"| {m} | {cell(r)} | {gain} | {at90} | {at95} | {near} | {fit:.2f} |")
    print()
    # Where each method's frontier is above the window's, on a grid of
    # sparsities both reach.
    if "window" in fronts:
        print("| method | sparsities compared | frontier above window's | largest gain | largest loss |")
        print("|---|---|---|---|---|")
        for m in methods:
            if m == "window":
                continue
            diffs = []
            for i in range(50, 100):
                s = i / 100
                a, w = recall_at(fronts[m], s), recall_at(fronts["window"], s)
                if a is not None and w is not None:
                    diffs.append((s, a - w))
            if not diffs:
                print(f"| {m} | none | | | |")
                continue
            above = sum(1 for _, d in diffs if d > 0)
            print(f"| {m} | {diffs[0][0]:.2f}–{diffs[-1][0]:.2f} | {above} of {len(diffs)} | "
                  f"{max(d for _, d in diffs):+.3f} | {min(d for _, d in diffs):+.3f} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        table(name, path)
