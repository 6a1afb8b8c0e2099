// The avx512 instance of code_scores (built with its own flags).
#include "kernels/simd/code_scores_simd.hpp"

namespace entgraph::detail {
const CodeScores kAvx512CodeScores = &code_simd::code_scores;
}  // namespace entgraph::detail
