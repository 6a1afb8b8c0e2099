// entgraph internal: the table of SIMD row-transform kernels of one
// instruction set, one family of kernels per header:
//   row_simd.hpp          loads, stores, reductions, compression (RowSimd)
//   softmax_simd.hpp      softmax, top-k softmax, adaptive span
//   sparsemax_simd.hpp    sparsemax, 1.5-entmax
//   entmax_alpha_simd.hpp α-entmax for general α, short rows a row per lane
//   constrained_simd.hpp  constrained softmax and sparsemax
//   backward_simd.hpp     the backward of the softmax and entmax family
// Included ONLY by kernels/simd/transforms_<isa>.cpp, each compiled with that
// ISA's flags (a body visible elsewhere would be instantiated with the wrong
// flags).
#pragma once

#include "kernels/simd/backward_simd.hpp"
#include "kernels/simd/constrained_simd.hpp"
#include "kernels/simd/entmax_alpha_simd.hpp"
#include "kernels/simd/row_simd.hpp"
#include "kernels/simd/softmax_simd.hpp"
#include "kernels/simd/sparsemax_simd.hpp"
#include "kernels/transform_kernels.hpp"

namespace entgraph::detail::simd {

template <class A>
struct Kernels {
  // constexpr: the per-ISA tables are then constant-initialized, never by
  // code compiled with that ISA's flags running at startup on any CPU.
  static constexpr TransformKernels table(CpuIsa isa) {
    using Row = RowSimd<A>;
    using Softmax = SoftmaxRows<A>;
    using Sparse = SparseRows<A>;
    using Entmax = EntmaxRows<A>;
    using Constrained = ConstrainedRows<A>;
    using Backward = BackwardRows<A>;
    return {isa,
            Row::valid,
            Row::finite,
            Constrained::upper_bounds,
            Softmax::softmax,
            Sparse::sparsemax,
            Sparse::entmax15,
            Entmax::entmax15_short,
            Entmax::entmax,
            Entmax::entmax_short,
            Softmax::topk_softmax,
            Softmax::adaptive_span,
            Backward::softmax_backward,
            Backward::sparsemax_backward,
            Backward::entmax15_backward,
            Backward::entmax_backward,
            Backward::entmax_backward_alpha,
            Constrained::constrained_softmax,
            Constrained::constrained_sparsemax,
            Constrained::template constrained_backward<true>,
            Constrained::template constrained_backward<false>};
  }
};

}  // namespace entgraph::detail::simd
