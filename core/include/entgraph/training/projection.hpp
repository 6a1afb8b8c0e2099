// entgraph: Sparsefinder's learned projections (Treviso et al. 2022, §4.2).
//
// Per head, W_Q and W_K in R^{d x r} (r small, 4 by default) map queries and
// keys to q' = q W_Q, k' = k W_K so that gold edges are close and non-edges
// far apart. The loss of a query i, a gold edge j (positive) and a non-edge l
// (negative, uniform among the keys the mask allows that are not in i's gold
// row) is the hinge
//     max(0, ω + ‖q'_i − k'_j‖² − ‖q'_i − k'_l‖²),
// averaged over the triplets of a mini-batch of queries and minimised with
// Adam. Gradients are derived by hand (a = q'_i, b = k'_j, c = k'_l; where the
// hinge is active): dL/da = 2(c − b), dL/db = 2(b − a), dL/dc = 2(a − c), and
// dL/dW_Q = q_i ⊗ dL/da, dL/dW_K = k_j ⊗ dL/db + k_l ⊗ dL/dc.
//
// Training data are the gold graphs of a capture (gold_graph in graph.hpp).
// Heads are trained in parallel on the library's thread pool; each head has
// its own random stream (std::mt19937_64 seeded from the seed, layer and head,
// with the library's own uniform / normal helpers), so the result is
// bit-identical for any thread count and on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/io/capture.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct ProjectionOptions {
  std::size_t rank = 4;       // r >= 1
  std::size_t epochs = 1;     // passes over the queries (0: the initial projection)
  double lr = 0.01;           // Adam step size, > 0
  std::size_t batch = 16;     // queries per mini-batch, >= 1
  std::size_t negatives = 1;  // negatives sampled per positive, >= 1
  double margin = 1.0;        // ω >= 0
  std::uint64_t seed = 0;
  bool quiet = true;          // false: progress bar on stderr (train_projections)
};

// One head's projection.
struct Projection {
  std::size_t dim = 0;   // d
  std::size_t rank = 0;  // r
  std::vector<float> wq; // d x r, row-major
  std::vector<float> wk; // d x r, row-major

  // The projected rows (x.rows x r, row-major): x W_Q, or x W_K for keys.
  // Accumulates in double. Throws entgraph::Error unless x.cols == dim.
  std::vector<float> project_queries(MatrixView<const float> x) const;
  std::vector<float> project_keys(MatrixView<const float> x) const;
};

// A (query, positive key, negative key) triplet; indices are rows of the q and
// k matrices handed to hinge_loss_gradient.
struct Triplet {
  std::uint32_t query = 0, positive = 0, negative = 0;
};

// The mean hinge loss over the triplets for weights wq, wk (d x r each, in
// double), and if grad_wq / grad_wk are not null its gradient (resized to
// d x r). Throws entgraph::Error on mismatched sizes or out-of-range indices.
double hinge_loss_gradient(MatrixView<const float> q, MatrixView<const float> k, const std::vector<Triplet>& triplets,
                           std::size_t rank, const std::vector<double>& wq, const std::vector<double>& wk,
                           double margin, std::vector<double>* grad_wq, std::vector<double>* grad_wk);

// What training one head saw.
struct ProjectionStats {
  std::size_t triplets = 0;         // per epoch
  std::size_t batches = 0;          // per epoch
  std::vector<double> epoch_loss;   // mean triplet loss of each epoch (during training)
};

// The initial projection of a head: N(0, 1/d) entries from the head's stream.
Projection initial_projection(std::size_t dim, std::size_t rank, std::uint64_t seed, std::size_t layer,
                              std::size_t head);

// Trains the projection of one head of the capture (serially). Throws
// entgraph::Error ("train_projection: ...") for bad options or an out-of-range
// layer / head.
Projection train_projection(const Capture& capture, std::size_t layer, std::size_t head,
                            const ProjectionOptions& options, ProjectionStats* stats = nullptr);

// Every head of the capture, in parallel; index layer * heads + head.
std::vector<Projection> train_projections(const Capture& capture, const ProjectionOptions& options,
                                          std::vector<ProjectionStats>* stats = nullptr);

// The mean hinge loss of a projection on one head of the capture, over
// triplets drawn from a stream seeded with `seed` (every query with a gold
// edge and an allowed non-edge, every gold edge, options.negatives negatives
// each). For checking that training helps.
double evaluate_projection(const Capture& capture, std::size_t layer, std::size_t head, const Projection& projection,
                           const ProjectionOptions& options, std::uint64_t seed);

}  // namespace entgraph
