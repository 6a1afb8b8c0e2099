// entgraph: Fenchel-Young losses (Blondel, Martins & Niculae 2019).
//
// For a regulariser Omega with prediction map p = argmax_p <z, p> - Omega(p)
// (the transform), the Fenchel-Young loss of scores z against a target
// distribution q is
//   L(z; q) = Omega*(z) + Omega(q) - <z, q> = <z, p - q> + Omega(q) - Omega(p),
// which is >= 0, = 0 iff p = q, convex in z, with gradient dL/dz = p - q.
// Omega is the negative Tsallis alpha-entropy
//   Omega(p) = (sum p^alpha - 1) / (alpha (alpha - 1)),   alpha -> 1: sum p log p,
// so softmax gives the cross-entropy (plus the target's entropy, 0 for one-hot
// targets), sparsemax the sparsemax loss, entmax15/entmax the entmax losses.
#pragma once

#include <cstdint>

#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph {

// Supported transforms: softmax, sparsemax, entmax15, entmax(alpha).
// scores and target are rows x n; each target row must be a distribution
// (entries >= 0, summing to 1 within 1e-4; throws otherwise). loss receives one
// value per row. grad, if not empty, receives p - q (rows x n). mask, if given,
// restricts the problem to unmasked entries; the target must put no mass on
// masked ones.
template <class T>
void fenchel_young_loss(const Transform& t, ConstMatrix<T> scores, ConstMatrix<T> target, T* loss,
                        MatrixView<T> grad = {}, MaskView mask = {});

// Same with one class index per row (a one-hot target); throws if a label is
// outside [0, n) or masked.
template <class T>
void fenchel_young_loss(const Transform& t, ConstMatrix<T> scores, const std::int64_t* labels, T* loss,
                        MatrixView<T> grad = {}, MaskView mask = {});

}  // namespace entgraph
