#!/usr/bin/env python3
"""Write the queries and keys of any PyTorch attention as an entgraph capture.

A capture (docs/FORMATS.md) is a folder with capture.json and float32 or
float16 .npy arrays of shape [layers, heads, tokens, head_dim], sequences
concatenated along tokens. This file has two parts:

* write_capture(): numpy + json only, usable without PyTorch;
* QKRecorder: forward hooks that collect Q and K (and V) from a model's
  attention modules while it runs, for any module whose projections you can
  name. Softmax models are captured with alpha=1.0, entmax models with their
  alpha; entgraph recomputes the attention graph from Q and K.

Run this file to see it work end to end on a small model built here (no
downloads):

    python3 tools/export_capture.py --out /tmp/demo_capture
    build/release/native/cli/entgraph info /tmp/demo_capture
"""
import argparse
import json
import math
import os

import numpy as np

FORMAT = "entgraph-capture"
VERSION = 1


def _per_head(value, layers, heads, name):
    """One value for the capture, or a [layers][heads] nested list."""
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.shape != (layers, heads):
            raise ValueError(f"{name}: expected one value or shape ({layers}, {heads}), got {arr.shape}")
        if np.all(arr == arr.flat[0]):
            return arr.flat[0].item()
        return arr.tolist()
    return value


def write_capture(out_dir, queries, keys, lengths, values=None, alpha=1.5, causal=False, scale=None,
                  texts=None, provenance=None, dtype="float32"):
    """Writes out_dir/capture.json, queries.npy, keys.npy (and values.npy).

    queries, keys, values: arrays [layers, heads, tokens, head_dim] (numpy or
    anything np.asarray accepts, e.g. CPU torch tensors); lengths: the tokens of
    each sequence, summing to tokens; alpha, causal, scale: one value or a
    [layers][heads] list (scale defaults to 1/sqrt(head_dim)); texts: optional
    list of strings, one per sequence; provenance: a JSON-able dict.
    """
    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype: expected 'float32' or 'float16', got {dtype!r}")
    q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
    k = np.ascontiguousarray(np.asarray(keys, dtype=np.float32))
    if q.ndim != 4 or q.shape != k.shape:
        raise ValueError(f"queries and keys must both be [layers, heads, tokens, head_dim]; got {q.shape} and {k.shape}")
    layers, heads, tokens, head_dim = q.shape
    lengths = [int(n) for n in lengths]
    if any(n < 1 for n in lengths) or sum(lengths) != tokens:
        raise ValueError(f"lengths {lengths} must be >= 1 and sum to the token count {tokens}")
    arrays = {"queries": q, "keys": k}
    if values is not None:
        v = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
        if v.shape != q.shape:
            raise ValueError(f"values must have the shape of queries {q.shape}; got {v.shape}")
        arrays["values"] = v
    for name, arr in arrays.items():
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} holds NaN or Inf")
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "layers": layers,
        "heads": heads,
        "head_dim": head_dim,
        "lengths": lengths,
        "alpha": _per_head(alpha, layers, heads, "alpha"),
        "causal": _per_head(causal, layers, heads, "causal"),
        "scale": _per_head(1.0 / math.sqrt(head_dim) if scale is None else scale, layers, heads, "scale"),
        "provenance": provenance or {},
    }
    if texts is not None:
        if len(texts) != len(lengths):
            raise ValueError(f"texts: {len(texts)} strings for {len(lengths)} sequences")
        meta["texts"] = list(texts)
    os.makedirs(out_dir, exist_ok=True)
    for name, arr in arrays.items():
        np.save(os.path.join(out_dir, name + ".npy"), arr.astype(np.float16 if dtype == "float16" else np.float32))
        meta[name] = name + ".npy"
    with open(os.path.join(out_dir, "capture.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")


class QKRecorder:
    """Collects Q, K (and V) from attention modules through forward hooks.

    modules: one entry per layer, each a dict {"q": module, "k": module,
    "v": module (optional)} naming the projection modules whose outputs are
    [batch, tokens, heads * head_dim]. Run the model on one sequence at a time
    (batch 1) inside `with recorder:`; each forward adds one sequence.
    """

    def __init__(self, modules, heads):
        self.modules = modules
        self.heads = heads
        self.handles = []
        self.sequences = []  # per sequence: {"q": [layers], "k": [...], "v": [...]}

    def _hook(self, layer, role):
        def hook(_module, _inputs, output):
            x = output.detach()
            if x.dim() != 3 or x.shape[0] != 1:
                raise ValueError("QKRecorder: run one sequence at a time, outputs [1, tokens, heads*head_dim]")
            t = x.shape[1]
            per_head = x[0].reshape(t, self.heads, -1).permute(1, 0, 2).cpu().numpy()
            if layer == 0 and role == "q":
                self.sequences.append({"q": {}, "k": {}, "v": {}})
            self.sequences[-1][role][layer] = per_head

        return hook

    def __enter__(self):
        for layer, mods in enumerate(self.modules):
            for role in ("q", "k", "v"):
                if role in mods:
                    self.handles.append(mods[role].register_forward_hook(self._hook(layer, role)))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def arrays(self, role):
        """[layers, heads, tokens, head_dim] for role 'q', 'k' or 'v'."""
        layers = len(self.modules)
        return np.stack([np.concatenate([s[role][l] for s in self.sequences], axis=1) for l in range(layers)])

    def lengths(self):
        return [s["q"][0].shape[1] for s in self.sequences]


def _demo(out_dir):
    """A two-layer softmax transformer built here, captured on two sentences."""
    import torch

    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(256, 64)
            # Separate Q/K/V projections per layer: the modules the recorder hooks.
            self.qkv = torch.nn.ModuleList([torch.nn.ModuleDict({r: torch.nn.Linear(64, 64) for r in "qkv"})
                                            for _ in range(2)])

        def forward(self, x):
            h = self.emb(x)
            for proj in self.qkv:
                q, k, v = proj["q"](h), proj["k"](h), proj["v"](h)
                heads = lambda t: t.view(1, -1, 4, 16).transpose(1, 2)
                att = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / 4.0, dim=-1)
                h = h + (att @ heads(v)).transpose(1, 2).reshape(1, -1, 64)
            return h

    model = Tiny().eval()
    texts = ["The quick brown fox jumps over the lazy dog.", "Attention graphs are sparse."]
    recorder = QKRecorder([{"q": p["q"], "k": p["k"], "v": p["v"]} for p in model.qkv], heads=4)
    with torch.no_grad(), recorder:
        for text in texts:
            model(torch.tensor([list(text.encode("utf-8"))]))
    write_capture(out_dir, recorder.arrays("q"), recorder.arrays("k"), recorder.lengths(),
                  values=recorder.arrays("v"), alpha=1.0, causal=False, scale=0.25, texts=texts,
                  provenance={"model": "tools/export_capture.py demo (random weights, softmax)"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="capture folder to write")
    out = parser.parse_args().out
    _demo(out)
    print("wrote", out)
