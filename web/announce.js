// The page's polite live region (#announce): after an update it says the chosen
// head's recall and sparsity to a screen reader. Typing gives an update per
// keystroke, so a message is written only once the updates pause (`quietMs`),
// and only when it says something new.

export class Announcer {
  constructor(el, quietMs = 900) {
    this.el = el;
    this.quietMs = quietMs;
    this.timer = 0;
    this.pending = null;
  }

  // Says `text` once no other message has come for quietMs.
  say(text) {
    this.pending = text;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.pending !== this.el.textContent) this.el.textContent = this.pending;
      this.pending = null;
    }, this.quietMs);
  }

  // Says `text` now (the keyboard cursor's cell): a message still waiting for
  // quiet is dropped, so that an older update's numbers do not replace it.
  sayNow(text) {
    clearTimeout(this.timer);
    this.pending = null;
    this.el.textContent = text;
  }
}

// The message after an update: the chosen head's numbers, then the means, then
// (once computed) fast mode's error on the chosen head.
// m: the chosen head's metrics ({ recall, sparsity }); means: { recall, sparsity };
// fast: null, or { exactRows, rows, maxMissed } (graph attention in mode "certify").
export function resultsMessage({ layer, head, m, means, tokens, fast = null }) {
  if (!tokens || !m || !Number.isFinite(m.recall)) return "No text: type some text to see its attention.";
  const f = (x) => (Number.isFinite(x) ? x.toFixed(2) : "unknown");
  const missed = (x) => (!Number.isFinite(x) ? "an unknown share" : x === 0 ? "none" : x < 0.01 ? "under 0.01" : x.toFixed(2));
  return (
    `Layer ${layer}, head ${head}: recall ${f(m.recall)}, sparsity ${f(m.sparsity)}. ` +
    `All heads, mean: recall ${f(means.recall)}, sparsity ${f(means.sparsity)}.` +
    (fast
      ? ` On the predicted graph alone, ${fast.exactRows} of ${fast.rows} rows are proven exact; ` +
        `a row misses at most ${missed(fast.maxMissed)} of its weight.`
      : "")
  );
}
