#!/usr/bin/env python3
"""Writes data/sample_scores.npy: 6 x 12 float32 attention scores.

Standard library only (numpy is not needed). Values are Gaussian with a fixed
seed, scaled by 1.5 and rounded to two decimals so that they read well in
`entgraph demo --in data/sample_scores.npy`. Rerunning gives the same file.
"""
import os
import random
import struct
import sys

ROWS, COLS, SEED = 6, 12, 20240611


def npy_bytes(values, shape):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % shape
    # magic (6) + version (2) + header length (2) + header + '\n', padded to 64.
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")
            + struct.pack("<%df" % len(values), *values))


def main():
    rng = random.Random(SEED)
    values = [round(1.5 * rng.gauss(0.0, 1.0), 2) for _ in range(ROWS * COLS)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "sample_scores.npy")
    with open(out, "wb") as f:
        f.write(npy_bytes(values, (ROWS, COLS)))
    print("wrote", out)


if __name__ == "__main__":
    main()
