// The avx2 instance of code_scores (built with its own flags).
#include "kernels/simd/code_scores_simd.hpp"

namespace entgraph::detail {
const CodeScores kAvx2CodeScores = &code_simd::code_scores;
}  // namespace entgraph::detail
