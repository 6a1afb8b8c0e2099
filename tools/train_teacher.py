#!/usr/bin/env python3
"""Train entgraph's teacher models: tiny byte-level transformers with
1.5-entmax attention in every head, on the King James Bible.

Needed only to retrain (never to build or test): Debian's python3-torch and
python3-numpy, and the text from Debian's bible-kjv (the `bible` program)
with bible-kjv-text (the data). Run with Debian's interpreter:

    apt-get install python3-torch python3-numpy libopenblas0-pthread bible-kjv
    /usr/bin/python3 tools/train_teacher.py --kind causal --out data/teacher-causal
    /usr/bin/python3 tools/train_teacher.py --kind masked --out data/teacher-masked \
        --init data/teacher-causal/model.safetensors
    /usr/bin/python3 tools/train_teacher.py --kind long --out data/teacher-long \
        --init data/teacher-causal/model.safetensors

Writes, in --out: model.safetensors (float16 weights), config.json (the
architecture; docs/FORMATS.md), train.log, and fixture/ (a capture of the
float16 model on two held-out sequences plus its logits, which the C++ forward
pass is tested against). With --kind causal it also writes data/heldout.txt.

Debian's torch calls whatever libblas.so.3 the system provides: with the
reference BLAS a step is about 10x slower than with OpenBLAS, hence
libopenblas0-pthread above.

The architecture (mirrored by core/src/model/teacher.cpp):
  x = tok_emb[byte] + pos_emb[position]     (positions "learned": causal, masked)
  x = tok_emb[byte]                         (positions "rotary": long)
  per layer:  x += o(attention(ln1(x)));  x += fc2(relu(fc1(ln2(x))))
  attention per head: p = entmax15(scale * q k^T) (causal mask for the causal
                      and long models), out = p v; q, k, v, o: Linear with bias;
                      rotary models rotate q and k by their position first
  logits = head(ln_f(x)) over the 256 byte values

The long teacher (--kind long) is causal, trained on 512-byte windows, with
rotary positions (RoFormer, Su et al. 2021) in the half-split layout: for
position t and i < h = head_dim/2, with theta_i = base^(-2i/head_dim),
  x'[i]   = x[i] cos(t theta_i) - x[i+h] sin(t theta_i)
  x'[i+h] = x[i] sin(t theta_i) + x[i+h] cos(t theta_i).
base = 100 makes every frequency turn at least once within the training
window (longest wavelength 2 pi 100^(15/16) = 471 bytes), so no rotation angle
met beyond 512 bytes is new to the model (docs/decisions in data/README.md).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # before numpy/torch load OpenBLAS

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_capture import write_capture  # noqa: E402

MASK_TOKEN = 256  # the masked model's [MASK]; bytes are 0..255
LONG_CONTEXT = 8192  # the longest sequence the long teacher is run on (and measured at)
ROTARY_BASE = 100.0  # every rotary frequency turns within a 512-byte window


# ---------------------------------------------------------------------------
# The corpus: the KJV from Debian's bible-kjv, one verse per line, chapters
# separated by a blank line. Every 20th chapter (index % 20 == 7) is held out.

def load_corpus():
    try:
        raw = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("train_teacher: the `bible` program is missing: apt-get install bible-kjv")
    chapters, verses, verse = [], [], None
    for line in raw.splitlines():
        if re.fullmatch(r"\S.* \d+", line):  # "Genesis 1": a chapter heading
            if verse is not None:
                verses.append(verse)
            if verses:
                chapters.append("\n".join(verses))
            verses, verse = [], None
        elif m := re.fullmatch(r"\s+\d+ (.*)", line):  # "  3 And God said, ..."
            if verse is not None:
                verses.append(verse)
            verse = m.group(1)
        elif line.strip() and verse is not None:  # a wrapped continuation
            verse += " " + line.strip()
    if verse is not None:
        verses.append(verse)
    chapters.append("\n".join(verses))
    train = "\n\n".join(c for i, c in enumerate(chapters) if i % 20 != 7)
    heldout = "\n\n".join(c for i, c in enumerate(chapters) if i % 20 == 7)
    return train.encode("ascii"), heldout.encode("ascii"), len(chapters)


# ---------------------------------------------------------------------------
# 1.5-entmax (Peters et al., 2019): exact, by sorting; gradient from the
# support: dz = s*g - s*sum(s*g)/sum(s) with s = sqrt(p).

class Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        z = z / 2
        z = z - z.max(dim=-1, keepdim=True).values  # fully masked rows do not occur
        zs, _ = torch.sort(z, dim=-1, descending=True)
        valid = torch.isfinite(zs)
        zs0 = torch.where(valid, zs, torch.zeros_like(zs))
        rho = torch.cumsum(valid.to(z.dtype), dim=-1).clamp(min=1)
        mean = torch.cumsum(zs0, dim=-1) / rho
        mean_sq = torch.cumsum(zs0 * zs0, dim=-1) / rho
        delta = (1 - rho * (mean_sq - mean * mean)) / rho
        tau = mean - torch.sqrt(delta.clamp(min=0))
        support = ((tau <= zs0) & valid).sum(dim=-1, keepdim=True)
        tau_star = tau.gather(-1, support - 1)
        p = torch.clamp(z - tau_star, min=0) ** 2
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        s = p.sqrt()
        gs = g * s
        return gs - s * (gs.sum(-1, keepdim=True) / s.sum(-1, keepdim=True))


# ---------------------------------------------------------------------------

def attention_probs(q, k, causal, rows=1024):
    """entmax15(q k^T / sqrt(dh)) with the causal mask; long sequences in blocks of
    query rows (the transform is row-wise) so that memory stays O(rows * n)."""
    n = q.shape[-2]
    blocks = []
    for r0 in range(0, n, rows):
        scores = (q[..., r0:r0 + rows, :] @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            i = torch.arange(r0, min(n, r0 + rows))[:, None]
            scores = scores.masked_fill(torch.arange(n)[None, :] > i, float("-inf"))
        blocks.append(Entmax15.apply(scores))
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-2)


def rotate(t, base):
    """Rotary positions on [B, H, T, dh], half-split layout (see the module doc)."""
    n, dh = t.shape[-2], t.shape[-1]
    h = dh // 2
    theta = base ** (-2.0 * torch.arange(h, dtype=torch.float64) / dh)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * theta[None, :]
    cos, sin = angle.cos().to(t.dtype), angle.sin().to(t.dtype)
    a, b = t[..., :h], t[..., h:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, heads, d_mlp, rotary_base=None):
        super().__init__()
        self.heads = heads
        self.rotary_base = rotary_base
        self.ln1 = torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, d_mlp)
        self.fc2 = torch.nn.Linear(d_mlp, d)

    def split(self, t):  # [B, T, d] -> [B, H, T, d/H]
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, causal, record=None):
        h = self.ln1(x)
        q, k, v = self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h))
        if self.rotary_base is not None:
            q, k = rotate(q, self.rotary_base), rotate(k, self.rotary_base)
        p = attention_probs(q, k, causal)
        if record is not None:
            record.append((q, k, v, p))
        a = (p @ v).transpose(1, 2).reshape(x.shape)
        x = x + self.o(a)
        return x + self.fc2(F.relu(self.fc1(self.ln2(x))))


class Teacher(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg["d_model"]
        self.tok_emb = torch.nn.Embedding(cfg["vocab"], d)
        self.rotary = cfg.get("positions", "learned") == "rotary"
        if not self.rotary:
            self.pos_emb = torch.nn.Embedding(cfg["context"], d)
        base = cfg.get("rotary_base") if self.rotary else None
        self.layers = torch.nn.ModuleList(Block(d, cfg["heads"], cfg["d_mlp"], base) for _ in range(cfg["layers"]))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, cfg["outputs"])
        for name, w in self.named_parameters():
            if name.endswith("weight") and w.dim() == 2:
                torch.nn.init.normal_(w, std=0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(w)

    def forward(self, tokens, record=None):
        n = tokens.shape[1]
        x = self.tok_emb(tokens)
        if not self.rotary:
            x = x + self.pos_emb(torch.arange(n))
        for layer in self.layers:
            x = layer(x, self.cfg["causal"], record)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    """tensors: name -> float16 numpy array. The format: u64 header size, JSON, data."""
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name]).astype("<f2").tobytes()
        header[name] = {"dtype": "F16", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # align the data to 8 bytes
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make_batch(data, batch, context, rng):
    starts = rng.integers(0, len(data) - context, size=batch)
    return torch.from_numpy(np.stack([data[s:s + context] for s in starts]).astype(np.int64))


def mask_batch(x, rng, rate):
    """BERT-style: rate of the positions are predicted; 80% become [MASK], 10% a random byte, 10% stay."""
    chosen = torch.from_numpy(rng.random(x.shape) < rate)
    r = torch.from_numpy(rng.random(x.shape))
    inputs = x.clone()
    inputs[chosen & (r < 0.8)] = MASK_TOKEN
    random_bytes = torch.from_numpy(rng.integers(0, 256, size=x.shape))
    swap = chosen & (r >= 0.8) & (r < 0.9)
    inputs[swap] = random_bytes[swap]
    return inputs, chosen


def heldout_bits(model, data, context, kind, windows=64):
    """Bits per byte on the first `windows` non-overlapping windows of held-out text.
    The masked model is scored on 15% of the positions, replaced by [MASK] (fixed seed)."""
    rng = np.random.default_rng(1234)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for w in range(windows):
            x = torch.from_numpy(data[w * context:(w + 1) * context].astype(np.int64))[None]
            if kind != "masked":
                logits = model(x[:, :-1])
                total += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
                count += x.shape[1] - 1
            else:
                chosen = torch.from_numpy(rng.random(x.shape) < 0.15)
                inputs = x.masked_fill(chosen, MASK_TOKEN)
                logits = model(inputs)
                total += F.cross_entropy(logits[chosen], x[chosen], reduction="sum").item()
                count += int(chosen.sum())
    model.train()
    return total / count / math.log(2)


def unigram_bits(train, heldout):
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1  # add-one: unseen bytes stay finite
    p = counts / counts.sum()
    return float(-np.mean(np.log2(p[heldout])))


def gold_sparsity(model, data, context, windows=16):
    """Mean over heads and 256-byte held-out windows of 1 - |support| / allowed pairs."""
    causal = model.cfg["causal"]
    n = context
    allowed = n * (n + 1) / 2 if causal else n * n
    per_layer = np.zeros(model.cfg["layers"])
    with torch.no_grad():
        for w in range(windows):
            x = torch.from_numpy(data[w * n:(w + 1) * n].astype(np.int64))[None]
            record = []
            model(x, record)
            for layer, (_, _, _, p) in enumerate(record):
                edges = (p[0] > 0).sum(dim=(-1, -2)).double()  # per head
                per_layer[layer] += float((1 - edges / allowed).mean()) / windows
    return per_layer


def round_to_float16(model):
    """Rounds every weight to float16 (what is shipped) and keeps the model in float32."""
    tensors = {name: p.detach().numpy().astype(np.float16) for name, p in model.state_dict().items()}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            p.copy_(torch.from_numpy(tensors[name].astype(np.float32)))
    return tensors


def export(model, out, tensors, heldout_text, meta):
    """Weights, config, and the fixture: the float16-rounded model evaluated in float32."""
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "entgraph-teacher"})
    cfg = dict(model.cfg)
    cfg.update(meta)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")

    # Fixture: a held-out sequence of 160 bytes and a short one with bytes
    # outside the training alphabet (UTF-8), run one sequence at a time.
    texts = [heldout_text[:160].decode("ascii"), "Naïve café — “entmax” ∑ 1.5"]
    model.eval()
    q_all, k_all, v_all, logits_all, lengths = [], [], [], [], []
    with torch.no_grad():
        for text in texts:
            x = torch.tensor([list(text.encode("utf-8"))])
            record = []
            logits_all.append(model(x, record)[0].numpy())
            q_all.append(np.stack([r[0][0].numpy() for r in record]))
            k_all.append(np.stack([r[1][0].numpy() for r in record]))
            v_all.append(np.stack([r[2][0].numpy() for r in record]))
            lengths.append(x.shape[1])
    fixture = os.path.join(out, "fixture")
    write_capture(fixture, np.concatenate(q_all, axis=2), np.concatenate(k_all, axis=2), lengths,
                  values=np.concatenate(v_all, axis=2), alpha=1.5, causal=model.cfg["causal"], texts=texts,
                  provenance={"model": cfg["name"], "weights": "model.safetensors (float16, evaluated in float32)",
                              "made_by": "tools/train_teacher.py"})
    np.save(os.path.join(fixture, "logits.npy"), np.concatenate(logits_all).astype(np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=["causal", "masked", "long"], required=True,
                    help="long: causal with rotary positions, trained on --window bytes, run up to 8192")
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", help="start from these weights (safetensors written by this script)")
    ap.add_argument("--export-only", action="store_true",
                    help="no training: reload --out's weights, recompute the metrics, rewrite config and fixture")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--window", type=int, help="training window in bytes (default 256; long: 512)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--mask-rate", type=float, default=0.15)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "train.log"), "a" if args.export_only else "w")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    train_bytes, heldout_bytes, n_chapters = load_corpus()
    train = np.frombuffer(train_bytes, dtype=np.uint8)
    heldout = np.frombuffer(heldout_bytes, dtype=np.uint8)
    if args.kind == "causal":
        data_dir = os.path.dirname(os.path.abspath(args.out))
        with open(os.path.join(data_dir, "heldout.txt"), "wb") as f:
            f.write(heldout_bytes[:8192])

    long = args.kind == "long"
    window = args.window or (512 if long else 256)
    cfg = {"format": "entgraph-teacher", "version": 1, "name": f"entgraph-teacher-{args.kind}",
           "kind": "masked" if args.kind == "masked" else "causal", "causal": args.kind != "masked",
           "vocab": 257, "outputs": 256, "mask_token": MASK_TOKEN, "context": LONG_CONTEXT if long else window,
           "d_model": 128, "layers": 4, "heads": 4, "d_mlp": 512, "alpha": 1.5, "layer_norm_eps": 1e-5,
           "weights": "model.safetensors"}
    if long:
        cfg.update({"positions": "rotary", "rotary_base": ROTARY_BASE})
    model = Teacher(cfg)
    init = os.path.join(args.out, "model.safetensors") if args.export_only else args.init
    if init:
        from_file = read_safetensors(init)
        weights = {k: torch.from_numpy(v.astype(np.float32)) for k, v in from_file.items()}
        if model.rotary:  # a learned-position model's other weights are a warm start
            weights.pop("pos_emb.weight", None)
        model.load_state_dict(weights)
    if args.export_only:
        with open(os.path.join(args.out, "config.json")) as f:
            training = json.load(f)["training"]
        finish(model, args, training, train, heldout, heldout_bytes, say)
        return
    params = sum(p.numel() for p in model.parameters())
    say(f"# {cfg['name']}: {params} parameters; corpus: KJV ({n_chapters} chapters), "
        f"{len(train)} train bytes, {len(heldout)} held-out bytes; args: {vars(args)}")
    unigram = unigram_bits(train, heldout)
    say(f"unigram held-out bits/byte: {unigram:.3f}")

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, min(100, args.steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))))
    start = time.time()
    for step in range(1, args.steps + 1):
        x = make_batch(train, args.batch, window + (1 if cfg["causal"] else 0), rng)
        if cfg["causal"]:
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        else:
            inputs, chosen = mask_batch(x, rng, args.mask_rate)
            logits = model(inputs)
            loss = F.cross_entropy(logits[chosen], x[chosen])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0:
            say(f"step {step} loss {loss.item() / math.log(2):.3f} bits lr {sched.get_last_lr()[0]:.2e} "
                f"elapsed {time.time() - start:.0f}s")
        if step % args.eval_every == 0 or step == args.steps:
            say(f"step {step} held-out bits/byte {heldout_bits(model, heldout, window, args.kind):.3f}")

    training = {"steps": args.steps, "batch": args.batch, "window": window, "lr": args.lr, "seed": args.seed, "threads": args.threads,
                "seconds": round(time.time() - start), "init": args.init,
                "corpus": "King James Bible from Debian bible-kjv-text 4.38 (public domain), "
                          "chapters with index % 20 != 7"}
    finish(model, args, training, train, heldout, heldout_bytes, say)


def finish(model, args, training, train, heldout, heldout_bytes, say):
    """Rounds to float16, measures the shipped model, and exports it."""
    tensors = round_to_float16(model)
    window = training.get("window", model.cfg["context"])
    final = heldout_bits(model, heldout, window, args.kind)
    unigram = unigram_bits(train, heldout)
    sparsity = gold_sparsity(model, heldout, window)
    meta = {"training": training, "heldout_bits_per_byte": round(final, 4), "unigram_bits_per_byte": round(unigram, 4),
            "gold_sparsity_per_layer": [round(float(s), 4) for s in sparsity]}
    say(f"float16 model: held-out bits/byte {final:.3f} (unigram {unigram:.3f}); "
        f"gold sparsity per layer {np.round(sparsity, 4).tolist()} (first 16 held-out windows of {window} bytes)")
    if model.rotary:
        # Beyond the training window: the same first 64 KiB of held-out text
        # scored in windows of each length; sparsity on its first 32 KiB.
        bits, gold = {}, {}
        for n in (512, 2048, 8192):
            bits[str(n)] = round(heldout_bits(model, heldout, n, args.kind, windows=65536 // n), 4)
            say(f"held-out bits/byte at {n} bytes: {bits[str(n)]:.3f} (first 64 KiB, {65536 // n} windows)")
        for n in (1024, 4096, 8192):
            gold[str(n)] = [round(float(s), 4) for s in gold_sparsity(model, heldout, n, windows=32768 // n)]
            say(f"gold sparsity per layer at {n} bytes: {gold[str(n)]} (first 32 KiB, {32768 // n} windows)")
        meta.update({"heldout_bits_per_byte_at": bits, "gold_sparsity_per_layer_at": gold})
    export(model, args.out, tensors, heldout_bytes, meta)
    say("exported " + args.out)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F16", t
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f2").reshape(t["shape"])
    return out


if __name__ == "__main__":
    main()
