// TeacherOutput.graphCells (the demo page's per-keystroke path) against the
// documented one: every cell's bits from goldGraph and Predictor.predict on
// the copied Q and K, pair by pair; the metrics equal to compareGraphs';
// covered rows by brute force; a subset of heads gives the same bytes; the
// true graph from the weights and from goldGraph agree; bad arguments throw
// naming them.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { heldoutText, loadPackage, loadTeacher } from "./helpers.mjs";
import { ALLOWED, GOLD, PRED } from "../../web/cells.js";

let eg;
before(async () => {
  eg = await loadPackage();
});

for (const kind of ["teacher-causal", "teacher-masked"]) {
  describe(`graphCells on ${kind}`, () => {
    let teacher, out, predictor;
    before(() => {
      teacher = loadTeacher(eg, kind);
      out = teacher.forward(heldoutText(4500, 200), { probs: true });
      predictor = eg.Predictor.create("bigbird", { window: 2, global: 1, random: 5 });
      predictor.setUnionPatterns(1, 0);
    });
    after(() => {
      out.dispose();
      predictor.dispose();
      teacher.dispose();
    });

    test("every cell, the metrics and the covered rows equal the documented path's", () => {
      const { allowed: A, gold: G, predicted: P } = eg.cellBits;
      const n = out.tokens;
      const got = out.graphCells({ predictor });
      assert.equal(got.cells.length, out.layers * out.heads * n * n);
      assert.equal(got.heads.length, out.layers * out.heads);
      let goldEdges = 0;
      for (const [at, h] of got.heads.entries()) {
        assert.deepEqual([h.layer, h.head], [Math.floor(at / out.heads), at % out.heads]);
        const gold = out.goldGraph(h.layer, h.head);
        const pred = predictor.predict(out.queries(h.layer, h.head), out.keys(h.layer, h.head), {
          queries: n, keys: n, dim: out.headDim, layer: h.layer, head: h.head, causal: out.causal,
        });
        const has = (g, i, j) => g.indices.subarray(g.offsets[i], g.offsets[i + 1]).includes(j);
        let covered = 0;
        let wrong = 0;
        for (let i = 0; i < n; i++) {
          let rowCovered = true;
          for (let j = 0; j < n; j++) {
            const a = !out.causal || j <= i;
            const g = a && has(gold, i, j);
            const p = a && has(pred, i, j);
            const want = (a ? A : 0) | (g ? G : 0) | (p ? P : 0);
            if (got.cells[at * n * n + i * n + j] !== want) wrong++;
            if (g && !p) rowCovered = false;
          }
          covered += rowCovered;
        }
        assert.equal(wrong, 0, `head ${at}: cells that differ`);
        assert.deepEqual(h.metrics, eg.compareGraphs(pred, gold, out.causal), `head ${at}: metrics`);
        assert.equal(h.coveredRows, covered, `head ${at}: covered rows`);
        goldEdges += h.metrics.gold;
      }
      assert.ok(goldEdges > 0 && got.heads.some((h) => h.metrics.recall < 1), "the test sees edges and misses");
    });

    test("a subset of heads, no predictor, and the true graph recomputed give the same cells", () => {
      const n = out.tokens;
      const all = out.graphCells({ predictor });
      const some = out.graphCells({ predictor, heads: [5, 0] });
      assert.deepEqual(some.heads.map((h) => [h.layer, h.head]), [[1, 1], [0, 0]]);
      assert.deepEqual(some.cells.subarray(0, n * n), all.cells.subarray(5 * n * n, 6 * n * n));
      assert.deepEqual(some.cells.subarray(n * n), all.cells.subarray(0, n * n));
      assert.deepEqual(out.graphCells({ predictor, gold: "graph" }).cells, all.cells);
      const bare = out.graphCells();
      const { gold: G, allowed: A, predicted: P } = eg.cellBits;
      assert.ok(bare.cells.every((c, i) => (c & P) === 0 && c === (all.cells[i] & (A | G))), "no predictor: no PREDICTED bit");
      assert.ok(bare.heads.every((h) => h.metrics.predicted === 0 && h.metrics.recall === (h.metrics.gold === 0 ? 1 : 0)));
    });
  });
}

test("the demo page's cell bits are the package's", () => {
  assert.deepEqual(eg.cellBits, { allowed: ALLOWED, gold: GOLD, predicted: PRED });
});

test("graphCells: bad arguments throw naming them", () => {
  const teacher = loadTeacher(eg, "teacher-causal");
  const text = heldoutText(4500, 40);
  const plain = teacher.forward(text);
  const out = teacher.forward(text, { probs: true });
  try {
    assert.throws(() => plain.graphCells(), /TeacherOutput\.graphCells: the weights were not recorded .*probs: true/);
    assert.equal(plain.graphCells({ gold: "graph" }).heads.length, 16, "gold: \"graph\" needs no weights");
    assert.throws(() => out.graphCells({ predictor: {} }), /graphCells: predictor: expected a Predictor or null/);
    assert.throws(() => out.graphCells({ heads: 3 }), /graphCells: heads: expected an array/);
    assert.throws(() => out.graphCells({ heads: [1, -1] }), /heads\[1\]: expected a whole number/);
    assert.throws(() => out.graphCells({ heads: [16] }), /heads\[0\]: head 16 of 16/);
    assert.throws(() => out.graphCells({ gold: "support" }), /graphCells: gold: expected "weights" or "graph"/);
    assert.deepEqual(out.graphCells({ heads: [] }), { cells: new Uint8Array(0), heads: [] });
    // 40 tokens: 1600 bytes a head; 335545 heads (repeats allowed) pass 512 MiB.
    assert.throws(() => out.graphCells({ heads: new Array(335545).fill(0) }),
                  /graphCells: 335545 heads of 40 x 40 cells are 536872000 bytes, more than 512 MiB; ask for fewer heads/);
  } finally {
    plain.dispose();
    out.dispose();
    teacher.dispose();
  }
});
