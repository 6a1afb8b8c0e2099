// The fused attention kernel's instances for query/key head dimension 128
// (one file per d, so that they compile in parallel).
#include "fused_attention_kernel.cuh"

namespace entgraph::cuda::detail::fused {

template void launch_fused<128, 32, true>(const FusedParams&, cudaStream_t);
template void launch_fused<128, 32, false>(const FusedParams&, cudaStream_t);
template void launch_fused<128, 64, true>(const FusedParams&, cudaStream_t);
template void launch_fused<128, 64, false>(const FusedParams&, cudaStream_t);
template void launch_fused<128, 128, true>(const FusedParams&, cudaStream_t);
template void launch_fused<128, 128, false>(const FusedParams&, cudaStream_t);

}  // namespace entgraph::cuda::detail::fused
