#!/usr/bin/env python3
"""How much of a head's gold graph a sub-quadratic lowrank-threshold could keep
(issue 31, item 2): the predictor's estimate (--bits codes of its fitted
projections) is cut by each row's threshold, but only keys in the row's kept
groups are estimated. Groups are 64-key blocks ranked by a block summary
(the oracle: the block's largest estimate; its centroid's score; centroid +
radius), or k-means clusters of the key codes ranked by their centroid's
score; or the keys that similar queries keep: every E-th query's estimated
row is cut over all keys at its threshold lowered by `drop` (in units of the
estimate, whose candidates lie within 1/(alpha - 1) = 2 of the row's
maximum), and a query estimates only the keys kept by its m most similar
representatives (cosine of the codes). Prints recall against the gold graph, sparsity, and the share of
allowed keys estimated. Causal 1.5-entmax heads, one sequence.

  tools/subquadratic_probe.py CAPTURE_DIR PARAMS.json [--heads 1,1 2,3] [--stride 5] [--bits 6]

CAPTURE_DIR from `entgraph capture`, PARAMS.json from `entgraph fit --method
lowrank-threshold`. Needs numpy; rows are subsampled by --stride."""
import argparse, json
import numpy as np


def codes(x, bits=4):
    levels = 2 ** (bits - 1) - 1
    step = np.abs(x).max(1, keepdims=True) / levels
    step[step == 0] = 1
    return np.round(x / step) * step


def theta15(scores, mask):
    """Per row, the 1.5-entmax threshold in score units (bisection, 50 steps)."""
    s = np.where(mask, scores, -np.inf)
    top = s.max(1, keepdims=True)
    with np.errstate(invalid="ignore"):  # a row that keeps no key: -inf - -inf, and no edge
        x = 0.5 * (s - top)
    lo, hi = np.full(top.shape, -1.0), np.zeros(top.shape)
    for _ in range(50):
        mid = (lo + hi) / 2
        above = (np.maximum(x - mid, 0) ** 2).sum(1, keepdims=True) > 1
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return (top + lo / 0.5)[:, 0]


def kmeans(x, clusters, rng, iterations=12):
    c = x[rng.choice(len(x), clusters, replace=False)].copy()
    for _ in range(iterations + 1):
        a = ((x ** 2).sum(1)[:, None] - 2 * x @ c.T + (c ** 2).sum(1)[None, :]).argmin(1)
        for j in range(clusters):
            if (a == j).any():
                c[j] = x[a == j].mean(0)
    return c, a


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture")
    ap.add_argument("params")
    ap.add_argument("--heads", nargs="*", default=["1,1", "2,3"])
    ap.add_argument("--stride", type=int, default=5)
    # The predictor's default since 2026-11-30; the probes in docs/PERFORMANCE.md ran at 4.
    ap.add_argument("--bits", type=int, default=6)
    a = ap.parse_args()
    cap = json.load(open(f"{a.capture}/capture.json"))
    queries, keys = np.load(f"{a.capture}/queries.npy"), np.load(f"{a.capture}/keys.npy")
    params = json.load(open(a.params))["parameters"]
    n, block = queries.shape[2], 64
    rows = np.arange(7, n, a.stride)  # off every representative's position (multiples of 8)
    mask = np.arange(n)[None, :] <= rows[:, None]
    allowed = mask.sum()
    rng = np.random.default_rng(0)
    for spec in a.heads:
        layer, head = map(int, spec.split(","))
        q, k = queries[layer, head].astype(np.float64), keys[layer, head].astype(np.float64)
        s = cap["scale"] * (q[rows] @ k.T)
        gold = (s > theta15(s, mask)[:, None]) & mask
        qp = codes(q @ np.array(params["wq"][layer][head]), a.bits)
        kp = codes(k @ np.array(params["wk"][layer][head]), a.bits)
        est = qp[rows] @ kp.T

        def report(name, kept):
            kept = kept & mask
            pred = (est > theta15(est, kept)[:, None]) & kept
            print(f"L{layer}H{head} {name:28s} recall {(pred & gold).sum() / gold.sum():.3f}"
                  f"  sparsity {1 - pred.sum() / allowed:.4f}  keys estimated {kept.sum() / allowed:.3f}")

        print(f"L{layer}H{head} gold sparsity {1 - gold.sum() / allowed:.4f}")
        report("every key (lowrank-threshold)", mask)
        blocks = n // block
        kb = kp[: blocks * block].reshape(blocks, block, -1)
        centre = kb.mean(1)
        radius = np.sqrt(((kb - centre[:, None, :]) ** 2).sum(2)).max(1)
        summaries = {
            "oracle": np.where(mask, est, -np.inf)[:, : blocks * block].reshape(len(rows), blocks, block).max(2),
            "centroid": qp[rows] @ centre.T,
            "centroid+radius": qp[rows] @ centre.T + np.linalg.norm(qp[rows], axis=1)[:, None] * radius[None, :],
        }
        own = rows // block
        for name, score in summaries.items():
            for keep in (4, 8, 16):
                sc = np.where(np.arange(blocks)[None, :] <= own[:, None], score, -np.inf)
                sc[np.arange(len(rows)), own] = np.inf  # the query's own block always
                kept = np.zeros((len(rows), blocks), bool)
                np.put_along_axis(kept, np.argsort(-sc, 1)[:, :keep], True, 1)
                report(f"blocks {name} top {keep}", np.repeat(kept, block, 1))
        for clusters in (64, 256):
            centres, assign = kmeans(kp, clusters, rng)
            for share in (0.1, 0.2):
                keep = max(1, int(share * clusters))
                kept = np.zeros((len(rows), clusters), bool)
                np.put_along_axis(kept, np.argsort(-(qp[rows] @ centres.T), 1)[:, :keep], True, 1)
                local = np.arange(n)[None, :] > rows[:, None] - 64
                report(f"k-means {clusters} top {share:.0%} + 64", kept[:, assign] | local)
        # Fine clusters, ranked by the oracle (a cluster's largest estimate for
        # the row: do the clusters hold the support?) and by summaries a
        # sub-quadratic predictor could use (centroid, centroid + radius, box,
        # centroid + twice the scores' deviation in the cluster).
        clusters = 1024
        centres, assign = kmeans(kp, clusters, rng)
        est_visible = np.where(mask, est, -np.inf)
        oracle = np.full((len(rows), clusters), -np.inf)
        lo = np.full((clusters, kp.shape[1]), np.inf)
        hi = np.full((clusters, kp.shape[1]), -np.inf)
        radius = np.zeros(clusters)
        spread = np.zeros((clusters, kp.shape[1], kp.shape[1]))  # each cluster's covariance
        for c in range(clusters):
            members = np.where(assign == c)[0]
            if len(members):
                oracle[:, c] = est_visible[:, members].max(1)
                lo[c], hi[c] = kp[members].min(0), kp[members].max(0)
                radius[c] = np.linalg.norm(kp[members] - centres[c], axis=1).max()
                centred = kp[members] - centres[c]
                spread[c] = centred.T @ centred / len(members)
        qr = qp[rows]
        # The spread of a cluster's scores along the query, sqrt(q' S q): r^2
        # multiply-adds a cluster, so not cheap, but it shows what the
        # centroid misses.
        deviation = np.sqrt(np.maximum(np.einsum("rd,cde,re->rc", qr, spread, qr), 0.0))
        rankings = {
            "oracle": oracle,
            "centroid": qr @ centres.T,
            "centroid+radius": qr @ centres.T + np.linalg.norm(qr, axis=1)[:, None] * radius[None, :],
            "box": np.maximum(qr[:, None, :] * lo[None], qr[:, None, :] * hi[None]).sum(2),
            "centroid+2 deviations": qr @ centres.T + 2.0 * deviation,
        }
        local = np.arange(n)[None, :] > rows[:, None] - 64
        for name, score in rankings.items():
            for share in (0.05, 0.1):
                kept = np.zeros((len(rows), clusters), bool)
                np.put_along_axis(kept, np.argsort(-score, 1)[:, : int(share * clusters)], True, 1)
                report(f"k-means {clusters} {name} top {share:.0%} + 64", kept[:, assign] | local)
        unit = qp / np.maximum(np.linalg.norm(qp, axis=1, keepdims=True), 1e-12)
        for every in (8, 32):
            reps = np.arange(0, n, every)
            rep_est = qp[reps] @ kp.T
            rep_theta = theta15(rep_est, np.ones(rep_est.shape, bool))
            near = np.argsort(-(unit[rows] @ unit[reps].T), 1)
            for drop in (0.5, 1.0, 1.5):
                keeps = rep_est > (rep_theta - drop)[:, None]
                for m in (1, 2, 4):
                    kept = np.zeros((len(rows), n), bool)
                    for j in range(m):
                        kept |= keeps[near[:, j]]
                    report(f"reps 1/{every} drop {drop} nearest {m}", kept)


if __name__ == "__main__":
    main()
