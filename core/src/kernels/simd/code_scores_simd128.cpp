// The simd128 instances of code_scores and code_bounds (built with its own flags).
#include "kernels/simd/code_scores_simd.hpp"

namespace entgraph::detail {
const CodeKernels kSimd128CodeKernels = {&code_simd::code_scores, code_simd::kByteCodeScores, &code_simd::code_bounds,
                                         code_simd::kByteCodeBounds};
}  // namespace entgraph::detail
