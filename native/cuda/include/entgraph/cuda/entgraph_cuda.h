/* entgraph: the CUDA backend for a C host.
 *
 *   #include <entgraph/cuda/entgraph_cuda.h>
 *   eg_cuda_register_backend();   once, at startup
 *   eg_transform_forward(EG_DEVICE_CUDA, &t, scores, probs, NULL);
 *
 * The C counterpart of entgraph::cuda::register_backend()
 * (entgraph/cuda/backend.hpp): after it, the C API's calls on EG_DEVICE_CUDA
 * run this library's kernels. Link libentgraph_cuda (and the CUDA runtime)
 * with the C API. */
#ifndef ENTGRAPH_CUDA_H
#define ENTGRAPH_CUDA_H

#include "entgraph/entgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the CUDA kernels as EG_DEVICE_CUDA (idempotent, thread-safe).
 * EG_OK without a usable GPU too: eg_device_available(EG_DEVICE_CUDA, ...)
 * then says why, and calls on EG_DEVICE_CUDA fail with EG_ERROR_DEVICE.
 * EG_ERROR_MEMORY if the table could not be stored. */
eg_status eg_cuda_register_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* ENTGRAPH_CUDA_H */
