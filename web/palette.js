// The page's colours and words are the JavaScript package's (entgraph/render.js,
// which also draws a notebook's figures), so the page and the package cannot
// drift apart; here in the forms the page's canvas code needs: RGB triples,
// 32-bit ImageData words and a 256-step weight ramp. web/style.css repeats the
// cell colours for its legends (tests/wasm/render.test.mjs checks they agree).
import {
  colours,
  methodColour,
  methodColours,
  methodLabel,
  methodLabels,
  terms,
  weightIndex,
  weightRamp,
} from "./entgraph/render.js";

export { methodLabel, methodLabels, terms };

function rgb(hex) {
  return [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16));
}

export const COLORS = Object.fromEntries(
  ["hit", "miss", "extra", "predicted", "empty", "masked"].map((role) => [role, rgb(colours[role])]),
);

export const CSS = Object.fromEntries(
  Object.entries(COLORS).map(([k, [r, g, b]]) => [k, `rgb(${r},${g},${b})`]),
);

// Colour of each predictor.
export const METHOD_COLORS = methodColours;
export const methodColor = methodColour;

export function rgbaWord([r, g, b], a = 255) {
  return ((a << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

// Weights: small ones light yellow-green, large ones dark purple. 256 entries
// of 0xAABBGGRR (little-endian ImageData words), and as CSS.
export const PROB_RAMP = Uint32Array.from(weightRamp, (c) => rgbaWord(c));
export const PROB_RAMP_CSS_FULL = weightRamp.map((c) => `rgb(${c.join(",")})`);

// A probability p in (0, 1] -> ramp index (-1 for none).
export const probIndex = weightIndex;

export const WORDS = Object.fromEntries(Object.entries(COLORS).map(([role, c]) => [role, rgbaWord(c)]));
