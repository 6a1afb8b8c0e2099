// Colours of the page, chosen to stay distinguishable with the common forms of
// colour blindness (blue / orange contrasts, Paul Tol's qualitative scheme,
// viridis for magnitudes). The same values are in style.css for the legends.

export const COLORS = {
  hit: [28, 78, 150],      // #1c4e96 dark blue: a true edge the predictor found
  miss: [230, 97, 1],      // #e66101 orange: a true edge the predictor missed
  extra: [160, 190, 222],  // #a0bede light grey-blue: predicted, but not a true edge
  predicted: [28, 78, 150],
  empty: [255, 255, 255],  // an allowed pair with no edge
  masked: [236, 238, 242], // a pair the causal mask forbids (future keys)
};

export const CSS = Object.fromEntries(
  Object.entries(COLORS).map(([k, [r, g, b]]) => [k, `rgb(${r},${g},${b})`]),
);

// Colour of each predictor (Paul Tol "muted", nine colours; near-black for
// entgraph's own lowrank-threshold).
export const METHOD_COLORS = {
  window: "#332288",
  global: "#88ccee",
  longformer: "#44aa99",
  bigbird: "#117733",
  reformer: "#999933",
  routing: "#ddcc77",
  "sparsefinder-distance": "#cc6677",
  "sparsefinder-quantization": "#882255",
  "sparsefinder-kmeans": "#aa4499",
  "lowrank-threshold": "#222222",
};

export function methodColor(method) {
  return METHOD_COLORS[method] ?? "#555555";
}

// Reversed viridis: small probabilities light yellow-green, large ones dark
// purple. 256 entries of 0xAABBGGRR (little-endian ImageData words).
const VIRIDIS_STOPS = [
  [0.0, [253, 231, 37]],
  [0.125, [170, 220, 50]],
  [0.25, [94, 201, 98]],
  [0.375, [39, 173, 129]],
  [0.5, [33, 145, 140]],
  [0.625, [44, 114, 142]],
  [0.75, [59, 82, 139]],
  [0.875, [71, 44, 122]],
  [1.0, [68, 1, 84]],
];

function interpolate(stops, t) {
  for (let s = 1; s < stops.length; s++) {
    if (t <= stops[s][0]) {
      const [t0, c0] = stops[s - 1];
      const [t1, c1] = stops[s];
      const u = (t - t0) / (t1 - t0);
      return c0.map((v, k) => Math.round(v + u * (c1[k] - v)));
    }
  }
  return stops[stops.length - 1][1];
}

export function rgbaWord([r, g, b], a = 255) {
  return ((a << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

export const PROB_RAMP = new Uint32Array(256);
export const PROB_RAMP_CSS_FULL = [];
for (let i = 0; i < 256; i++) {
  const c = interpolate(VIRIDIS_STOPS, i / 255);
  PROB_RAMP[i] = rgbaWord(c);
  PROB_RAMP_CSS_FULL.push(`rgb(${c.join(",")})`);
}

// A probability p in (0, 1] -> ramp index; square root so that the many small
// weights stay visible, and at least 60 (green) so that no edge fades into white.
export function probIndex(p) {
  if (!(p > 0)) return -1;
  return Math.min(255, 60 + Math.round(Math.sqrt(p) * 195));
}

export const WORDS = {
  hit: rgbaWord(COLORS.hit),
  miss: rgbaWord(COLORS.miss),
  extra: rgbaWord(COLORS.extra),
  predicted: rgbaWord(COLORS.predicted),
  empty: rgbaWord(COLORS.empty),
  masked: rgbaWord(COLORS.masked),
};
