// entgraph: the list of attention transforms, one row per kind.
//
// Everything the library says about a transform kind as data is in its row:
// TransformKind is generated from it, and Transform's names and parsing,
// the α of each kind, which kinds take extra inputs, the C API's enum
// values, the CLI's and the JavaScript package's names and parameters, the
// test cases' parameters and what the CUDA backend runs are all read from
// it (transform_info below). Adding a transform is one row here, one kernel
// and one float64 reference (docs/ARCHITECTURE.md, "Adding a transform").
#pragma once

// X(kind, family, parameter, alpha, alias, c_value, cuda)
//   kind       the TransformKind, and its name: the op name of its forward
//              ("<kind>_backward" is its backward's)
//   family     entmax: the α-entmax of an α (a threshold τ, p = [(α-1)z - τ]_+^(1/(α-1)));
//              top_k: softmax over the k largest scores; span: adaptive span,
//              which takes one span per row; constrained: takes an upper
//              bound per entry
//   parameter  what a Transform of this kind carries besides its kind: none,
//              alpha (in [1, kMaxEntmaxAlpha]) or k (>= 1)
//   alpha      the Tsallis α of the kind (the default α where alpha is its
//              parameter; of the transform it constrains or masks otherwise)
//   alias      a shorter name that parsing accepts and front ends show, or ""
//   c_value    its eg_transform_kind in entgraph/entgraph.h (a fixed ABI)
//   cuda       what the CUDA backend runs: kCudaTransform (forward and
//              backward), kCudaAttention (attention: fused dense, batched
//              forward and backward, graph attention; exact mode takes the
//              alpha-entmax kinds but softmax)
#define ENTGRAPH_TRANSFORMS(X)                                               \
  X(softmax, entmax, none, 1.0, "", 0, kCudaTransform | kCudaAttention)      \
  X(sparsemax, entmax, none, 2.0, "", 1, kCudaTransform | kCudaAttention)    \
  X(entmax15, entmax, none, 1.5, "", 2, kCudaTransform | kCudaAttention)     \
  X(entmax, entmax, alpha, 1.5, "", 3, kCudaTransform | kCudaAttention)      \
  X(topk_softmax, top_k, k, 1.0, "topk", 4, kCudaTransform | kCudaAttention) \
  X(adaptive_span, span, none, 1.0, "", 5, 0u)                               \
  X(constrained_softmax, constrained, none, 1.0, "", 6, 0u)                  \
  X(constrained_sparsemax, constrained, none, 2.0, "", 7, 0u)
