// The Pareto plot's arithmetic, shared by the chart (pareto.js, main thread)
// and the recompute (worker.js): the windows each setting is also unioned
// with, and a frontier.

export const PARETO_WINDOWS = [-1, 1, 3, 7];

// Indices of the points on the frontier (no other point has both a higher
// sparsity and a higher recall), by increasing sparsity.
export function frontier(points) {
  const order = points.map((_, i) => i).sort((a, b) => points[b].sparsity - points[a].sparsity || points[b].recall - points[a].recall);
  const keep = [];
  let best = -Infinity;
  for (const i of order) {
    if (points[i].recall > best) {
      keep.push(i);
      best = points[i].recall;
    }
  }
  return keep.reverse();
}
