// Text handed to the core: a JavaScript string is UTF-16, the core reads
// UTF-8. A lone surrogate (half of a pair, alone) has no UTF-8 form; the
// package turns it into U+FFFD as TextEncoder does, and every other
// character, the one right after it included, arrives as it was.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { loadPackage, loadTeacher } from "./helpers.mjs";

// Each case: the text and what TextEncoder makes of it, decoded back.
const CASES = [
  ["a\uD800b", "a\uFFFDb"],                  // a lone high surrogate, then an ASCII letter
  ["a\uDC00b", "a\uFFFDb"],                  // a lone low surrogate
  ["\uD800\uD800\uDE00!", "\uFFFD\uD800\uDE00!"],  // a lone high one before a real pair
  ["x\uD83D", "x\uFFFD"],                    // a lone high surrogate at the end
  ["\uD83D\uDE00 é", "\uD83D\uDE00 é"],      // a real pair and a two-byte character: unchanged
];

describe("lone surrogates in text", () => {
  let eg;
  let teacher;
  before(async () => {
    eg = await loadPackage();
    teacher = loadTeacher(eg, "teacher-causal");
  });
  after(() => teacher?.dispose());

  test("the expected texts are TextEncoder's", () => {
    for (const [input, expected] of CASES)
      assert.equal(new TextDecoder().decode(new TextEncoder().encode(input)), expected, JSON.stringify(input));
  });

  test("splitText keeps the character after a lone surrogate", () => {
    for (const [input, expected] of CASES)
      assert.deepEqual(eg.splitText(input, 1000), [expected], JSON.stringify(input));
  });

  test("forward and capture read the same bytes as TextEncoder writes", () => {
    for (const [input, expected] of CASES) {
      const out = teacher.forward(input);
      try {
        assert.equal(out.text, expected, JSON.stringify(input));
        assert.equal(out.tokens, new TextEncoder().encode(input).length, `${JSON.stringify(input)}: tokens`);
      } finally {
        out.dispose();
      }
      const cap = teacher.capture([input, "ok"]);
      try {
        assert.deepEqual(cap.texts, [expected, "ok"], JSON.stringify(input));
      } finally {
        cap.dispose();
      }
    }
  });
});
