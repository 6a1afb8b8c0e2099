// The bits of a cell: one byte per (query, key) pair of a head, as the update
// worker gets them from TeacherOutput.graphCells (the core's graph_cells.hpp;
// the package exports them as eg.cellBits) and the heatmaps, the grid and the
// tooltip read them.

export const ALLOWED = 1; // the mask allows the pair
export const GOLD = 2; // an edge of the true graph (an entmax weight > 0)
export const PRED = 4; // the predictor proposes it
