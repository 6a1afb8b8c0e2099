// Sentences the page writes from the data, not fixed text: how many pairs of
// this text get weight zero, and what the largest output error is compared with.

const WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];

// The share of zero-weight pairs (the true graph's sparsity, 0..1) as "about
// seven pairs in ten" (with the percentage), for the explanation's #zero-share.
export function zeroShareText(goldSparsity, what = "On the text above") {
  if (!Number.isFinite(goldSparsity)) return "Type some text to see how many pairs are zero.";
  const tenths = Math.round(goldSparsity * 10);
  const pct = (100 * goldSparsity).toFixed(0);
  const about = tenths === 10 ? "nearly every pair is" : tenths === 0 ? "almost no pair is" : `about ${WORDS[tenths]} pair${tenths === 1 ? "" : "s"} in ten are`;
  return `${what}, ${about} zero (${pct}% of the pairs the mask allows, mean over all heads).`;
}

// #max-diff-scale: the error beside the largest |output| of full attention.
export function errorScaleText(maxAbsDiff, maxAbsOut) {
  if (!Number.isFinite(maxAbsDiff) || !(maxAbsOut > 0)) return "";
  const share = maxAbsDiff / maxAbsOut;
  const pct = share === 0 ? "0%" : share < 0.001 ? "<0.1%" : share < 0.1 ? `${(100 * share).toFixed(1)}%` : `${(100 * share).toFixed(0)}%`;
  return `(${pct} of full attention's largest |output|, ${maxAbsOut.toPrecision(3)})`;
}

// The largest |x| of an array (the scale of an attention output).
export function maxAbs(values) {
  let m = 0;
  for (let t = 0; t < values.length; t++) {
    const a = Math.abs(values[t]);
    if (a > m) m = a;
  }
  return m;
}
