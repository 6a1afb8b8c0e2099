// entgraph internal: the CPU driver of batched attention's (sequence, head)
// pairs, shared by dense batched attention (batched_attention.cpp) and
// block-sparse attention (block_sparse_attention.cpp), which differ only in
// the attention they run on one head's valid rows.
#pragma once

#include <cstddef>
#include <functional>

#include "entgraph/batched_attention.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph::detail {

// Attention of query head h of sequence b: q holds its n_b valid queries,
// k and v its key/value head's m_b valid keys (both >= 1; float32, widened
// from 16-bit inputs); out is n_b x dv, float32. The causal rule is
// attention's j <= i + (m_b - n_b).
using HeadForward = std::function<void(std::size_t b, std::size_t h, ConstMatrix<float> q, ConstMatrix<float> k,
                                       ConstMatrix<float> v, MatrixView<float> out)>;
// Its gradients: grad_out is n_b x dv; grad_q (n_b x d), grad_k (m_b x d)
// and grad_v (m_b x dv) are written, not accumulated.
using HeadBackward = std::function<void(std::size_t b, std::size_t h, ConstMatrix<float> q, ConstMatrix<float> k,
                                        ConstMatrix<float> v, ConstMatrix<float> grad_out, MatrixView<float> grad_q,
                                        MatrixView<float> grad_k, MatrixView<float> grad_v)>;

// Every (sequence, query head) pair through `head`, the output rounded once
// into out's dtype, rows past the lengths zeros; pairs on the thread pool.
// The arguments must have passed the checks.
void run_heads_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                       const BatchedAttentionOptions& o, const HeadForward& head);

struct GradTensors {
  ConstBatchedTensor q, k, v, grad_out;
  BatchedTensor grad_q, grad_k, grad_v;
};
// Every key/value head group through `head` per query head: grad_q stored
// per query head, grad_k and grad_v summed over the group in float32 in head
// order, each rounded once into its dtype, rows past the lengths zeros.
void run_heads_backward(const GradTensors& t, const BatchedAttentionOptions& o, const HeadBackward& head);

// check_batched_attention and check_batched_attention_backward with the
// score range's headroom of the op each head runs (attention's 2, graph
// attention's 16), so that no head's call can throw once they pass.
void check_batched_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                           const BatchedAttentionOptions& o, const char* op, double headroom,
                           bool check_values_too = true);
void check_batched_backward(const GradTensors& t, const BatchedAttentionOptions& o, const char* op, double headroom,
                            bool check_values_too = true);

}  // namespace entgraph::detail
