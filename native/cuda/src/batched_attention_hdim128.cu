// The batched tensor-core attention kernels' instances (forward and backward) for head dimension 128
// (one file per d, so that they compile in parallel).
#include "batched_attention_backward_kernel.cuh"
#include "batched_attention_kernel.cuh"

namespace entgraph::cuda::detail::batched {

template void launch_batched<mma::Bfloat16, 128, true>(const BatchedParams&, unsigned, unsigned, unsigned,
                                                       cudaStream_t);
template void launch_batched<mma::Bfloat16, 128, false>(const BatchedParams&, unsigned, unsigned, unsigned,
                                                        cudaStream_t);
template void launch_batched<mma::Float16, 128, true>(const BatchedParams&, unsigned, unsigned, unsigned, cudaStream_t);
template void launch_batched<mma::Float16, 128, false>(const BatchedParams&, unsigned, unsigned, unsigned,
                                                       cudaStream_t);
template int resident_blocks<mma::Bfloat16, 128, false>();
template int resident_blocks<mma::Float16, 128, false>();
template void launch_batched_backward<mma::Bfloat16, 128>(const BackwardParams&, cudaStream_t);
template void launch_batched_backward<mma::Float16, 128>(const BackwardParams&, cudaStream_t);

}  // namespace entgraph::cuda::detail::batched
