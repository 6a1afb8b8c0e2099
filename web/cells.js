// The bits of a cell: one byte per (query, key) pair of a head, as the update
// worker gets them from TeacherOutput.graphCells (the core's graph_cells.hpp;
// the package exports them as eg.cellBits) and the heatmaps, the grid and the
// tooltip read them; and the metrics a head shows before any.

export const ALLOWED = 1; // the mask allows the pair
export const GOLD = 2; // an edge of the true graph (an entmax weight > 0)
export const PRED = 4; // the predictor proposes it

// A head's metrics before anything was compared (no text, or not computed yet).
export const NO_METRICS = Object.freeze({ recall: NaN, sparsity: NaN, goldSparsity: NaN, precision: NaN, gold: 0, predicted: 0, hits: 0 });
