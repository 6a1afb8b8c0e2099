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

// The message after an update: the chosen head's numbers, then the means.
// m: the chosen head's metrics ({ recall, sparsity }); means: { recall, sparsity }.
export function resultsMessage({ layer, head, m, means, tokens }) {
  if (!tokens || !m || !Number.isFinite(m.recall)) return "No text: type some text to see its attention.";
  const f = (x) => (Number.isFinite(x) ? x.toFixed(2) : "unknown");
  return (
    `Layer ${layer}, head ${head}: recall ${f(m.recall)}, sparsity ${f(m.sparsity)}. ` +
    `All heads, mean: recall ${f(means.recall)}, sparsity ${f(means.sparsity)}.`
  );
}
