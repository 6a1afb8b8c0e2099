#!/usr/bin/env python3
"""entgraph beside its peers on one GPU, in one run, on the same inputs
(issue 30; docs/CUDA.md, "Side by side with peers").

Forward attention, bf16 and fp16, Q, K, V ~ N(0, 1), scale 1/sqrt(d):
  - torch SDPA softmax (its own kernel choice; the math backend is excluded
    so that no shape silently falls back to an n x n matrix),
  - AdaSplash-2 (adasplash_v2: causal 1.5-entmax) and AdaSplash-1
    (adasplash_v1: non-causal 1.5-entmax), from build/peers (tools/fetch_peers.sh),
  - entgraph softmax and 1.5-entmax (entgraph::cuda::batched_attention_forward
    through libentgraph_cuda_ctypes.so, on the torch tensors, no copies).
For each: ms (CUDA events, median), TFLOP/s (4 B Hq n m d, halved when
causal) beside the chip's bf16 dense peak, and the largest error against
float64 attention on the same 16-bit inputs, relative to the reference's
largest |value|, for the 16-bit output and, where the method offers one,
the float32 output. Results: OUT/peers.json and OUT/peers.md, rewritten
after every shape, so a run cut short keeps what it measured.

Training (--backward: beside the forward; --backward-only: instead of it;
issue 33), per shape, a step of forward then backward for a fixed random
grad_out ~ N(0, 1) in the inputs' dtype:
  - AdaSplash-2 causal / AdaSplash-1 non-causal, and SDPA softmax: the
    forward, then its backward through autograd (torch.autograd.grad, so
    nothing accumulates in .grad between calls),
  - entgraph softmax and 1.5-entmax: the forward above, then
    entgraph::cuda::batched_attention_backward through the same library
    (it recomputes the forward; nothing is saved between the calls).
For each: ms of the step (median), TFLOP/s (3.5x the forward's count:
FlashAttention's convention, five products backward against two forward),
and the largest error of dQ, dK and dV, each relative to its float64
gradient's largest |entry|, for 16-bit gradients and, where the method
offers them, float32 ones. The float64 gradients (the closed form
dS = g (dP - sum(g dP) / sum(g)), g = p for softmax, sqrt(p) for
1.5-entmax) cover every query row of --ref-heads key/value heads and their
query heads (dK and dV need them all). A separate table in the same
peers.json (each shape's "training") and peers.md, with the ratios of
issue 33's target (1.5-entmax forward + backward <= 0.8x AdaSplash-2's).

    tools/fetch_peers.sh                      # AdaSplash into build/peers
    python3 tools/gpu_peers.py --out gpu-check/peers
    python3 tools/gpu_peers.py --quick        # one small shape per mode
    python3 tools/gpu_peers.py --quick --backward-only --causal causal   # a training step
    python3 tools/gpu_peers.py --self-test    # no GPU: the reference, counts, tables

The float64 reference is exact attention on the rounded inputs: scores in
float64 (the products of 16-bit values are exact there), softmax, or
1.5-entmax by sorting each row (its threshold in closed form on the found
support); it runs on the GPU, over a sample of query rows per head
(--ref-rows; 0: all), chunked so its memory stays bounded (--ref-gb).
"""
import argparse
import ctypes
import datetime
import importlib
import importlib.util
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LIB = REPO / "build/release/native/cuda/libentgraph_cuda_ctypes.so"
DEFAULT_PEERS = REPO / "build/peers"

# bf16 dense tensor-core peaks from NVIDIA's datasheets (TFLOP/s, without
# 2:4 sparsity); fp16 is the same on these chips. First match wins.
PEAKS = [
    ("H200 NVL", 835.0, "H200 NVL"),
    ("H200", 989.0, "H200 SXM"),
    ("H100 NVL", 835.0, "H100 NVL"),
    ("H100 PCIe", 756.0, "H100 PCIe"),
    ("H100", 989.0, "H100 SXM"),
    ("A100", 312.0, "A100"),
]


def peak_tflops(device_name):
    """(TFLOP/s, which datasheet entry) for a device name, or (None, None)."""
    for key, value, label in PEAKS:
        if key in device_name:
            return value, label + " bf16 dense"
    return None, None


def attention_flops(batch, heads_q, n, m, d, causal):
    """Dense attention's two products, 2 n m d each per head; half when causal
    (the convention FlashAttention's benchmarks use), whatever the method skips."""
    flops = 4.0 * batch * heads_q * n * m * d
    return flops / 2 if causal else flops


def training_flops(batch, heads_q, n, m, d, causal):
    """A training step (forward, then backward): 3.5 times the forward's
    products (the backward's five n x m x d products against the forward's
    two; FlashAttention's convention), halved when causal as the forward's."""
    return 3.5 * attention_flops(batch, heads_q, n, m, d, causal)


def ref_head_pairs(batch, heads_kv, count):
    """The (sequence, key/value head) pairs the float64 gradients cover:
    `count` of the batch x heads_kv pairs (all when count is 0 or more),
    evenly spread, the last pair always among them (its data lies furthest
    from the tensors' starts)."""
    total = batch * heads_kv
    if count <= 0 or count >= total:
        picks = range(total)
    else:
        picks = sorted({total - 1 - (i * total) // count for i in range(count)})
    return [divmod(i, heads_kv) for i in picks]


def sample_rows(n, count, seed=0):
    """Sorted query rows to check: all of them when count is 0 or >= n; else
    the first and last two (a causal row sees 1 key or all of them), the
    middle, and the rest uniform at random (seeded)."""
    if count <= 0 or count >= n:
        return list(range(n))
    rows = {0, 1, n // 2, n - 2, n - 1}
    rng = random.Random(seed)
    while len(rows) < count:
        rows.add(rng.randrange(n))
    return sorted(rows)[:count] if len(rows) > count else sorted(rows)


# ---------------------------------------------------------------------------
# Array operations the reference needs, for torch (the GPU run, and the
# self-test where torch is installed) and numpy (the self-test elsewhere):
# one reference code path, tested where no GPU is.


class NumpyOps:
    name = "numpy"

    def __init__(self):
        import numpy as np

        self.np = np

    def f64(self, x):
        return self.np.asarray(x, dtype=self.np.float64)

    def index(self, values, like=None):
        return self.np.asarray(values, dtype=self.np.int64)

    def arange(self, stop, like, start=0, dtype="float64"):
        return self.np.arange(start, stop, dtype=getattr(self.np, dtype))

    def zeros(self, shape, like=None):
        return self.np.zeros(shape, dtype=self.np.float64)

    def where(self, cond, x, y):
        return self.np.where(cond, x, y)

    def amax(self, x):
        return self.np.max(x, axis=-1, keepdims=True)

    def rowsum(self, x):
        return self.np.sum(x, axis=-1, keepdims=True)

    def cumsum(self, x):
        return self.np.cumsum(x, axis=-1)

    def sort_desc(self, x):
        return -self.np.sort(-x, axis=-1)

    def clip0(self, x):
        return self.np.maximum(x, 0.0)

    def sqrt(self, x):
        return self.np.sqrt(x)

    def exp(self, x):
        return self.np.exp(x)

    def isfinite(self, x):
        return self.np.isfinite(x)

    def as_f64(self, x):
        return x.astype(self.np.float64)

    def t(self, x):
        return self.np.swapaxes(x, -1, -2)

    def absmax(self, x):
        return float(self.np.max(self.np.abs(x))) if x.size else 0.0

    def item(self, x):
        return float(x)


class TorchOps:
    name = "torch"

    def __init__(self, device="cpu"):
        import torch

        self.torch = torch
        self.device = device

    def f64(self, x):
        return x.to(self.torch.float64) if self.torch.is_tensor(x) else self.torch.tensor(
            x, dtype=self.torch.float64, device=self.device)

    def index(self, values, like=None):
        device = like.device if like is not None else self.device
        return self.torch.as_tensor(values, dtype=self.torch.int64, device=device)

    def arange(self, stop, like, start=0, dtype="float64"):
        return self.torch.arange(start, stop, dtype=getattr(self.torch, dtype), device=like.device)

    def zeros(self, shape, like=None):
        device = like.device if like is not None else self.device
        return self.torch.zeros(shape, dtype=self.torch.float64, device=device)

    def where(self, cond, x, y):
        if not self.torch.is_tensor(y):
            y = self.torch.tensor(y, dtype=x.dtype, device=x.device)
        return self.torch.where(cond, x, y)

    def amax(self, x):
        return self.torch.amax(x, dim=-1, keepdim=True)

    def rowsum(self, x):
        return x.sum(dim=-1, keepdim=True)

    def cumsum(self, x):
        return self.torch.cumsum(x, dim=-1)

    def sort_desc(self, x):
        return self.torch.sort(x, dim=-1, descending=True).values

    def clip0(self, x):
        return self.torch.clamp(x, min=0.0)

    def sqrt(self, x):
        return self.torch.sqrt(x)

    def exp(self, x):
        return self.torch.exp(x)

    def isfinite(self, x):
        return self.torch.isfinite(x)

    def as_f64(self, x):
        return x.to(self.torch.float64)

    def t(self, x):
        return x.transpose(-1, -2)

    def absmax(self, x):
        return float(x.abs().max()) if x.numel() else 0.0

    def item(self, x):
        return float(x)


def softmax_rows(ops, z):
    """Softmax of each row of z (float64, -inf for keys a query cannot see;
    a row with none visible gives zeros)."""
    mx = ops.amax(z)
    mx = ops.where(ops.isfinite(mx), mx, 0.0)
    e = ops.exp(z - mx)
    total = ops.rowsum(e)
    return e / ops.where(total > 0, total, 1.0)


def entmax15_rows(ops, z):
    """Exact 1.5-entmax of each row of z (float64, -inf = invisible key):
    p = [z/2 - tau]_+^2 with sum(p) = 1. Sorting finds the support: with the
    k largest x = z/2 in it, tau_k = mean_k - sqrt(1/k - var_k), and the
    support is the largest k with tau_k <= x_(k). tau is then solved again
    on that support with a two-pass variance, so no cumulative sum's
    cancellation reaches it. Returns (p, support size per row)."""
    x = z * 0.5
    mx = ops.amax(x)
    mx = ops.where(ops.isfinite(mx), mx, 0.0)
    # Shifted so the largest is 0: the support lies in [-1, 0].
    xs = x - mx
    srt = ops.sort_desc(xs)
    valid = ops.isfinite(srt)
    srt0 = ops.where(valid, srt, 0.0)
    k = ops.arange(srt.shape[-1] + 1, srt, start=1)
    mean = ops.cumsum(srt0) / k
    var = ops.cumsum(srt0 * srt0) / k - mean * mean
    tau_k = mean - ops.sqrt(ops.clip0(1.0 / k - var))
    fits = (tau_k <= srt) & valid
    kstar = ops.amax(ops.as_f64(fits) * k)  # 0 only for a row with no visible key
    kdiv = ops.where(kstar > 0, kstar, 1.0)
    in_support = (k <= kstar) & valid
    mean_s = ops.rowsum(ops.where(in_support, srt0, 0.0)) / kdiv
    dev = ops.where(in_support, srt0 - mean_s, 0.0)
    var_s = ops.rowsum(dev * dev) / kdiv
    tau = mean_s - ops.sqrt(ops.clip0(1.0 / kdiv - var_s))
    p = ops.clip0(xs - tau)
    p = p * p
    return ops.where(kstar > 0, p, 0.0), kstar


def entmax15_bisect_rows(ops, z, iterations=200):
    """1.5-entmax by bisection on tau in [max - 1, max] (the self-test's
    independent check of entmax15_rows; 200 halvings reach float64's
    resolution)."""
    x = z * 0.5
    mx = ops.amax(x)
    mx = ops.where(ops.isfinite(mx), mx, 0.0)
    xs = x - mx
    lo = ops.zeros(mx.shape, like=mx) - 1.0
    hi = ops.zeros(mx.shape, like=mx)
    for _ in range(iterations):
        mid = (lo + hi) * 0.5
        r = ops.clip0(xs - mid)
        heavy = ops.rowsum(r * r) >= 1.0
        lo = ops.where(heavy, mid, lo)
        hi = ops.where(heavy, hi, mid)
    p = ops.clip0(xs - (lo + hi) * 0.5)
    p = p * p
    visible = ops.rowsum(ops.as_f64(ops.isfinite(z))) > 0
    return ops.where(visible, p, 0.0)


def reference_attention(ops, q, k, v, rows, transforms, causal, scale, max_elements):
    """float64 attention for the query rows `rows` of every (sequence, head),
    for each transform in `transforms` ("softmax", "entmax15") from the same
    scores. q: (B, Hq, n, d); k, v: (B, Hkv, m, d / dv), any dtype (widened
    exactly); query head h reads key/value head h // (Hq / Hkv); causal: key j
    is visible to query i iff j <= i + m - n. Rows are taken in chunks of at
    most max_elements scores. Returns {transform: (out of shape
    (B, Hq, len(rows), dv), mean number of keys with non-zero weight a row)}."""
    batch, heads_q, n, _ = q.shape
    heads_kv, m = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    dv = v.shape[3]
    outs = {t: ops.zeros((batch, heads_q, len(rows), dv), like=q) for t in transforms}
    support = {t: 0.0 for t in transforms}
    chunk = max(1, max_elements // (heads_q * m))
    key_index = ops.arange(m, q, dtype="int64")
    for b in range(batch):
        kb = ops.f64(k[b])
        vb = ops.f64(v[b])
        for start in range(0, len(rows), chunk):
            r = ops.index(rows[start:start + chunk], like=q)
            c = r.shape[0]
            qb = ops.f64(q[b][:, r]).reshape(heads_kv, group * c, -1)
            s = (qb @ ops.t(kb)) * scale  # (Hkv, group * c, m)
            s = s.reshape(heads_kv, group, c, m)
            if causal:
                visible = key_index.reshape(1, m) <= r.reshape(c, 1) + (m - n)
                s = ops.where(visible, s, -math.inf)
            for t in transforms:
                if t == "softmax":
                    p = softmax_rows(ops, s)
                    support[t] += float((p > 0).sum())
                elif t == "entmax15":
                    p, kstar = entmax15_rows(ops, s)
                    support[t] += float(kstar.sum())
                else:
                    raise ValueError(f"reference_attention: no transform {t!r} (softmax, entmax15)")
                o = p.reshape(heads_kv, group * c, m) @ vb
                outs[t][b, :, start:start + c] = o.reshape(heads_q, c, dv)
                del p
    return {t: (outs[t], support[t] / (batch * heads_q * len(rows))) for t in transforms}


def score_gradient(ops, g, dp):
    """dS = g (dP - sum(g dP) / sum(g)) per row: the transpose of the
    Jacobian diag(g) - g g^T / sum(g) of softmax (g = p) and of 1.5-entmax
    (g = sqrt(p)) applied to dP. A row without weight gives zeros."""
    total = ops.rowsum(g)
    return g * (dp - ops.rowsum(g * dp) / ops.where(total > 0, total, 1.0))


def reference_gradients(ops, q, k, v, grad_out, pairs, transforms, causal, scale, max_elements):
    """float64 gradients of sum(attention(q, k, v) * grad_out) for the
    (sequence, key/value head) pairs `pairs`: every query row of the pair's
    query heads (dK and dV sum over all of them), for each transform of
    `transforms` from the same scores. Shapes and masks as reference_attention;
    rows are taken in chunks of at most max_elements scores. Returns
    {transform: (dq (P, group, n, d), dk (P, m, d), dv (P, m, dv))} in the
    order of `pairs`."""
    _, heads_q, n, d = q.shape
    heads_kv, m = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    dv_cols = v.shape[3]
    count = len(pairs)
    grads = {t: (ops.zeros((count, group, n, d), like=q), ops.zeros((count, m, d), like=q),
                 ops.zeros((count, m, dv_cols), like=q)) for t in transforms}
    chunk = max(1, max_elements // (group * m))
    key_index = ops.arange(m, q, dtype="int64")
    for index, (b, g) in enumerate(pairs):
        heads = slice(g * group, (g + 1) * group)
        kb, vb = ops.f64(k[b, g]), ops.f64(v[b, g])
        for start in range(0, n, chunk):
            c = min(chunk, n - start)
            qb = ops.f64(q[b, heads, start:start + c])  # (group, c, d)
            gb = ops.f64(grad_out[b, heads, start:start + c])  # (group, c, dv)
            s = (qb @ ops.t(kb)) * scale  # (group, c, m)
            if causal:
                query_index = ops.arange(start + c, q, start=start, dtype="int64")
                s = ops.where(key_index.reshape(1, m) <= query_index.reshape(c, 1) + (m - n), s, -math.inf)
            dp = gb @ ops.t(vb)
            for t in transforms:
                if t == "softmax":
                    p = softmax_rows(ops, s)
                    ds = score_gradient(ops, p, dp)
                elif t == "entmax15":
                    p = entmax15_rows(ops, s)[0]
                    ds = score_gradient(ops, ops.sqrt(p), dp)
                else:
                    raise ValueError(f"reference_gradients: no transform {t!r} (softmax, entmax15)")
                dq, dk, dv = grads[t]
                dq[index, :, start:start + c] = (ds @ kb) * scale
                dk[index] += (ops.t(ds.reshape(group * c, m)) @ qb.reshape(group * c, d)) * scale
                dv[index] += ops.t(p.reshape(group * c, m)) @ gb.reshape(group * c, dv_cols)
                del p, ds
    return grads


def gradient_errors(ops, got, ref, pairs, heads_kv):
    """{"err_dq", "err_dk", "err_dv", "err"}: each gradient's largest
    |got - ref| over the pairs, relative to its reference's largest |entry|
    (inf if a checked entry is not finite); err is the largest of the three.
    got: (dq, dk, dv) of the whole tensors; dk and dv may have a head per
    query head (a method without grouped-query attention ran on repeated
    K/V heads): those of a group are summed first."""
    gq, gk, gv = got
    group = gq.shape[1] // heads_kv
    out = {}
    for name, whole, reference in (("dq", gq, ref[0]), ("dk", gk, ref[1]), ("dv", gv, ref[2])):
        worst, top = 0.0, ops.absmax(reference)
        for index, (b, g) in enumerate(pairs):
            if name == "dq":
                part = ops.f64(whole[b, g * group:(g + 1) * group])
            elif whole.shape[1] != heads_kv:
                part = ops.f64(whole[b, g * group:(g + 1) * group]).sum(0)
            else:
                part = ops.f64(whole[b, g])
            if not bool(ops.isfinite(part).all()):
                worst = math.inf
                break
            worst = max(worst, ops.absmax(part - reference[index]))
        out["err_" + name] = worst / (top if top > 0 else 1.0)
    out["err"] = max(out["err_dq"], out["err_dk"], out["err_dv"])
    return out


# ---------------------------------------------------------------------------
# entgraph through libentgraph_cuda_ctypes.so (native/cuda/ctypes/).

DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
TRANSFORM_CODES = {"softmax": 0, "sparsemax": 1, "entmax15": 2, "entmax": 3}
STATUS_NAMES = {1: "refused", 2: "CUDA error", 3: "out of memory", 4: "internal error"}


def ctypes_signatures():
    """argtypes of the library's functions, in the order of its C signatures
    (the self-test checks them against native/cuda/ctypes/entgraph_cuda_ctypes.cpp)."""
    i, i64, dbl, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    strides = ctypes.POINTER(ctypes.c_int64)
    lengths = ctypes.POINTER(ctypes.c_int32)
    return {
        "entgraph_cuda_batched_attention": [
            i, i, ptr, ptr, ptr, ptr,  # dtype, out_dtype, q, k, v, out
            i64, i64, i64, i64, i64, i64, i64,  # batch, heads_q, heads_kv, n, m, d, dv
            strides, strides, strides, strides,  # q, k, v, out strides
            i, dbl, dbl, i,  # transform, alpha, scale, causal
            lengths, lengths,  # query_lengths, key_lengths
            ptr, ctypes.c_size_t, ptr,  # workspace, workspace_bytes, stream
        ],
        "entgraph_cuda_batched_attention_workspace": [
            i, i, i64, i64, i64, i64, i64, i64, i64, strides, strides, i, dbl, i, ctypes.POINTER(ctypes.c_size_t),
        ],
        "entgraph_cuda_batched_attention_backward": [
            i, i, i, i,  # dtype (q, k, v, grad_out), grad_q, grad_k, grad_v dtypes
            ptr, ptr, ptr, ptr, ptr, ptr, ptr,  # q, k, v, grad_out, grad_q, grad_k, grad_v
            i64, i64, i64, i64, i64, i64, i64,  # batch, heads_q, heads_kv, n, m, d, dv
            strides, strides, strides, strides, strides, strides, strides,  # the same tensors' strides
            i, dbl, dbl, i,  # transform, alpha, scale, causal
            lengths, lengths,  # query_lengths, key_lengths
            ptr,  # stream
        ],
        "entgraph_cuda_last_error": [],
    }


class EntgraphLibrary:
    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        for name, argtypes in ctypes_signatures().items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_char_p if name == "entgraph_cuda_last_error" else ctypes.c_int

    def _fail(self, status, what):
        message = self.lib.entgraph_cuda_last_error().decode("utf-8", "replace")
        raise PeerError(f"{what}: {STATUS_NAMES.get(status, f'status {status}')}: {message}", status=status)

    @staticmethod
    def _strides(t):
        return (ctypes.c_int64 * 3)(*t.stride()[:3])

    def workspace_bytes(self, q, k, out_dtype, transform, causal):
        batch, heads_q, n, d = q.shape
        heads_kv, m = k.shape[1], k.shape[2]
        size = ctypes.c_size_t(0)
        status = self.lib.entgraph_cuda_batched_attention_workspace(
            DTYPE_CODES[dtype_name(q.dtype)], DTYPE_CODES[out_dtype], batch, heads_q, heads_kv, n, m, d, d,
            self._strides(q), self._strides(k), TRANSFORM_CODES[transform], 1.5, int(causal), ctypes.byref(size))
        if status:
            self._fail(status, "workspace size")
        return size.value

    def bind(self, q, k, v, out, transform, causal, scale, workspace, stream):
        """A call with every argument converted once, so that timing it
        measures the library, not ctypes' conversions."""
        batch, heads_q, n, d = q.shape
        heads_kv, m = k.shape[1], k.shape[2]
        call_args = (
            DTYPE_CODES[dtype_name(q.dtype)], DTYPE_CODES[dtype_name(out.dtype)],
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
            batch, heads_q, heads_kv, n, m, d, v.shape[3],
            self._strides(q), self._strides(k), self._strides(v), self._strides(out),
            TRANSFORM_CODES[transform], 1.5, scale, int(causal), None, None,
            workspace.data_ptr() if workspace is not None else None,
            workspace.numel() if workspace is not None else 0, stream)
        return self._call(self.lib.entgraph_cuda_batched_attention, call_args, "forward", out)

    def bind_backward(self, q, k, v, grad_out, grads, transform, causal, scale, stream):
        """The backward as bind's forward: grads = (dq, dk, dv), each in q's
        dtype or float32, written by every call (the forward recomputed)."""
        batch, heads_q, n, d = q.shape
        heads_kv, m = k.shape[1], k.shape[2]
        tensors = (q, k, v, grad_out) + tuple(grads)
        call_args = (
            (DTYPE_CODES[dtype_name(q.dtype)],) + tuple(DTYPE_CODES[dtype_name(g.dtype)] for g in grads)
            + tuple(t.data_ptr() for t in tensors)
            + (batch, heads_q, heads_kv, n, m, d, v.shape[3])
            + tuple(self._strides(t) for t in tensors)
            + (TRANSFORM_CODES[transform], 1.5, scale, int(causal), None, None, stream))
        return self._call(self.lib.entgraph_cuda_batched_attention_backward, call_args, "backward", grads)

    def _call(self, fn, call_args, what, result):
        def call():
            status = fn(*call_args)
            if status:
                self._fail(status, what)
            return result

        return call


def describe(error):
    """'Type: first line of the message', for one table cell."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


class PeerError(Exception):
    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------
# Tables.


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def variant_cell(variant, key, spec):
    if variant is None:
        return "-"
    if variant["status"] != "ok":
        return variant["status"].split(":")[0]
    return fmt(variant.get(key), spec)


def shape_label(s):
    return f"{s['B']}×{s['Hq']}/{s['Hkv']} n={s['n']} d={s['d']}"


def method_time(shape, method, out="16-bit", key="results"):
    for r in shape.get(key, []):
        if r["method"] == method:
            for variant in r["variants"]:
                if variant["out"] == out and variant["status"] == "ok":
                    return variant["ms"]
    return None


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def method_cells(r, peak, what="out"):
    """(16-bit variant, float32 variant, TFLOP/s, % of peak, note) of one
    method's result, for a table row; `what` names the variants' results in
    the note (out, grads)."""
    v16 = next((x for x in r["variants"] if x["out"] == "16-bit"), None)
    v32 = next((x for x in r["variants"] if x["out"] == "float32"), None)
    tflops = v16.get("tflops") if v16 and v16["status"] == "ok" else None
    pct = 100 * tflops / peak if tflops is not None and peak else None
    notes = [r["note"]] if r.get("note") else []
    for x in r["variants"]:
        if x["status"] != "ok":
            notes.append(f"{x['out']} {what}: {x['status']}")
    return v16, v32, tflops, pct, "; ".join(notes).replace("|", "/")


def markdown(results):
    """The run as markdown: per mode run (forward, training), one row per
    (shape, method), then the ratios that issue 30's and 33's targets are
    stated in."""
    meta = results["meta"]
    peak = meta.get("peak_tflops")
    modes = meta.get("modes", ["forward"])
    lines = [
        f"# entgraph beside its peers: {meta.get('device', '?')}",
        "",
        f"{meta.get('date', '')}; torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')}, "
        f"CUDA {meta.get('cuda', '?')}; entgraph {meta.get('entgraph_commit', '?')}; "
        f"AdaSplash {meta.get('adasplash_commit') or meta.get('adasplash_status', '?')}.",
        f"bf16 dense peak: {fmt(peak, '.0f')} TFLOP/s ({meta.get('peak_source') or 'unknown chip: --peak'}). "
        f"Q, K, V ~ N(0, 1), scale 1/sqrt(d); ms: median of {meta.get('samples', '?')} CUDA-event samples "
        f"of back-to-back calls, after the first call (timed apart: it includes any compilation) and "
        f"{meta.get('warmup', '?')} more; TFLOP/s: 4·B·Hq·n·m·d, halved when causal, for every method "
        "(a training step: 3.5 times that).",
        "",
    ]
    for note in meta.get("notes", []):
        lines.append(f"- {note}")
    if meta.get("notes"):
        lines.append("")
    if "forward" in modes:
        lines += forward_tables(results["shapes"], meta, peak)
    if "backward" in modes:
        lines += ([""] if "forward" in modes else []) + training_tables(results["shapes"], meta, peak)
    return "\n".join(lines) + "\n"


def forward_tables(shapes, meta, peak):
    lines = [
        "## Forward",
        "",
        f"err: max |out − ref| / max |ref| over {meta.get('ref_rows_label', '?')}, against float64 attention on the "
        "same 16-bit inputs; 16-bit floor: the same for the reference rounded once to the 16-bit type.",
        "",
        "| shape | dtype | causal | method | ms | TFLOP/s | % of peak | err 16-bit out | err f32 out | ms f32 out "
        "| first call s | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in shapes:
        if s.get("error"):
            lines.append(f"| {shape_label(s)} | {s['dtype']} | {int(s['causal'])} | (shape failed) | | | | | | | | "
                         f"{s['error'].replace('|', '/')} |")
            continue
        floor = fmt(s.get("round16_floor"), ".1e")
        for r in s["results"]:
            v16, v32, tflops, pct, note = method_cells(r, peak)
            lines.append(
                f"| {shape_label(s)} | {s['dtype']} | {int(s['causal'])} | {r['method']} | "
                f"{variant_cell(v16, 'ms', '.3f')} | {fmt(tflops, '.1f')} | {fmt(pct, '.1f')} | "
                f"{variant_cell(v16, 'err', '.1e')} | {variant_cell(v32, 'err', '.1e')} | "
                f"{variant_cell(v32, 'ms', '.3f')} | {fmt(r.get('first_call_s'), '.2f')} | {note} |")
        lines.append(f"| {shape_label(s)} | {s['dtype']} | {int(s['causal'])} | (16-bit floor) | | | | {floor} | | | | "
                     f"1.5-entmax support: {fmt(s.get('entmax_support_mean'), '.1f')} keys a row |")
    lines += [
        "",
        "Ratios of times (16-bit output). Targets of issue 30: entgraph 1.5-entmax ≤ 0.8× AdaSplash "
        "(AdaSplash-2 causal, AdaSplash-1 non-causal), entgraph softmax ≤ 2× SDPA, entgraph 1.5-entmax ≤ 1.5× "
        "entgraph softmax.",
        "",
        "| shape | dtype | causal | entmax15 / AdaSplash | softmax / SDPA | entmax15 / softmax |",
        "|---|---|---|---|---|---|",
    ]
    return lines + ratio_rows(shapes, "results")


def ratio_rows(shapes, key):
    """| shape | dtype | causal | entmax15 / AdaSplash | softmax / SDPA | entmax15 / softmax | rows (16-bit)."""
    lines = []
    for s in shapes:
        ada = method_time(s, "AdaSplash-2" if s["causal"] else "AdaSplash-1", key=key)
        ent = method_time(s, "entgraph entmax15", key=key)
        soft = method_time(s, "entgraph softmax", key=key)
        sdpa = method_time(s, "SDPA softmax", key=key)
        lines.append(f"| {shape_label(s)} | {s['dtype']} | {int(s['causal'])} | {fmt(ratio(ent, ada), '.2f')} | "
                     f"{fmt(ratio(soft, sdpa), '.2f')} | {fmt(ratio(ent, soft), '.2f')} |")
    return lines


def training_tables(shapes, meta, peak):
    """The training step's table (each shape's "training") and its ratios."""
    lines = [
        "## Training: forward, then backward",
        "",
        "A fixed grad_out ~ N(0, 1) in the inputs' dtype. err: each of dQ, dK, dV's max |grad − ref| / max |ref|, "
        f"against float64 gradients on the same 16-bit inputs over every query row of "
        f"{meta.get('ref_heads_label', '?')}; err grads: the largest of the three. 16-bit floor: the same for the "
        "reference gradients rounded once to the 16-bit type.",
        "",
        "| shape | dtype | causal | method | ms fwd+bwd | TFLOP/s | % of peak | err 16-bit grads | dQ | dK | dV "
        "| err f32 grads | ms f32 grads | first call s | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in shapes:
        head = f"| {shape_label(s)} | {s['dtype']} | {int(s['causal'])} |"
        failure = s.get("error") or s.get("training_error")
        if failure:
            lines.append(f"{head} (training failed) | | | | | | | | | | | {failure.replace('|', '/')} |")
            continue
        for r in s.get("training", []):
            v16, v32, tflops, pct, note = method_cells(r, peak, "grads")
            lines.append(
                f"{head} {r['method']} | {variant_cell(v16, 'ms', '.3f')} | {fmt(tflops, '.1f')} | "
                f"{fmt(pct, '.1f')} | {variant_cell(v16, 'err', '.1e')} | {variant_cell(v16, 'err_dq', '.1e')} | "
                f"{variant_cell(v16, 'err_dk', '.1e')} | {variant_cell(v16, 'err_dv', '.1e')} | "
                f"{variant_cell(v32, 'err', '.1e')} | {variant_cell(v32, 'ms', '.3f')} | "
                f"{fmt(r.get('first_call_s'), '.2f')} | {note} |")
        info = s.get("training_ref", {})
        lines.append(f"{head} (16-bit floor) | | | | {fmt(info.get('round16_floor'), '.1e')} | | | | | | | "
                     f"float64 gradients: {fmt(info.get('reference_s'), '.1f')} s |")
    lines += [
        "",
        "Ratios of training-step times (16-bit gradients). Target of issue 33: entgraph 1.5-entmax forward + "
        "backward ≤ 0.8× AdaSplash-2's (causal; AdaSplash-1 beside it when non-causal), gradients within 1e-3 "
        "of float64 relative to each gradient's largest |entry|.",
        "",
        "| shape | dtype | causal | entmax15 / AdaSplash | softmax / SDPA | entmax15 / softmax |",
        "|---|---|---|---|---|---|",
    ]
    lines += ratio_rows(shapes, "training")
    return lines


def write_results(out_dir, results):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "peers.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "peers.md").write_text(markdown(results))


# ---------------------------------------------------------------------------
# The GPU run.


def parse_heads(text):
    """'1x16x16,4x32x8' -> [(1, 16, 16), (4, 32, 8)] (batch x query heads x key/value heads)."""
    out = []
    for item in filter(None, text.split(",")):
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"gpu_peers: --heads item {item!r} is not BxHQxHKV, e.g. 4x32x8")
        b, hq, hkv = map(int, parts)
        if hq % hkv:
            raise SystemExit(f"gpu_peers: --heads {item}: query heads {hq} are not a multiple of key/value heads {hkv}")
        out.append((b, hq, hkv))
    return out


def int_list(text):
    return [int(x) for x in filter(None, text.split(","))]


def build_shapes(args):
    causal_modes = {"both": [True, False], "causal": [True], "noncausal": [False]}[args.causal]
    dtypes = [x for x in filter(None, args.dtype.split(","))]
    for dt in dtypes:
        if dt not in ("bf16", "fp16"):
            raise SystemExit(f"gpu_peers: --dtype {dt} is not bf16 or fp16")
    grid = [(h, n) for n in int_list(args.n) for h in parse_heads(args.heads)]
    grid += [(h, n) for n in int_list(args.long_n) for h in parse_heads(args.long_heads)]
    shapes = []
    for dt in dtypes:
        for d in int_list(args.d):
            for (b, hq, hkv), n in grid:
                for causal in causal_modes:
                    shapes.append(dict(B=b, Hq=hq, Hkv=hkv, n=n, m=n, d=d, causal=causal, dtype=dt))
    return shapes


def need_gpu(args):
    """torch and a CUDA device, or exit 2 saying which is missing."""
    try:
        import torch
    except ImportError as e:
        sys.exit(f"gpu_peers: torch is not installed ({e}); this tool runs on a machine with an NVIDIA GPU, "
                 "torch and Triton (--self-test runs without them)")
    if not torch.cuda.is_available():
        why = "torch.cuda.is_available() is False"
        try:
            torch.cuda.init()
        except Exception as e:  # its message names the driver or device problem
            why = describe(e)
        sys.exit(f"gpu_peers: no usable GPU here ({why}); nothing was measured")
    return torch


def git_commit():
    try:
        # --dirty: numbers from uncommitted code must say so.
        return subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=7"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


class Runner:
    def __init__(self, torch, args):
        self.torch = torch
        self.args = args
        self.ops = TorchOps("cuda")

    def sync(self):
        self.torch.cuda.synchronize()

    def time_ms(self, fn):
        """Median ms per call: warm-up calls (fewer if they outlast the time
        budget), then samples each timed with CUDA events around back-to-back
        calls (enough to fill ~2 ms, at most 50), so launch latency is hidden
        as in a model's stream of kernels."""
        torch = self.torch
        warm_until = time.perf_counter() + self.args.time_budget
        for _ in range(self.args.warmup):
            fn()
            self.sync()
            if time.perf_counter() > warm_until:  # slow calls need no more warming
                break
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        reps = max(1, min(50, int(2.0 / max(start.elapsed_time(end), 1e-3))))
        samples = []
        deadline = time.perf_counter() + self.args.time_budget
        for _ in range(self.args.samples):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / reps)
            if len(samples) >= 3 and time.perf_counter() > deadline:
                break
        return statistics.median(samples), samples, reps

    def first_call(self, fn):
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        return out, time.perf_counter() - t0

    def error(self, out, ref, rows_index):
        got = out[:, :, rows_index].to(self.torch.float64)
        if not bool(self.torch.isfinite(got).all()):
            return math.inf
        top = float(ref.abs().max())
        return float((got - ref).abs().max()) / (top if top > 0 else 1.0)

    def output_errors(self, ref, rows_index):
        return lambda out: {"err": self.error(out, ref, rows_index)}

    def variant(self, label, fn, errors, flops):
        """One output variant of one method: first call, errors (a function
        of the first call's result giving the fields to record), timing; any
        failure is recorded, not raised (a lost CUDA context is re-raised)."""
        v = {"out": label}
        try:
            out, first = self.first_call(fn)
            v["first_call_s"] = first
            v.update(errors(out))
            del out
            ms, samples, reps = self.time_ms(fn)
            v.update(status="ok", ms=ms, samples_ms=samples, calls_per_sample=reps,
                     tflops=flops / (ms * 1e-3) / 1e12)
        except PeerError as e:
            v["status"] = ("not offered: " if e.status == 1 and label == "float32" else "failed: ") + str(e)
        except self.torch.cuda.OutOfMemoryError:
            v["status"] = "failed: out of memory"
        except Exception as e:  # a peer's own error: recorded, the run goes on
            v["status"] = f"failed: {describe(e)}"
        self.check_context()
        self.torch.cuda.empty_cache()
        return v

    def check_context(self):
        try:
            self.sync()
        except Exception as e:
            raise ContextLost(str(e)) from e


class ContextLost(Exception):
    pass


def load_adasplash(peers_dir):
    """(module, commit, status line)."""
    folder = Path(peers_dir) / "adasplash"
    if not folder.is_dir():
        return None, None, f"missing: {folder} does not exist (run tools/fetch_peers.sh)"
    commit_file = folder / "COMMIT"
    commit = commit_file.read_text().strip() if commit_file.exists() else None
    sys.path.insert(0, str(Path(peers_dir).resolve()))
    try:
        import adasplash
    except Exception as e:
        return None, commit, f"missing: import adasplash failed: {type(e).__name__}: {e}"
    for name in ("adasplash_v1", "adasplash_v2"):
        if not hasattr(adasplash, name):
            return None, commit, f"missing: adasplash has no {name} (commit {commit})"
    # The package imports its kernels lazily; importing them here reports a
    # missing Triton once, not as a failure in every shape.
    for module in ("adasplash.adasplash_v2", "adasplash.adasplash_block_mask"):
        try:
            importlib.import_module(module)
        except Exception as e:
            return None, commit, f"missing: import {module} failed: {describe(e)}"
    return adasplash, commit, "ok"


def run(args):
    torch = need_gpu(args)
    import torch.nn.functional as F

    shapes = build_shapes(args)
    if not shapes:
        sys.exit("gpu_peers: no shape selected (check --d, --heads, --n, --long-n, --causal, --dtype)")
    methods = set(filter(None, args.methods.split(",")))
    unknown = methods - {"sdpa", "adasplash", "entgraph"}
    if unknown:
        sys.exit(f"gpu_peers: unknown --methods {sorted(unknown)} (sdpa, adasplash, entgraph)")
    runner = Runner(torch, args)
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    peak, peak_source = (args.peak, "--peak") if args.peak else peak_tflops(name)
    try:
        import triton

        triton_version = triton.__version__
    except Exception as e:
        triton_version = f"missing ({type(e).__name__})"

    ada, ada_commit, ada_status = (None, None, "not run (--methods)")
    if "adasplash" in methods:
        ada, ada_commit, ada_status = load_adasplash(args.peers)
    lib, lib_status = None, "not run (--methods)"
    if "entgraph" in methods:
        if not Path(args.lib).exists():
            lib_status = f"missing: {args.lib} does not exist (build the target entgraph_cuda_ctypes: make build)"
        else:
            try:
                lib, lib_status = EntgraphLibrary(args.lib), "ok"
            except (OSError, AttributeError) as e:
                lib_status = f"missing: {args.lib} does not load: {e}"

    ref_rows_label = ("every query row" if args.ref_rows <= 0 else
                      f"{args.ref_rows} query rows a head (first, last, middle, the rest at random; all when n is smaller)")
    modes = run_modes(args)
    ref_heads_label = ("every key/value head" if args.ref_heads <= 0 else
                       f"{args.ref_heads} key/value head(s) of the batch (evenly spread, the last one included)")
    results = {
        "meta": {
            "tool": "tools/gpu_peers.py",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": name,
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "peak_tflops": peak,
            "peak_source": peak_source,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": triton_version,
            "entgraph_commit": git_commit(),
            "entgraph_library": str(args.lib),
            "entgraph_status": lib_status,
            "adasplash_commit": ada_commit,
            "adasplash_status": ada_status,
            "adasplash_niter": {"v2": args.v2_niter, "v1": args.v1_niter},
            "warmup": args.warmup,
            "samples": args.samples,
            "seed": args.seed,
            "ref_rows": args.ref_rows,
            "ref_rows_label": ref_rows_label,
            "modes": modes,
            "ref_heads": args.ref_heads,
            "ref_heads_label": ref_heads_label,
            "sdpa_backends": args.sdpa_backend,
            "notes": [
                "AdaSplash-1 has no grouped-query attention: its K and V heads are repeated to the query heads "
                "(outside the timing) where Hkv < Hq. SDPA gets enable_gqa=True, or repeated heads if it refuses. "
                "AdaSplash-2 and entgraph read the shared heads.",
                "AdaSplash and SDPA return the inputs' dtype only; their float32 column is AdaSplash on float32 "
                "copies of the same 16-bit values (--peer-fp32) or empty.",
                f"entgraph: {lib_status}; AdaSplash: {ada_status}.",
            ] + ([
                "Training: AdaSplash and SDPA run their forward, then torch.autograd.grad on its output for the "
                "same grad_out (no .grad accumulates between calls); entgraph runs its forward (16-bit out) then "
                "entgraph_cuda_batched_attention_backward, which recomputes the forward. Where K/V heads are "
                "repeated for a method, its dK and dV of a group are summed before they are compared.",
            ] if "backward" in modes else []),
        },
        "shapes": [],
    }
    print(f"gpu_peers: {name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs), "
          f"bf16 peak {fmt(peak, '.0f')} TFLOP/s; torch {torch.__version__}, Triton {triton_version}")
    print(f"gpu_peers: entgraph: {lib_status}; AdaSplash: {ada_status}"
          + (f" (commit {ada_commit})" if ada_commit else ""))

    sdpa_ctx = sdpa_context(torch, args.sdpa_backend)
    with torch.no_grad():
        for index, shape in enumerate(shapes, 1):
            try:
                entry = (run_shape(runner, F, sdpa_ctx, shape, methods, ada, lib, args) if "forward" in modes
                         else dict(shape, results=[]))
                if "backward" in modes:
                    entry.update(run_training_step(runner, F, sdpa_ctx, shape, methods, ada, lib, args))
            except ContextLost as e:
                lost = e
            except Exception as e:  # the inputs or the reference (e.g. out of memory): recorded, the run goes on
                entry = dict(shape, error=describe(e),
                             results=[])
                lost = None
                try:
                    runner.check_context()
                except ContextLost as e2:
                    lost = e2
                torch.cuda.empty_cache()
            else:
                lost = None
            if lost is not None:
                results["meta"]["notes"].append(
                    f"Run stopped at shape {index} of {len(shapes)} ({shape_label(shape)}): the CUDA context was lost "
                    f"({describe(lost)}); later shapes were not measured.")
                write_results(args.out, results)
                print(f"gpu_peers: CUDA context lost at {shape_label(shape)}: {lost}", file=sys.stderr)
                return 1
            results["shapes"].append(entry)
            write_results(args.out, results)
            print(f"[{index}/{len(shapes)}] {shape_label(shape)} {shape['dtype']} causal={int(shape['causal'])}: "
                  + ("; ".join([summary(r) for r in entry["results"]]
                               + [summary(r, "train ") for r in entry.get("training", [])])
                     or entry.get("error", "") or entry.get("training_error", "")), flush=True)
    print(f"gpu_peers: {args.out}/peers.md and peers.json")
    return 0


def run_modes(args):
    """["forward"], ["forward", "backward"] (--backward) or ["backward"] (--backward-only)."""
    if args.backward_only:
        return ["backward"]
    return ["forward", "backward"] if args.backward else ["forward"]


def run_training_step(runner, F, sdpa_ctx, shape, methods, ada, lib, args):
    """run_training_shape, its failure recorded (the forward's results are
    kept; a lost CUDA context is re-raised)."""
    try:
        return run_training_shape(runner, F, sdpa_ctx, shape, methods, ada, lib, args)
    except ContextLost:
        raise
    except Exception as e:  # the reference or the inputs (e.g. out of memory)
        runner.check_context()
        runner.torch.cuda.empty_cache()
        return {"training": [], "training_error": describe(e)}


def summary(r, prefix=""):
    parts = []
    for v in r["variants"]:
        if v["status"] == "ok":
            parts.append(f"{v['out']} {v['ms']:.3f} ms {v['tflops']:.0f} TF err {v['err']:.1e}")
        else:
            parts.append(f"{v['out']} {v['status'][:60]}")
    return (f"{prefix}{r['method']}: " + ", ".join(parts) if parts
            else f"{prefix}{r['method']}: {r.get('note', '')}")


def sdpa_context(torch, choice):
    """A context manager limiting SDPA to fused kernels (never the math
    backend, whose n x n matrix would not fit at n = 65536 and would not be
    what SDPA's users get)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {"flash": ["FLASH_ATTENTION"], "cudnn": ["CUDNN_ATTENTION"], "efficient": ["EFFICIENT_ATTENTION"],
             "auto": ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]}[choice]
    backends = [getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]
    return lambda: sdpa_kernel(backends)


def shape_inputs(torch, shape, seed):
    """(q, k, v, dtype, scale, generator): a shape's inputs, N(0, 1) rounded
    to its 16-bit type, the same in the forward and the training runs; the
    generator goes on to draw grad_out."""
    b, hq, hkv, n, m, d = (shape[x] for x in ("B", "Hq", "Hkv", "n", "m", "d"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[shape["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((b, hq, n, d), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    k = torch.randn((b, hkv, m, d), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    v = torch.randn((b, hkv, m, d), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    return q, k, v, dtype, 1.0 / math.sqrt(d), gen


def reference_elements(args):
    return max(1, int(args.ref_gb * 2**30 / 8 / 8))  # ~8 float64 temporaries of the chunk's scores


def add_result(results, method, transform, variants, note=""):
    results.append(dict(method=method, transform=transform, note=note, variants=variants,
                        first_call_s=next((x.get("first_call_s") for x in variants
                                           if x.get("first_call_s") is not None), None)))


def refused(label, error):
    """The variant of a call refused before it ran (a float32 output the
    library does not offer is "not offered", anything else "failed")."""
    prefix = "not offered: " if error.status == 1 and label == "float32" else "failed: "
    return {"out": label, "status": prefix + str(error)}


def repeat_heads(x, group):
    return x.repeat_interleave(group, dim=1).contiguous() if group > 1 else x


def sdpa_method(F, causal, scale, group, inputs, repeat, probe):
    """(forward(q, k, v), inputs, note): SDPA with enable_gqa where K/V have
    fewer heads, or, if probe(forward, inputs) raises, plain SDPA on the
    inputs with K/V heads repeated by repeat(inputs)."""
    def forward(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, is_causal=causal, scale=scale, enable_gqa=group > 1)

    if group == 1:
        return forward, inputs, ""
    try:
        probe(forward, inputs)
        return forward, inputs, "native GQA"
    except Exception as e:
        refusal = describe(e)

    def plain(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, is_causal=causal, scale=scale)

    return plain, repeat(inputs), f"K/V heads repeated (enable_gqa failed: {refusal})"


def adasplash_method(ada, causal, group, inputs, args):
    """(method, forward(q, k, v), inputs, note): AdaSplash-2 when causal;
    AdaSplash-1 otherwise, on K/V heads repeated where they are fewer (it
    has no grouped-query attention; the copies are made here, untimed)."""
    if causal:
        return "AdaSplash-2", lambda a, b, c: ada.adasplash_v2(a, b, c, niter=args.v2_niter), inputs, ""
    qq, kk, vv = inputs
    note = "K/V heads repeated (no GQA in v1)" if group > 1 else ""
    return ("AdaSplash-1",
            lambda a, b, c: ada.adasplash_v1(a, b, c, alpha=1.5, is_causal=False, niter=args.v1_niter),
            (qq, repeat_heads(kk, group), repeat_heads(vv, group)), note)


def add_adasplash(runner, results, ada, causal, group, inputs, args, timed, errors, flops):
    """AdaSplash's entry in results: missing, or its 16-bit variant and
    (--peer-fp32) its float32 one; timed(forward, inputs) is the call timed."""
    if ada is None:
        add_result(results, "AdaSplash-2" if causal else "AdaSplash-1", "entmax15", [], note="missing")
        return
    variants = []
    by_label = {"16-bit": inputs}
    if args.peer_fp32:
        by_label["float32"] = tuple(x.float() for x in inputs)
    for label, xs in by_label.items():
        method, forward, xs, note = adasplash_method(ada, causal, group, xs, args)
        variants.append(runner.variant(label, timed(forward, xs), errors, flops))
    add_result(results, method, "entmax15", variants, note)


def run_shape(runner, F, sdpa_ctx, shape, methods, ada, lib, args):
    torch = runner.torch
    b, hq, hkv, n, m, d, causal = (shape[x] for x in ("B", "Hq", "Hkv", "n", "m", "d", "causal"))
    q, k, v, dtype, scale, _ = shape_inputs(torch, shape, args.seed)
    flops = attention_flops(b, hq, n, m, d, causal)

    rows = sample_rows(n, args.ref_rows, args.seed)
    rows_index = torch.tensor(rows, dtype=torch.int64, device="cuda")
    t0 = time.perf_counter()
    refs = reference_attention(runner.ops, q, k, v, rows, ("softmax", "entmax15"), causal, scale,
                               reference_elements(args))
    (ref_soft, _), (ref_ent, support) = refs["softmax"], refs["entmax15"]
    ref_s = time.perf_counter() - t0
    floor = max(float((r.to(dtype).to(torch.float64) - r).abs().max()) / float(r.abs().max())
                for r in (ref_soft, ref_ent))
    entry = dict(shape, flops=flops, ref_rows=len(rows), reference_s=ref_s, round16_floor=floor,
                 entmax_support_mean=support, results=[])
    group = hq // hkv

    if "sdpa" in methods:
        # The backend choice is entered once, not per call, so its Python cost is not timed.
        with sdpa_ctx():
            forward, (qq, kk, vv), note = sdpa_method(
                F, causal, scale, group, (q, k, v),
                lambda xs: (xs[0], repeat_heads(xs[1], group), repeat_heads(xs[2], group)),
                lambda f, xs: f(*xs))
            add_result(entry["results"], "SDPA softmax", "softmax",
                       [runner.variant("16-bit", lambda: forward(qq, kk, vv),
                                       runner.output_errors(ref_soft, rows_index), flops)], note)

    if "adasplash" in methods:
        add_adasplash(runner, entry["results"], ada, causal, group, (q, k, v), args,
                      lambda f, xs: lambda: f(*xs), runner.output_errors(ref_ent, rows_index), flops)

    if "entgraph" in methods:
        for transform, ref in (("softmax", ref_soft), ("entmax15", ref_ent)):
            method = f"entgraph {transform}"
            if lib is None:
                add_result(entry["results"], method, transform, [], note="missing")
                continue
            variants = []
            for label, out_dtype in (("16-bit", dtype), ("float32", torch.float32)):
                out = torch.empty((b, hq, n, d), dtype=out_dtype, device="cuda")
                try:
                    workspace = entgraph_workspace(torch, lib, q, k, out_dtype, transform, causal)
                except PeerError as e:
                    variants.append(refused(label, e))
                    continue
                fn = lib.bind(q, k, v, out, transform, causal, scale, workspace,
                              torch.cuda.current_stream().cuda_stream)
                variants.append(runner.variant(label, fn, runner.output_errors(ref, rows_index), flops))
                del out, workspace, fn
            add_result(entry["results"], method, transform, variants)
    return entry


def entgraph_workspace(torch, lib, q, k, out_dtype, transform, causal):
    size = lib.workspace_bytes(q, k, dtype_name(out_dtype), transform, causal)
    return torch.empty(size, dtype=torch.uint8, device="cuda") if size else None


def run_training_shape(runner, F, sdpa_ctx, shape, methods, ada, lib, args):
    """A shape's training step (--backward): {"training": results, "training_ref": the reference's facts}."""
    torch = runner.torch
    b, hq, hkv, n, m, d, causal = (shape[x] for x in ("B", "Hq", "Hkv", "n", "m", "d", "causal"))
    q, k, v, dtype, scale, gen = shape_inputs(torch, shape, args.seed)
    grad_out = torch.randn((b, hq, n, d), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    flops = training_flops(b, hq, n, m, d, causal)
    group = hq // hkv

    pairs = ref_head_pairs(b, hkv, args.ref_heads)
    t0 = time.perf_counter()
    with torch.no_grad():
        refs = reference_gradients(runner.ops, q, k, v, grad_out, pairs, ("softmax", "entmax15"), causal, scale,
                                   reference_elements(args))
    ref_s = time.perf_counter() - t0
    floor = max(float((r.to(dtype).to(torch.float64) - r).abs().max()) / max(float(r.abs().max()), 1e-300)
                for grads in refs.values() for r in grads)
    results = []
    info = dict(flops=flops, pairs=[list(x) for x in pairs], reference_s=ref_s, round16_floor=floor)

    def errors(ref):
        return lambda got: gradient_errors(runner.ops, got, ref, pairs, hkv)

    def leaves(xs):
        return tuple(x.detach().clone().requires_grad_() for x in xs)

    def step(forward, xs):
        """forward on xs (leaves), then autograd's backward for grad_out in
        q's dtype; returns (dq, dk, dv)."""
        go = grad_out if xs[0].dtype == grad_out.dtype else grad_out.to(xs[0].dtype)

        def fn():
            return torch.autograd.grad(forward(*xs), xs, go)

        return fn

    with torch.enable_grad():
        if "sdpa" in methods:
            with sdpa_ctx():
                forward, xs, note = sdpa_method(
                    F, causal, scale, group, leaves((q, k, v)),
                    lambda xs: leaves((xs[0], repeat_heads(xs[1], group), repeat_heads(xs[2], group))),
                    lambda f, xs: step(f, xs)())
                add_result(results, "SDPA softmax", "softmax",
                           [runner.variant("16-bit", step(forward, xs), errors(refs["softmax"]), flops)], note)

        if "adasplash" in methods:
            add_adasplash(runner, results, ada, causal, group, (q, k, v), args,
                          lambda f, xs: step(f, leaves(xs)), errors(refs["entmax15"]), flops)

    if "entgraph" in methods:
        stream = torch.cuda.current_stream().cuda_stream
        for transform in ("softmax", "entmax15"):
            method = f"entgraph {transform}"
            if lib is None:
                add_result(results, method, transform, [], note="missing")
                continue
            variants = []
            out = torch.empty((b, hq, n, d), dtype=dtype, device="cuda")
            try:
                workspace = entgraph_workspace(torch, lib, q, k, dtype, transform, causal)
            except PeerError as e:
                add_result(results, method, transform, [refused("16-bit", e)])
                continue
            forward = lib.bind(q, k, v, out, transform, causal, scale, workspace, stream)
            for label, grad_dtype in (("16-bit", dtype), ("float32", torch.float32)):
                grads = tuple(torch.empty(x.shape, dtype=grad_dtype, device="cuda") for x in (q, k, v))
                backward = lib.bind_backward(q, k, v, grad_out, grads, transform, causal, scale, stream)

                def fn(backward=backward):
                    forward()
                    return backward()

                variants.append(runner.variant(label, fn, errors(refs[transform]), flops))
                del grads, backward, fn
            add_result(results, method, transform, variants)
            del out, workspace, forward
    return {"training": results, "training_ref": info}


# ---------------------------------------------------------------------------
# Self-test: what needs no GPU, with torch on the CPU or numpy.


def self_test():
    backends = []
    if importlib.util.find_spec("torch") is not None:
        backends.append(TorchOps("cpu"))
    try:
        backends.append(NumpyOps())
    except ImportError:
        pass
    if not backends:
        print("gpu_peers self-test: neither torch nor numpy is installed: skipped")
        return 77
    passed, failed = 0, 0

    def check(condition, what):
        nonlocal passed, failed
        if condition:
            passed += 1
        else:
            failed += 1
            print(f"FAILED: {what}")

    for ops in backends:
        passed_before = passed
        self_test_reference(ops, check)
        self_test_gradients(ops, check)
        print(f"gpu_peers self-test: {passed - passed_before} reference checks with {ops.name}")
    self_test_pure(check)
    self_test_training_tables(check)
    self_test_library(check)
    print(f"gpu_peers self-test ({', '.join(o.name for o in backends)}): {passed} passed, {failed} failed")
    return 1 if failed else 0


def as_ops(ops, rows):
    """A list of equal-length Python rows as an ops array (float64)."""
    return ops.f64(rows)


def to_list(x):
    return x.tolist()


def self_test_reference(ops, check):
    rng = random.Random(12345)
    inf = math.inf

    # Known values: a gap of 2 in x = z/2 leaves one key; equal scores split evenly.
    p, kstar = entmax15_rows(ops, as_ops(ops, [[10.0, 0.0], [0.0, 0.0], [1.0, 1.0]]))
    got = to_list(p)
    check(abs(got[0][0] - 1) < 1e-15 and got[0][1] == 0, f"entmax15([10, 0]) = {got[0]}")
    check(all(abs(x - 0.5) < 1e-15 for x in got[1] + got[2]), f"entmax15 of ties = {got[1:]}")
    check(to_list(kstar) == [[1.0], [2.0], [2.0]], f"support sizes {to_list(kstar)}")
    # Two keys apart by t in x: p1 - p2 = ... closed form (x1 - tau)^2 + (x2 - tau)^2 = 1.
    for t in (0.1, 0.5, 0.99):
        z = [[2 * t, 0.0]]
        tau = (t - math.sqrt(2 - t * t)) / 2
        want = [(t - tau) ** 2, tau ** 2]
        got = to_list(entmax15_rows(ops, as_ops(ops, z))[0])[0]
        check(max(abs(a - b) for a, b in zip(got, want)) < 1e-14, f"two keys {t}: {got} vs {want}")

    # Against bisection: sizes, scales from 1e-3 to 1e4, ties, masked keys.
    worst, worst_sum = 0.0, 0.0
    cases = 0
    for size in (1, 2, 3, 7, 64, 1000, 4097):
        for scale in (1e-3, 0.1, 1.0, 3.0, 10.0, 1e4):
            for kind in ("normal", "ties", "masked"):
                rows = []
                for _ in range(4):
                    if kind == "ties":
                        row = [scale * rng.randint(-3, 3) for _ in range(size)]
                    else:
                        row = [scale * rng.gauss(0, 1) for _ in range(size)]
                    if kind == "masked":
                        keep = rng.randrange(size)
                        row = [x if (j == keep or rng.random() < 0.6) else -inf for j, x in enumerate(row)]
                    rows.append(row)
                z = as_ops(ops, rows)
                p, kstar = entmax15_rows(ops, z)
                pb = entmax15_bisect_rows(ops, z)
                a, bb = to_list(p), to_list(pb)
                for ra, rb, rz, ks in zip(a, bb, rows, to_list(kstar)):
                    worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)))
                    worst_sum = max(worst_sum, abs(sum(ra) - 1))
                    if any(x == -inf and y != 0 for x, y in zip(rz, ra)):
                        check(False, f"masked key got weight (size {size}, scale {scale})")
                    check(ks[0] == sum(1 for x in ra if x > 0) or kind == "ties",
                          f"support {ks[0]} vs non-zero weights (size {size}, scale {scale}, {kind})")
                cases += 1
    check(worst < 1e-12, f"exact vs bisection: largest |difference| {worst:.3e} over {cases} cases")
    check(worst_sum < 1e-12, f"exact: largest |sum - 1| {worst_sum:.3e}")

    # A row with no visible key gives zeros, in both.
    z = as_ops(ops, [[-inf, -inf, -inf], [0.0, -inf, 1.0]])
    check(to_list(entmax15_rows(ops, z)[0])[0] == [0.0, 0.0, 0.0], "fully masked row: entmax15 zeros")
    check(to_list(softmax_rows(ops, z))[0] == [0.0, 0.0, 0.0], "fully masked row: softmax zeros")
    s = to_list(softmax_rows(ops, z))[1]
    e = math.exp(1.0)
    check(abs(s[0] - 1 / (1 + e)) < 1e-15 and s[1] == 0 and abs(s[2] - e / (1 + e)) < 1e-15, f"softmax {s}")

    # reference_attention against a per-row loop in plain Python, with GQA,
    # causal and not, n != m, and chunks of 1 row and of all rows.
    B, Hq, Hkv, n, m, d = 2, 4, 2, 5, 7, 3

    def tensor(shape):
        # Values on a 1/8 grid: exact in bf16 and float64.
        flat = [rng.randint(-16, 16) / 8 for _ in range(math.prod(shape))]
        x = ops.f64(flat)
        return x.reshape(shape)

    q, k, v = tensor((B, Hq, n, d)), tensor((B, Hkv, m, d)), tensor((B, Hkv, m, d))
    ql, kl, vl = to_list(q), to_list(k), to_list(v)
    scale = 1 / math.sqrt(d)
    rows = [0, 2, 4]
    for transform in ("softmax", "entmax15"):
        for causal in (False, True):
            outs = [reference_attention(ops, q, k, v, rows, [transform], causal, scale, chunk * Hq * m)[transform][0]
                    for chunk in (1, len(rows))]
            worst = 0.0
            for b in range(B):
                for h in range(Hq):
                    g = h // (Hq // Hkv)
                    for ri, i in enumerate(rows):
                        z = [scale * sum(ql[b][h][i][c] * kl[b][g][j][c] for c in range(d))
                             if (not causal or j <= i + m - n) else -inf for j in range(m)]
                        p = plain_softmax(z) if transform == "softmax" else plain_entmax15(z)
                        want = [sum(p[j] * vl[b][g][j][c] for j in range(m)) for c in range(d)]
                        for out in outs:
                            got = to_list(out[b, h, ri])
                            worst = max(worst, max(abs(x - y) for x, y in zip(got, want)))
            check(worst < 1e-12, f"reference_attention {transform} causal={causal}: {worst:.3e} from the loop")


def self_test_gradients(ops, check):
    """reference_gradients against central differences of
    sum(reference_attention(...) * grad_out), both transforms, causal and
    not, GQA, n < m and n > m (causal rows that see no key); chunks of one
    row against all rows; a subset of pairs against the whole; and
    gradient_errors' measures."""
    rng = random.Random(777)

    def tensor(shape, spread=1.0):
        return ops.f64([spread * rng.gauss(0, 1) for _ in range(math.prod(shape))]).reshape(shape)

    B, Hq, Hkv, d, dv = 2, 4, 2, 3, 2
    all_pairs = ref_head_pairs(B, Hkv, 0)
    for n, m in ((5, 7), (6, 4)):
        # Spread 2: 1.5-entmax leaves some keys out, so the support's edge is crossed.
        q, k, v, go = tensor((B, Hq, n, d), 2.0), tensor((B, Hkv, m, d), 2.0), tensor((B, Hkv, m, dv)), \
            tensor((B, Hq, n, dv))
        scale = 1 / math.sqrt(d)
        for causal in (False, True):
            grads = reference_gradients(ops, q, k, v, go, all_pairs, ("softmax", "entmax15"), causal, scale, 1)
            whole = reference_gradients(ops, q, k, v, go, all_pairs, ("softmax", "entmax15"), causal, scale, 10**6)
            sub = reference_gradients(ops, q, k, v, go, [all_pairs[-1]], ("entmax15",), causal, scale, 10**6)
            for t in ("softmax", "entmax15"):
                label = f"{t} n={n} m={m} causal={causal}"
                check(max(ops.absmax(a - b) for a, b in zip(grads[t], whole[t])) < 1e-13,
                      f"gradients {label}: chunks of 1 row vs all rows")

                def loss(qq, kk, vv):
                    out = reference_attention(ops, qq, kk, vv, list(range(n)), [t], causal, scale, 10**6)[t][0]
                    return float((out * go).sum())

                # Central differences, entry by entry, arranged as the reference's (pair, ...) layout.
                h = 1e-6
                worst, top = 0.0, 0.0
                for which, x in enumerate((q, k, v)):
                    flat = x.reshape(-1)
                    numeric = ops.zeros(flat.shape, like=flat)
                    for i in range(flat.shape[0]):
                        keep = float(flat[i])
                        flat[i] = keep + h
                        up = loss(q, k, v)
                        flat[i] = keep - h
                        down = loss(q, k, v)
                        flat[i] = keep
                        numeric[i] = (up - down) / (2 * h)
                    numeric = numeric.reshape(x.shape)
                    group = Hq // Hkv
                    for index, (b, g) in enumerate(all_pairs):
                        want = numeric[b, g * group:(g + 1) * group] if which == 0 else numeric[b, g]
                        got = grads[t][which][index]
                        worst = max(worst, ops.absmax(got - want))
                        top = max(top, ops.absmax(want))
                check(worst < 1e-6 * max(top, 1.0), f"gradients {label}: {worst:.2e} from central differences "
                                                     f"(largest {top:.2e})")
                if t == "entmax15":
                    check(max(ops.absmax(a - b[-1]) for a, b in zip(sub[t], whole[t])) == 0.0,
                          f"gradients {label}: one pair as in all pairs")
                if causal and n > m:
                    check(ops.absmax(whole[t][0][:, :, :n - m]) == 0.0, f"gradients {label}: rows without keys")

    # gradient_errors: exact, one entry off, a non-finite entry, repeated K/V heads summed.
    n, m = 5, 7
    q, k, v, go = tensor((B, Hq, n, d)), tensor((B, Hkv, m, d)), tensor((B, Hkv, m, dv)), tensor((B, Hq, n, dv))
    pairs = [all_pairs[-1]]
    ref = reference_gradients(ops, q, k, v, go, pairs, ("softmax",), False, 0.5, 10**6)["softmax"]
    b, g = pairs[0]
    got = [ops.zeros((B, Hq, n, d)), ops.zeros((B, Hkv, m, d)), ops.zeros((B, Hkv, m, dv))]
    got[0][b, 2 * g:2 * g + 2] = ref[0][0]
    got[1][b, g] = ref[1][0]
    got[2][b, g] = ref[2][0]
    e = gradient_errors(ops, got, ref, pairs, Hkv)
    check(e == {"err_dq": 0.0, "err_dk": 0.0, "err_dv": 0.0, "err": 0.0}, f"gradient_errors of the reference: {e}")
    top = ops.absmax(ref[1][0])
    got[1][b, g, 3, 1] += 1e-3 * top
    got[0][0, 0, 0, 0] = math.nan  # outside the checked pair: not read
    e = gradient_errors(ops, got, ref, pairs, Hkv)
    check(abs(e["err_dk"] - 1e-3) < 1e-12 and e["err"] == e["err_dk"] and e["err_dq"] == 0.0,
          f"gradient_errors, one dK entry 1e-3 off: {e}")
    got[2][b, g, 0, 0] = math.inf
    check(gradient_errors(ops, got, ref, pairs, Hkv)["err_dv"] == math.inf, "gradient_errors: inf in dV")
    repeated = [got[0], ops.zeros((B, Hq, m, d)), ops.zeros((B, Hq, m, dv))]
    for x, r in ((repeated[1], ref[1][0]), (repeated[2], ref[2][0])):
        x[b, 2 * g] = r * 0.25
        x[b, 2 * g + 1] = r * 0.75
    e = gradient_errors(ops, repeated, ref, pairs, Hkv)
    check(e["err_dk"] < 1e-15 and e["err_dv"] < 1e-15, f"gradient_errors sums repeated K/V heads: {e}")


def plain_softmax(z):
    mx = max(z)
    if mx == -math.inf:
        return [0.0] * len(z)
    e = [math.exp(x - mx) for x in z]
    return [x / sum(e) for x in e]


def plain_entmax15(z):
    """Bisection on one row in plain Python floats (the loop reference)."""
    x = [t / 2 for t in z]
    mx = max(x)
    if mx == -math.inf:
        return [0.0] * len(z)
    lo, hi = mx - 1, mx
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(max(t - mid, 0.0) ** 2 for t in x) >= 1:
            lo = mid
        else:
            hi = mid
    tau = (lo + hi) / 2
    return [max(t - tau, 0.0) ** 2 for t in x]


def self_test_pure(check):
    check(attention_flops(1, 1, 2, 2, 1, False) == 16, "flops of a 2x2 head, d = 1")
    check(attention_flops(1, 1, 2, 2, 1, True) == 8, "causal halves the flops")
    check(attention_flops(1, 16, 4096, 4096, 64, False) == 4 * 16 * 4096 * 4096 * 64, "flops (1, 16, 4096, 64)")
    check(attention_flops(4, 32, 16384, 16384, 128, True) == 2 * 4 * 32 * 16384 ** 2 * 128, "flops causal (4, 32)")
    check(peak_tflops("NVIDIA H200")[0] == 989.0, "H200 peak")
    check(peak_tflops("NVIDIA H100 80GB HBM3")[0] == 989.0, "H100 SXM peak")
    check(peak_tflops("NVIDIA H100 PCIe")[0] == 756.0, "H100 PCIe peak")
    check(peak_tflops("NVIDIA H200 NVL")[0] == 835.0, "H200 NVL peak")
    check(peak_tflops("Tesla T4") == (None, None), "an unknown chip has no peak")

    check(training_flops(1, 1, 2, 2, 1, False) == 56, "a training step: 3.5 times the forward's flops")
    check(training_flops(4, 32, 16384, 16384, 128, True) == 3.5 * 2 * 4 * 32 * 16384 ** 2 * 128, "training, causal")
    check(ref_head_pairs(1, 16, 1) == [(0, 15)], "one reference head: the last")
    check(ref_head_pairs(4, 8, 4) == [(0, 7), (1, 7), (2, 7), (3, 7)], "four reference heads, one a sequence")
    check(ref_head_pairs(2, 2, 0) == [(0, 0), (0, 1), (1, 0), (1, 1)] == ref_head_pairs(2, 2, 9), "every pair")

    class Modes:
        backward, backward_only = False, False

    check(run_modes(Modes) == ["forward"], "forward by default")
    Modes.backward = True
    check(run_modes(Modes) == ["forward", "backward"], "--backward adds training")
    Modes.backward_only = True
    check(run_modes(Modes) == ["backward"], "--backward-only")

    rows = sample_rows(4096, 256, 0)
    check(len(rows) == 256 and rows == sorted(set(rows)), "256 distinct sorted rows")
    check(rows[0] == 0 and rows[-1] == 4095 and 2048 in rows, "first, middle and last rows are sampled")
    check(sample_rows(4096, 256, 0) == rows, "the sample is seeded")
    check(sample_rows(100, 0) == list(range(100)) and sample_rows(3, 10) == [0, 1, 2], "all rows")
    check(len(sample_rows(8, 6)) == 6, "a sample of 6 of 8 rows")

    class Args:
        d, heads, n, long_n, long_heads, causal, dtype = "64,128", "1x16x16,4x32x8", "4096,16384", "65536", \
            "1x16x16", "both", "bf16,fp16"

    shapes = build_shapes(Args)
    check(len(shapes) == 40, f"the issue's grid is 40 shapes ({len(shapes)})")
    check(sum(1 for s in shapes if s["n"] == 65536) == 8 and all(
        s["Hq"] == 16 for s in shapes if s["n"] == 65536), "n = 65536 for one head count")
    check(parse_heads("4x32x8") == [(4, 32, 8)], "parse_heads")

    # The tables: a run with an ok, a failed, a missing and a refused entry.
    ok = {"out": "16-bit", "status": "ok", "ms": 0.5, "tflops": 137.4, "err": 3.2e-3, "first_call_s": 12.5}
    results = {
        "meta": {"device": "NVIDIA H200", "peak_tflops": 989.0, "peak_source": "H200 SXM bf16 dense",
                 "samples": 10, "warmup": 2, "ref_rows_label": "256 rows", "notes": ["a note"]},
        "shapes": [dict(B=1, Hq=16, Hkv=16, n=4096, m=4096, d=64, causal=True, dtype="bf16", round16_floor=3.9e-3,
                        entmax_support_mean=57.25, results=[
                            dict(method="SDPA softmax", note="", variants=[dict(ok, ms=0.1, tflops=687.2)],
                                 first_call_s=0.2),
                            dict(method="AdaSplash-2", note="", variants=[ok], first_call_s=12.5),
                            dict(method="entgraph softmax", note="missing", variants=[], first_call_s=None),
                            dict(method="entgraph entmax15", note="", first_call_s=1.0, variants=[
                                dict(ok, ms=0.3), {"out": "float32", "status": "not offered: refused: mixed dtypes"}]),
                            dict(method="AdaSplash-1", note="", first_call_s=None, variants=[
                                {"out": "16-bit", "status": "failed: AssertionError: x"}]),
                        ])],
    }
    md = markdown(results)
    check("| 1×16/16 n=4096 d=64 | bf16 | 1 | SDPA softmax | 0.100 | 687.2 | 69.5 | 3.2e-03 | - | - | 0.20 |  |" in md,
          "the SDPA row")
    check("| entgraph entmax15 | 0.300 | 137.4 | 13.9 | 3.2e-03 | not offered | not offered |" in md,
          "a refused float32 variant")
    check("| AdaSplash-1 | failed |" in md and "| entgraph softmax | - |" in md and "| missing |" in md,
          "failed and missing entries")
    check("| 1×16/16 n=4096 d=64 | bf16 | 1 | 0.60 | - | - |" in md, "ratios: entmax15 / AdaSplash-2")
    check("support: 57.2 keys" in md, "the reference's support size")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        write_results(folder, results)
        back = json.loads((Path(folder) / "peers.json").read_text())
        check(back == results, "peers.json round-trips")
        check((Path(folder) / "peers.md").read_text() == md, "peers.md is the markdown")

    # The argtypes against the C signatures of native/cuda/ctypes/entgraph_cuda_ctypes.cpp.
    source = (REPO / "native/cuda/ctypes/entgraph_cuda_ctypes.cpp").read_text()
    c_types = {"int": ctypes.c_int, "std::int64_t": ctypes.c_int64, "double": ctypes.c_double,
               "const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "std::size_t": ctypes.c_size_t,
               "const std::int64_t*": ctypes.POINTER(ctypes.c_int64),
               "const std::int32_t*": ctypes.POINTER(ctypes.c_int32),
               "std::size_t*": ctypes.POINTER(ctypes.c_size_t), "void": None}
    for name, argtypes in ctypes_signatures().items():
        found = re.search(r"\b" + name + r"\(([^)]*)\)\s*\{", source)
        if not found:
            check(False, f"{name} is not defined in entgraph_cuda_ctypes.cpp")
            continue
        params = [p.strip() for p in found.group(1).split(",") if p.strip()]
        declared = [c_types.get(re.sub(r"\s+\w+$", "", p).strip(), "?") for p in params if p != "void"]
        check(declared == argtypes, f"{name}: argtypes {argtypes} vs C parameters {params}")

    # Without a GPU the run stops at once, saying why, and exits non-zero.
    no_gpu = True
    try:
        import torch

        no_gpu = not torch.cuda.is_available()
    except ImportError:
        pass
    if no_gpu:
        for extra in ([], ["--backward-only"]):
            proc = subprocess.run([sys.executable, __file__, "--quick", "--out", os.devnull] + extra,
                                  capture_output=True, text=True)
            check(proc.returncode != 0 and "gpu_peers:" in proc.stderr and
                  ("torch is not installed" in proc.stderr or "no usable GPU" in proc.stderr),
                  f"no GPU {extra}: exit {proc.returncode}, {proc.stderr.strip()!r}")


def self_test_training_tables(check):
    """The training table and its ratios: ok, failed, missing and refused
    entries, a shape whose training failed, and which tables each mode writes."""
    ok = {"out": "16-bit", "status": "ok", "ms": 2.0, "tflops": 240.5, "err": 4.0e-3, "err_dq": 1.0e-3,
          "err_dk": 4.0e-3, "err_dv": 2.0e-3, "first_call_s": 30.0}
    f32 = dict(ok, out="float32", ms=2.2, err=6.0e-4)
    shape = dict(B=1, Hq=16, Hkv=16, n=4096, m=4096, d=64, causal=True, dtype="bf16", results=[], training=[
        dict(method="SDPA softmax", note="", variants=[dict(ok, ms=1.0)], first_call_s=0.3),
        dict(method="AdaSplash-2", note="", variants=[ok], first_call_s=30.0),
        dict(method="entgraph softmax", note="missing", variants=[], first_call_s=None),
        dict(method="entgraph entmax15", note="", first_call_s=1.5, variants=[dict(ok, ms=1.2), f32]),
    ], training_ref=dict(round16_floor=3.9e-3, reference_s=2.25, pairs=[[0, 15]]))
    failed = dict(shape, causal=False, training=[], training_error="OutOfMemoryError: CUDA out of memory")
    meta = {"device": "NVIDIA H200", "peak_tflops": 989.0, "samples": 10, "warmup": 3, "modes": ["backward"],
            "ref_heads_label": "1 key/value head(s)"}
    md = markdown({"meta": meta, "shapes": [shape, failed]})
    head = "| 1×16/16 n=4096 d=64 | bf16 | 1 |"
    check(f"{head} entgraph entmax15 | 1.200 | 240.5 | 24.3 | 4.0e-03 | 1.0e-03 | 4.0e-03 | 2.0e-03 | 6.0e-04 | "
          "2.200 | 1.50 |  |" in md, "the training row of entgraph entmax15")
    check(f"{head} AdaSplash-2 | 2.000 |" in md and f"{head} entgraph softmax | - |" in md and "| missing |" in md,
          "AdaSplash-2 and a missing method in the training table")
    check(f"{head} (16-bit floor) | | | | 3.9e-03 | | | | | | | float64 gradients: 2.2 s |" in md,
          "the gradients' 16-bit floor")
    check("| 1×16/16 n=4096 d=64 | bf16 | 0 | (training failed) |" in md and "OutOfMemoryError" in md,
          "a shape whose training failed")
    check(f"{head} 0.60 | - | - |" in md, "training ratio: entmax15 / AdaSplash-2")
    check("## Training" in md and "## Forward" not in md, "--backward-only writes the training table only")
    refused = dict(shape, training=[dict(method="entgraph entmax15", note="", first_call_s=None, variants=[
        dict(ok), {"out": "float32", "status": "not offered: refused: x"}])])
    md = markdown({"meta": dict(meta, modes=["forward", "backward"]), "shapes": [refused]})
    check("## Forward" in md and "## Training" in md, "--backward writes both tables")
    check("float32 grads: not offered: refused: x" in md, "a refused float32 gradient variant is named")
    md = markdown({"meta": dict(meta, modes=["forward"]), "shapes": [shape]})
    check("## Training" not in md, "the forward run has no training table")


def self_test_library(check):
    """Where libentgraph_cuda_ctypes.so is built: EntgraphLibrary's calls of
    it, with stand-in tensors at made-up addresses, reach the checks that
    need no GPU, and what they refuse shows each argument in its place."""
    if not DEFAULT_LIB.exists():
        print(f"gpu_peers self-test: {DEFAULT_LIB} is not built: its calls are not checked")
        return
    try:
        lib = EntgraphLibrary(DEFAULT_LIB)
    except (OSError, AttributeError) as e:
        check(False, f"{DEFAULT_LIB} does not load: {e}")
        return

    class Stand:
        """What EntgraphLibrary reads of a torch tensor, contiguous."""

        def __init__(self, shape, dtype, address):
            self.shape, self.dtype, self.address = shape, dtype, address

        def data_ptr(self):
            return self.address

        def stride(self):
            _, h, r, c = self.shape
            return (h * r * c, r * c, c, 1)

    def tensors(dtype, d, grad_dtypes=("float32",) * 3, n=8, grad_q_at=None):
        q = Stand((2, 4, n, d), dtype, 1 << 20)
        k, v = Stand((2, 2, 8, d), dtype, 2 << 20), Stand((2, 2, 8, d), dtype, 3 << 20)
        go = Stand((2, 4, n, d), dtype, 4 << 20)
        grads = (Stand(q.shape, grad_dtypes[0], grad_q_at or 5 << 20), Stand(k.shape, grad_dtypes[1], 6 << 20),
                 Stand(v.shape, grad_dtypes[2], 7 << 20))
        return q, k, v, go, grads

    def refusal(call):
        try:
            call()
        except PeerError as e:
            return e.status, str(e)
        return 0, ""

    def backward(q, k, v, go, grads):
        return lambda: lib.bind_backward(q, k, v, go, grads, "entmax15", True, 0.125, None)()

    cases = [
        ("backward, float32 inputs", backward(*tensors("float32", 64)), "backward: refused: "
         "cuda::batched_attention_backward: q.dtype is not supported (got float32"),
        ("backward, d = 32", backward(*tensors("bfloat16", 32)), "(got 32, expected 64 or 128)"),
        ("backward, grad_k's dtype code", backward(*tensors("bfloat16", 64, ("float32", "float16", "float32"))),
         "grad_k.dtype is neither q.dtype nor float32 (got float16, q.dtype bfloat16)"),
        ("backward, grad_q at k's address", backward(*tensors("bfloat16", 64, grad_q_at=2 << 20)),
         "grad_q overlaps k"),
    ]
    q, k, v, go, grads = tensors("bfloat16", 64)
    go_short = Stand((2, 4, 7, 64), "bfloat16", 4 << 20)  # its strides, not q's rows: the views overlap
    cases.append(("backward, grad_out's strides", backward(q, k, v, go_short, grads),
                  "grad_out.head_stride is too small"))
    q, k, v, _, _ = tensors("bfloat16", 32)
    out = Stand(q.shape, "bfloat16", 4 << 20)
    cases.append(("forward, d = 32", lambda: lib.bind(q, k, v, out, "entmax15", True, 0.125, None, None)(),
                  "forward: refused: cuda::batched_attention_forward: q.cols (d) is not supported"))
    cases.append(("workspace, d = 32", lambda: lib.workspace_bytes(q, k, "bfloat16", "entmax15", True),
                  "workspace size: refused: cuda::batched_attention_workspace_bytes"))
    for what, call, expected in cases:
        status, message = refusal(call)
        check(status == 1 and expected in message, f"library, {what}: status {status}, {message!r}")


def main(argv=None):
    training = __doc__[__doc__.index("Training (--backward"):__doc__.index("\nThe float64 reference is")]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=training,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu-peers", help="folder for peers.json and peers.md (default gpu-peers)")
    p.add_argument("--lib", default=str(DEFAULT_LIB), help="libentgraph_cuda_ctypes.so (default: build/release's)")
    p.add_argument("--peers", default=str(DEFAULT_PEERS), help="folder holding adasplash/ (tools/fetch_peers.sh)")
    p.add_argument("--methods", default="sdpa,adasplash,entgraph", help="subset of sdpa,adasplash,entgraph")
    p.add_argument("--d", default="64,128", help="head dimensions (default 64,128)")
    p.add_argument("--heads", default="1x16x16,4x32x8", help="BxHQxHKV list (default 1x16x16,4x32x8)")
    p.add_argument("--n", default="4096,16384", help="sequence lengths for every --heads (default 4096,16384)")
    p.add_argument("--long-n", default="65536", help="lengths run for --long-heads only (default 65536; '' none)")
    p.add_argument("--long-heads", default="1x16x16", help="head counts of --long-n (default 1x16x16)")
    p.add_argument("--causal", default="both", choices=["both", "causal", "noncausal"])
    p.add_argument("--dtype", default="bf16,fp16", help="bf16, fp16 or both (default both)")
    p.add_argument("--quick", action="store_true", help="d=64, 1x16x16, n=4096, bf16, causal and not (replaces the shape flags)")
    p.add_argument("--warmup", type=int, default=3, help="calls after the first one, before timing (default 3)")
    p.add_argument("--samples", type=int, default=10, help="timed samples; the median is reported (default 10)")
    p.add_argument("--time-budget", type=float, default=3.0,
                   help="seconds of samples per variant; at least 3 samples are taken (default 3)")
    p.add_argument("--ref-rows", type=int, default=256, help="query rows checked a head (0: all; default 256)")
    p.add_argument("--ref-gb", type=float, default=8.0, help="GPU memory for the float64 reference (default 8)")
    p.add_argument("--backward", action="store_true",
                   help="also time a training step per shape (forward, then backward: AdaSplash and SDPA through "
                        "autograd, entgraph's backward through the library) and check its gradients; its own table")
    p.add_argument("--backward-only", action="store_true", help="the training step without the forward's run")
    p.add_argument("--ref-heads", type=int, default=1,
                   help="key/value heads whose gradients (every query row of their query heads) the float64 "
                        "reference checks in training (0: all; default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak", type=float, default=None, help="the chip's bf16 dense TFLOP/s, if not in the table")
    p.add_argument("--sdpa-backend", default="auto", choices=["auto", "flash", "cudnn", "efficient"],
                   help="SDPA kernels allowed (auto: flash, cuDNN, efficient; never math)")
    p.add_argument("--v2-niter", type=int, default=1, help="adasplash_v2's niter (its default 1)")
    p.add_argument("--v1-niter", type=int, default=10, help="adasplash_v1's niter (its default 10)")
    p.add_argument("--peer-fp32", action="store_true",
                   help="also run AdaSplash on float32 copies of the inputs (float32 output; slow to compile)")
    p.add_argument("--self-test", action="store_true", help="check what needs no GPU, then exit")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.quick:
        args.d, args.heads, args.n, args.long_n, args.dtype = "64", "1x16x16", "4096", "", "bf16"
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
