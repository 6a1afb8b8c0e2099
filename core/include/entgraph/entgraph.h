/* entgraph: the C API, for embedders in C and in other languages (Python's
 * ctypes, Rust, Go, ...). Pure C99; also compiles as C++. docs/C_API.md has
 * a walk-through and a Python ctypes script.
 *
 * Conventions
 * - Every function that can fail returns an eg_status. EG_OK is 0; on any
 *   other status eg_last_error() gives the message, and nothing the call
 *   would output has been written (out-parameters and output matrices are
 *   left as they were), except where a function says otherwise.
 * - No C++ exception ever crosses this boundary, and nothing aborts the host.
 * - Objects are opaque handles (eg_graph, eg_capture, eg_predictor,
 *   eg_teacher, eg_teacher_output), created by a function with an
 *   `eg_<object>** out` parameter and released by eg_<object>_free (which
 *   accepts NULL). Strings returned as `char**` are the caller's and are
 *   released by eg_string_free. Pointers obtained from a handle (graph CSR
 *   arrays, capture and teacher-output matrices) borrow from it: they stay
 *   valid until the handle is freed (or, for an eg_predictor, refitted).
 * - Matrices are row-major float32: row i starts at data + i * stride
 *   (stride counts floats, stride >= cols; stride 0 means cols). Nothing is
 *   copied; the library never keeps a pointer after a call returns.
 * - Every compute call takes an eg_device first. EG_DEVICE_CPU always runs;
 *   another device runs where its backend is registered and usable, else the
 *   call returns EG_ERROR_DEVICE saying why. Nothing falls back to the CPU.
 * - Threads: calls may run concurrently on different threads. A handle may
 *   be read (predict, forward, get_*) by several threads at once; freeing or
 *   fitting it must not overlap any other use of it. Large calls use the
 *   library's own thread pool.
 */
#ifndef ENTGRAPH_ENTGRAPH_H
#define ENTGRAPH_ENTGRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Status and errors
 */

typedef enum eg_status {
  EG_OK = 0,
  /* Misuse: a NULL pointer, shapes that disagree, NaN or +inf in an input, a
   * parameter out of range (alpha < 1, k = 0), an unknown name (transform,
   * predictor method or setting), malformed JSON text, an enum value out of
   * range, a size over a limit. The message names the argument: "entmax:
   * alpha out of range (got 0.5, ...)", "eg_transform_forward: scores is
   * NULL". */
  EG_ERROR_ARGUMENT = 1,
  /* The device cannot run this call: its backend is not registered or not
   * usable ("<op>: device cuda is not available (<why>)"), or it has no
   * kernel for this op ("<op>: device cuda has no kernel for this op; run it
   * on cpu"). */
  EG_ERROR_DEVICE = 2,
  /* A call that reads files (eg_capture_load, eg_predictor_load_file,
   * eg_teacher_load) could not read them, or their content is malformed. */
  EG_ERROR_IO = 3,
  /* An allocation failed. */
  EG_ERROR_MEMORY = 4,
  /* Anything else: a bug in entgraph (please report the message). */
  EG_ERROR_INTERNAL = 5
} eg_status;

/* "EG_OK", "EG_ERROR_ARGUMENT", ...; "EG_STATUS_UNKNOWN" for other values. */
const char* eg_status_name(eg_status status);

/* What kind of failure the last failing call on this thread had, finer than
 * its status (entgraph::ErrorCode): a program acts on it without reading the
 * message. The status of each code: BAD_ARGUMENT, BAD_VALUE and LIMIT are
 * EG_ERROR_ARGUMENT; BAD_FILE and IO are EG_ERROR_IO; DEVICE_UNAVAILABLE and
 * UNSUPPORTED are EG_ERROR_DEVICE; OUT_OF_MEMORY is EG_ERROR_MEMORY and
 * INTERNAL EG_ERROR_INTERNAL. */
typedef enum eg_error_code {
  EG_CODE_NONE = 0,               /* no call has failed on this thread */
  EG_CODE_BAD_ARGUMENT = 1,       /* shapes, ranges, settings, names, NULL pointers, enum values */
  EG_CODE_BAD_VALUE = 2,          /* a value in the data: NaN or infinity in scores, q, k, v */
  EG_CODE_BAD_FILE = 3,           /* a file's contents: malformed, truncated, inconsistent */
  EG_CODE_LIMIT = 4,              /* a size over a limit (a file over its reader's cap, 2^32 keys) */
  EG_CODE_IO = 5,                 /* the system refused: cannot open, read, write */
  EG_CODE_DEVICE_UNAVAILABLE = 6, /* no backend for the device, or no usable GPU */
  EG_CODE_UNSUPPORTED = 7,        /* the device has no kernel for this op: run it on EG_DEVICE_CPU */
  EG_CODE_OUT_OF_MEMORY = 8,      /* an allocation failed */
  EG_CODE_INTERNAL = 9            /* a bug in entgraph */
} eg_error_code;
eg_error_code eg_last_error_code(void);

/* The message of the last call that failed on this thread, "" if none has.
 * It is the C++ library's own message (entgraph::Error::what()), or for
 * errors raised by this layer "<function>: <what>". A successful call does
 * not clear it. The pointer is valid until the next failing call on this
 * thread. */
const char* eg_last_error(void);

/* The argument the last failing call's message names first, as the C API or
 * the C++ library spells it ("q", "options.transform.alpha", "max_bytes"),
 * or "" if the message names none (or nothing has failed). Taken from the
 * error's data (entgraph::Error::argument()), not from the message. Valid
 * until the next failing call on this thread. */
const char* eg_last_error_argument(void);

/* The library's version, e.g. "0.1.0". */
const char* eg_version(void);

/* Releases a string returned by this API (NULL is fine). */
void eg_string_free(char* string);

/* ------------------------------------------------------------------------
 * Devices
 */

typedef enum eg_device { EG_DEVICE_CPU = 0, EG_DEVICE_CUDA = 1 } eg_device;

/* 1 if ops can run on `device` now, else 0. EG_DEVICE_CPU is always
 * available; EG_DEVICE_CUDA when the host program links the CUDA backend and
 * registers it (C++: entgraph::cuda::register_backend()) and a GPU is usable.
 * When not available and why is not NULL, why receives the reason,
 * truncated to why_size - 1 bytes and NUL-terminated. Never fails. */
int eg_device_available(eg_device device, char* why, size_t why_size);

/* The calling thread's stream for device (CUDA: a cudaStream_t; NULL, the
 * default: none). The calls on a device's own memory (the _dlpack calls
 * with EG_DL_CUDA tensors) run in its order and return once enqueued, after
 * their value checks; without one they return with their outputs written
 * (entgraph/device.hpp, set_device_stream). EG_ERROR_ARGUMENT for a stream
 * on EG_DEVICE_CPU. */
eg_status eg_set_device_stream(eg_device device, void* stream);

/* ------------------------------------------------------------------------
 * Matrices (borrowed, never owned; see the conventions above)
 */

typedef struct eg_matrix {
  float* data;
  size_t rows, cols;
  size_t stride; /* floats between row starts; 0 means cols */
} eg_matrix;

typedef struct eg_const_matrix {
  const float* data;
  size_t rows, cols;
  size_t stride; /* 0 means cols */
} eg_const_matrix;

/* A boolean mask of the shape of the matrix it masks: a zero byte masks the
 * entry (it gets weight exactly 0), anything else keeps it. */
typedef struct eg_mask {
  const uint8_t* data;
  size_t rows, cols;
  size_t stride; /* bytes between row starts; 0 means cols */
} eg_mask;

/* ------------------------------------------------------------------------
 * Transforms: each row z of a scores matrix to attention weights p >= 0
 * summing to 1 (docs: core/include/entgraph/transforms.hpp).
 */

typedef enum eg_transform_kind {
  EG_TRANSFORM_SOFTMAX = 0,
  EG_TRANSFORM_SPARSEMAX = 1,
  EG_TRANSFORM_ENTMAX15 = 2,     /* exact 1.5-entmax */
  EG_TRANSFORM_ENTMAX = 3,       /* any alpha in [1, 1000] */
  EG_TRANSFORM_TOPK_SOFTMAX = 4, /* softmax over the k largest scores */
  /* These need extra inputs (spans, upper bounds) that this API does not
   * take: the calls below reject them with EG_ERROR_ARGUMENT. They exist so
   * that eg_transform_parse can name every kind. */
  EG_TRANSFORM_ADAPTIVE_SPAN = 5,
  EG_TRANSFORM_CONSTRAINED_SOFTMAX = 6,
  EG_TRANSFORM_CONSTRAINED_SPARSEMAX = 7
} eg_transform_kind;

typedef struct eg_transform {
  eg_transform_kind kind;
  double alpha; /* EG_TRANSFORM_ENTMAX only */
  size_t k;     /* EG_TRANSFORM_TOPK_SOFTMAX only, >= 1 */
} eg_transform;

/* Parses a kind name as the CLI spells it (softmax, sparsemax, entmax15,
 * entmax, topk or topk_softmax, adaptive_span, constrained_softmax,
 * constrained_sparsemax) into *out, with the kind's alpha (1 for softmax and
 * topk, 2 for sparsemax, 1.5 for entmax15 and entmax) and k = 0: set alpha
 * for entmax and k for topk afterwards (k = 0 is rejected by the calls).
 * EG_ERROR_ARGUMENT for an unknown name. */
eg_status eg_transform_parse(const char* name, eg_transform* out);

/* probs = transform(scores) row by row; rows x cols each (strides may
 * differ; probs may be scores itself, in place). mask is optional (NULL).
 * -inf scores get 0; NaN or +inf in an unmasked score is EG_ERROR_ARGUMENT. */
eg_status eg_transform_forward(eg_device device, const eg_transform* transform, eg_const_matrix scores,
                               eg_matrix probs, const eg_mask* mask);

/* grad_scores = the vector-Jacobian product of the forward at its output
 * probs with the upstream gradient grad_probs (finite); all three rows x
 * cols. */
eg_status eg_transform_backward(eg_device device, const eg_transform* transform, eg_const_matrix probs,
                                eg_const_matrix grad_probs, eg_matrix grad_scores);

/* ------------------------------------------------------------------------
 * DLPack tensors: arrays handed over without a copy by torch, JAX, CuPy or
 * NumPy (torch.utils.dlpack.to_dlpack(t) gives a DLManagedTensor*; pass
 * &managed->dl_tensor). eg_dl_tensor has the layout of DLPack's DLTensor
 * (dlpack.h; stable since DLPack 0.2), so a DLTensor* converts by a cast.
 * The tensors' device says where the call runs: EG_DL_CPU on the CPU,
 * EG_DL_CUDA on the CUDA backend on its own memory (nothing copied; the
 * backend runs on the current CUDA device, which must be device_id's). All
 * tensors of a call share one device. Scores, probabilities and gradients
 * are float32 (DLPack code 2, 32 bits, 1 lane), a mask uint8 (code 1) or
 * bool (code 6), 8 bits; 1-D (one row) or 2-D, strides NULL (row-major) or
 * in elements with the last one 1; byte_offset is added to data. */
enum { EG_DL_CPU = 1, EG_DL_CUDA = 2 };
typedef struct {
  int32_t device_type; /* EG_DL_CPU or EG_DL_CUDA (DLPack's kDLCPU, kDLCUDA) */
  int32_t device_id;
} eg_dl_device;
typedef struct {
  uint8_t code; /* DLPack's kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6 */
  uint8_t bits;
  uint16_t lanes;
} eg_dl_dtype;
typedef struct {
  void* data;
  eg_dl_device device;
  int32_t ndim;
  eg_dl_dtype dtype;
  int64_t* shape;
  int64_t* strides; /* NULL: row-major */
  uint64_t byte_offset;
} eg_dl_tensor;

/* eg_transform_forward and eg_transform_backward on DLPack tensors; mask may
 * be NULL. On EG_DL_CUDA the GPU scans the values before it writes (the
 * CPU's messages) and rows must be contiguous. */
eg_status eg_transform_forward_dlpack(const eg_transform* transform, const eg_dl_tensor* scores,
                                      const eg_dl_tensor* probs, const eg_dl_tensor* mask);
eg_status eg_transform_backward_dlpack(const eg_transform* transform, const eg_dl_tensor* probs,
                                       const eg_dl_tensor* grad_probs, const eg_dl_tensor* grad_scores);

/* ------------------------------------------------------------------------
 * Dense attention of one head: Q n x d, K m x d, V m x dv,
 *   O = transform(scale Q K^T) V   (n x dv)
 * (docs: core/include/entgraph/attention.hpp).
 */

typedef struct eg_attention_options {
  eg_transform transform;     /* default: entmax15 */
  double scale;               /* 0 means 1 / sqrt(d) */
  int causal;                 /* non-zero: query i sees keys j <= i + (m - n) */
  const uint8_t* key_padding; /* NULL, or m flags: 0 marks a key no query sees */
} eg_attention_options;

/* The defaults: entmax15, scale 0 (1 / sqrt(d)), not causal, no padding. */
eg_attention_options eg_attention_options_default(void);

/* out (n x dv) = attention. options NULL means the defaults. A query whose
 * keys are all masked gets a zero row. */
eg_status eg_attention_forward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                               eg_matrix out, const eg_attention_options* options);

/* Given dL/dO (n x dv), writes dL/dQ (n x d), dL/dK (m x d), dL/dV (m x dv). */
eg_status eg_attention_backward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                                eg_const_matrix grad_out, eg_matrix grad_q, eg_matrix grad_k, eg_matrix grad_v,
                                const eg_attention_options* options);

/* eg_attention_forward on DLPack tensors (float32, 2-D as for the
 * transforms). On EG_DL_CUDA options->key_padding is a device pointer too,
 * rows must be contiguous, and the GPU scans the values before it writes
 * (the CPU's messages). */
eg_status eg_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                      const eg_dl_tensor* out, const eg_attention_options* options);

/* ------------------------------------------------------------------------
 * Batched attention: every (sequence, head) pair of (batch, heads, rows,
 * cols) tensors in float32, bfloat16 or float16, with grouped-query heads
 * and per-sequence lengths, as models call it
 * (docs: core/include/entgraph/batched_attention.hpp).
 */

typedef enum eg_dtype { EG_DTYPE_FLOAT32 = 0, EG_DTYPE_BFLOAT16 = 1, EG_DTYPE_FLOAT16 = 2 } eg_dtype;

/* A (batch, heads, rows, cols) tensor, borrowed: element (b, h, i, c) is at
 * data + b * batch_stride + h * head_stride + i * row_stride + c, strides in
 * elements (columns contiguous). A zero stride means packed over the
 * dimensions inside it: row_stride 0 is cols, head_stride 0 is rows x
 * row_stride, batch_stride 0 is heads x head_stride, so all three 0 is
 * PyTorch's contiguous [B, H, n, d]. [B, n, H, d] is head_stride = cols,
 * row_stride = heads x cols, batch_stride = rows x heads x cols. 16-bit
 * elements are uint16 bit patterns. data is only read for q, k and v. */
typedef struct eg_tensor4 {
  void* data;
  eg_dtype dtype;
  size_t batch, heads, rows, cols;
  size_t batch_stride, head_stride, row_stride;
} eg_tensor4;

typedef struct eg_batched_attention_options {
  eg_transform transform; /* default: entmax15; kinds 0 to 4 only */
  double scale;           /* 0 means 1 / sqrt(d) */
  int causal;             /* non-zero: query i of sequence b sees keys j <= i + (m_b - n_b) */
  /* NULL, or batch values each: sequence b has query_lengths[b] valid
   * queries (in [0, n]; rows past it are written as zeros) and
   * key_lengths[b] valid keys (in [0, m]; later keys are invisible). Only
   * the valid rows of q, k and v are read. */
  const int32_t* query_lengths;
  const int32_t* key_lengths;
} eg_batched_attention_options;

/* The defaults: entmax15, scale 0 (1 / sqrt(d)), not causal, full lengths. */
eg_batched_attention_options eg_batched_attention_options_default(void);

/* out = attention(q, k, v) per sequence b and query head h, with key/value
 * head g = h / (Hq / Hkv): q (B, Hq, n, d), k (B, Hkv, m, d), v (B, Hkv, m,
 * dv), out (B, Hq, n, dv); q, k and v share one dtype, out has it or
 * float32. 16-bit inputs are read exactly, products summed in float32, a
 * 16-bit output rounded once to nearest even. options NULL means the defaults. EG_ERROR_ARGUMENT (naming the
 * argument) for NULL tensors or data, shapes that disagree, Hq not a
 * multiple of Hkv, overlapping or misaligned views, out sharing memory with
 * an input, mixed dtypes, lengths out of range, NaN or inf in the valid rows,
 * scores that may overflow float32, or a transform out of range. */
eg_status eg_batched_attention_forward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                       const eg_tensor4* v, const eg_tensor4* out,
                                       const eg_batched_attention_options* options);

/* eg_batched_attention_forward on DLPack tensors: 4-D (batch, heads, rows,
 * cols) in float32 (code 2, 32 bits), bfloat16 (code 4, 16 bits) or float16
 * (code 2, 16 bits), strides NULL (row-major) or in elements with the last
 * one 1 (torch's q.transpose(1, 2) of a [B, n, H, d] tensor passes as is).
 * On EG_DL_CUDA the options' query_lengths and key_lengths are device
 * pointers too and nothing is copied: the GPU reads the lengths and scans
 * the values before it writes (the CPU's messages). */
eg_status eg_batched_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                              const eg_dl_tensor* out, const eg_batched_attention_options* options);

/* The gradients of eg_batched_attention_forward for dL/dout = grad_out
 * (B, Hq, n, dv): grad_q (B, Hq, n, d), grad_k (B, Hkv, m, d) and grad_v
 * (B, Hkv, m, dv), the forward recomputed with the same options. A
 * key/value head's gradients sum over the query heads sharing it (float32,
 * in head order, rounded once); rows past the lengths are written as zeros.
 * grad_out and each gradient have q's dtype or float32; a 16-bit gradient
 * past the format's range is +-inf. EG_ERROR_ARGUMENT as the forward, and
 * for a gradient sharing memory with an input, grad_out or another gradient,
 * or NaN or inf in grad_out's valid rows; nothing is written then. */
eg_status eg_batched_attention_backward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                        const eg_tensor4* v, const eg_tensor4* grad_out, const eg_tensor4* grad_q,
                                        const eg_tensor4* grad_k, const eg_tensor4* grad_v,
                                        const eg_batched_attention_options* options);

/* eg_batched_attention_backward on DLPack tensors, as the forward's. */
eg_status eg_batched_attention_backward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                               const eg_dl_tensor* grad_out, const eg_dl_tensor* grad_q,
                                               const eg_dl_tensor* grad_k, const eg_dl_tensor* grad_v,
                                               const eg_batched_attention_options* options);

/* Block-sparse attention (docs: core/include/entgraph/block_sparse_attention.hpp):
 * batched attention restricted, per sequence and query head, to the key
 * blocks each query block attends to. A block graph, borrowed: queries in
 * blocks of query_block rows, keys in blocks of key_block; block row I of
 * graph (b, h) is blocks[offsets[r]] ... blocks[offsets[r + 1] - 1] (key
 * block indices, ascending) with r = (b * heads + h) * ceil(queries /
 * query_block) + I; offsets holds batch x heads x ceil(queries /
 * query_block) + 1 entries and blocks offsets[last] of them. batch and heads
 * are the tensors' B and Hq, or 1 for a graph they share. */
typedef struct eg_block_graph {
  size_t batch, heads, queries, keys, query_block, key_block;
  const size_t* offsets;
  const uint32_t* blocks;
} eg_block_graph;

/* out = attention of each query over the keys of its block row that the
 * options allow (lengths, causal); tensors and options as
 * eg_batched_attention_forward; EG_DEVICE_CUDA runs 64 x 64 blocks of
 * bfloat16 or float16 tensors (EG_ERROR_DEVICE where the device has no
 * kernel, EG_ERROR_ARGUMENT for what it cannot run, naming it).
 * EG_ERROR_ARGUMENT as the batched forward, and for a graph that breaks its
 * invariants or does not fit the tensors. */
eg_status eg_block_sparse_attention_forward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                            const eg_tensor4* v, const eg_block_graph* graph, const eg_tensor4* out,
                                            const eg_batched_attention_options* options);
/* Its gradients, as eg_batched_attention_backward's. */
eg_status eg_block_sparse_attention_backward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                             const eg_tensor4* v, const eg_block_graph* graph,
                                             const eg_tensor4* grad_out, const eg_tensor4* grad_q,
                                             const eg_tensor4* grad_k, const eg_tensor4* grad_v,
                                             const eg_batched_attention_options* options);

/* float32 <-> bfloat16 / float16 bit patterns: exact widening, and rounding
 * to nearest even (overflow to +-inf, NaN stays NaN). Never fail. */
float eg_bfloat16_to_float(uint16_t bits);
uint16_t eg_float_to_bfloat16(float x);
float eg_float16_to_float(uint16_t bits);
uint16_t eg_float_to_float16(float x);

/* ------------------------------------------------------------------------
 * Attention graphs: which (query, key) pairs of a head have weight > 0, in
 * CSR (docs: core/include/entgraph/graph.hpp).
 */

typedef struct eg_graph eg_graph;

/* A graph of `queries` rows over `keys` keys: row i holds the keys
 * indices[offsets[i] .. offsets[i + 1]), sorted ascending, unique, each <
 * keys; offsets has queries + 1 entries, offsets[0] = 0, and indices
 * offsets[queries] entries (NULL is fine when that is 0). Both are copied.
 * EG_ERROR_ARGUMENT (naming what is wrong) if the CSR is not valid. */
eg_status eg_graph_create(size_t queries, size_t keys, const size_t* offsets, const uint32_t* indices,
                          eg_graph** out);
void eg_graph_free(eg_graph* graph);

/* A graph's CSR arrays, borrowed from it. */
typedef struct eg_graph_csr {
  size_t queries, keys, edges;
  const size_t* offsets;   /* queries + 1 entries */
  const uint32_t* indices; /* edges entries (NULL when edges is 0) */
} eg_graph_csr;
eg_status eg_graph_get_csr(const eg_graph* graph, eg_graph_csr* out);

/* One head's inputs and transform settings: queries n x d, keys m x d,
 * values m x dv (values.data NULL where there are none), and the entmax
 * alpha (1 = softmax, 2 = sparsemax), causal flag and score scale of that
 * head. Captures and teacher outputs fill it; callers may fill it too. */
typedef struct eg_head_view {
  eg_const_matrix queries, keys, values;
  double alpha;
  double scale; /* 0 means 1 / sqrt(d) */
  int causal;
} eg_head_view;

/* The gold graph of a head: the support of entmax_alpha(scale Q K^T) under
 * its causal mask. CPU only (another device gives EG_ERROR_DEVICE). */
eg_status eg_gold_graph(eg_device device, const eg_head_view* head, eg_graph** out);

/* How a predicted graph matches the gold one (pairs a causal mask forbids
 * never count). */
typedef struct eg_graph_metrics {
  size_t gold;      /* |G| */
  size_t predicted; /* |prediction, allowed pairs only| */
  size_t hits;      /* |prediction and G| */
  size_t allowed;   /* pairs the mask allows */
  size_t queries;
  double sparsity;      /* of the prediction: 1 - predicted / allowed */
  double gold_sparsity; /* 1 - gold / allowed */
  double recall;        /* hits / gold (1 when gold is 0) */
  double precision;     /* hits / predicted (1 when predicted is 0) */
} eg_graph_metrics;
eg_status eg_compare_graphs(eg_device device, const eg_graph* predicted, const eg_graph* gold, int causal,
                            eg_graph_metrics* out);

/* ------------------------------------------------------------------------
 * Attention on a graph (docs: core/include/entgraph/graph_attention.hpp and
 * docs/EXACT.md): only the graph's edges are scored (fast), plus a proof per
 * row that nothing left out has weight (certify), or repaired until every
 * row equals dense attention (exact). certify and exact need a transform with
 * a threshold (not softmax) and run on the CPU only.
 */

typedef enum eg_graph_attention_mode {
  EG_GRAPH_ATTENTION_FAST = 0,
  EG_GRAPH_ATTENTION_CERTIFY = 1,
  EG_GRAPH_ATTENTION_EXACT = 2
} eg_graph_attention_mode;

/* bound_rank: the rank of the score bounds (clamped to d); this value lets
 * the library choose per head. */
#define EG_BOUND_RANK_AUTO ((size_t)-1)

typedef struct eg_graph_attention_options {
  eg_attention_options attention;
  eg_graph_attention_mode mode; /* default: EG_GRAPH_ATTENTION_FAST */
  size_t bound_rank;            /* default: EG_BOUND_RANK_AUTO */
} eg_graph_attention_options;

eg_graph_attention_options eg_graph_attention_options_default(void);

/* How each query row was settled (eg_graph_attention_report.settled). */
typedef enum eg_row_settlement {
  EG_ROW_UNSETTLED = 0, /* fast / certify: not proven equal to dense attention */
  EG_ROW_GRAPH = 1,     /* proven by the graph row alone */
  EG_ROW_REPAIRED = 2,  /* proven after adding the keys the bounds could not exclude */
  EG_ROW_DENSE = 3      /* every allowed key scored */
} eg_row_settlement;

typedef struct eg_graph_attention_report {
  size_t graph_rows, repaired_rows, dense_rows; /* exact rows = their sum */
  size_t graph_pairs;  /* allowed graph pairs scored */
  size_t repair_pairs; /* pairs scored beyond the graph */
  size_t bound_pairs;  /* pairs whose bounds were checked */
  /* In: NULL, or a buffer of n bytes that receives an eg_row_settlement per
   * query. */
  uint8_t* settled;
  /* Fast mode's error (docs/EXACT.md, "Fast mode's error"). In: NULL, or a
   * buffer of n doubles that receives each row's missed-mass bound: an upper
   * bound on the weight dense attention gives to the allowed keys the row
   * left out; 0 on rows proven exact, NaN where none is known (fast mode's
   * rows that miss a key; certify bounds every alpha-entmax row). */
  double* missed_mass;
  size_t bounded_rows;       /* rows with a bound */
  double max_missed_mass;    /* over those rows (NaN when none) */
  double mean_missed_mass;   /* over those rows (NaN when none) */
  double output_error_bound; /* max |out - dense attention| in exact arithmetic; NaN unless every row has a bound */
} eg_graph_attention_report;

/* out (n x dv) = attention restricted to the graph (n queries, m keys) as
 * the mode says. options NULL means the defaults. report (optional)
 * receives the counts and, if report->settled or report->missed_mass is
 * set, each row's settlement or missed-mass bound; reports are computed on
 * the CPU, and on EG_DEVICE_CUDA in exact mode (another device or mode with
 * a report gives EG_ERROR_DEVICE). */
eg_status eg_graph_attention_forward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                                     const eg_graph* graph, eg_matrix out,
                                     const eg_graph_attention_options* options, eg_graph_attention_report* report);

/* eg_graph_attention_forward on DLPack tensors (float32, 2-D), without a
 * report; the graph is a handle in host memory. On EG_DL_CUDA
 * options->attention.key_padding is a device pointer too, rows must be
 * contiguous, the mode fast, and the GPU scans the values before it writes
 * (the CPU's messages). */
eg_status eg_graph_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                            const eg_graph* graph, const eg_dl_tensor* out,
                                            const eg_graph_attention_options* options);

/* ------------------------------------------------------------------------
 * Captures: a model's Q, K (and V) per layer, head and token, read from a
 * folder holding capture.json and .npy files (docs/FORMATS.md).
 */

typedef struct eg_capture eg_capture;

/* Reads the capture in folder `dir`. EG_ERROR_IO if it is missing, unreadable
 * or malformed (the message names the folder and the field). */
eg_status eg_capture_load(const char* dir, eg_capture** out);
void eg_capture_free(eg_capture* capture);

typedef struct eg_capture_info {
  size_t layers, heads, head_dim;
  size_t sequences;
  const size_t* lengths; /* tokens of each sequence (sequences entries), borrowed */
  size_t tokens;         /* their sum */
  int has_values;
} eg_capture_info;
eg_status eg_capture_get_info(const eg_capture* capture, eg_capture_info* out);

/* The queries, keys (and values) of one layer, head and sequence, borrowed
 * from the capture, with that head's settings. */
eg_status eg_capture_get_head(const eg_capture* capture, size_t layer, size_t head, size_t sequence,
                              eg_head_view* out);

/* ------------------------------------------------------------------------
 * Predictors: guess a head's attention graph from Q and K without all of
 * Q K^T (methods and settings: docs/PREDICTORS.md).
 */

typedef struct eg_predictor eg_predictor;

/* A predictor of `method` ("window", "sparsefinder-kmeans", ...) with
 * settings given as settings_count strings "key=value" (settings may be NULL
 * when the count is 0); missing settings take the method's defaults.
 * EG_ERROR_ARGUMENT for an unknown method or setting, a bad value, or a
 * string without '='. */
eg_status eg_predictor_make(const char* method, const char* const* settings, size_t settings_count,
                            eg_predictor** out);
/* From the JSON text of a parameter file (eg_predictor_to_json); malformed
 * text is EG_ERROR_ARGUMENT. */
eg_status eg_predictor_load_json(const char* json, eg_predictor** out);
/* From a parameter file; EG_ERROR_IO if it cannot be read or is malformed. */
eg_status eg_predictor_load_file(const char* path, eg_predictor** out);
void eg_predictor_free(eg_predictor* predictor);

/* The method's name, borrowed from the predictor. */
eg_status eg_predictor_method(const eg_predictor* predictor, const char** out);

/* Learns the predictor's parameters on every layer and head of a capture (a
 * no-op for fixed patterns), from scratch: a fitted predictor is refitted.
 * seed is used unless the settings give one. A failed fit leaves the
 * predictor as it was. Fits run on the CPU only (another device gives
 * EG_ERROR_DEVICE). */
eg_status eg_predictor_fit(eg_device device, eg_predictor* predictor, const eg_capture* capture, uint64_t seed);

/* The predicted graph of head (layer, head) for one sequence: q n x d, k
 * m x d. layer and head pick the learned parameters (fixed patterns ignore
 * them). */
eg_status eg_predictor_predict(eg_device device, const eg_predictor* predictor, eg_const_matrix q,
                               eg_const_matrix k, size_t layer, size_t head, int causal, eg_graph** out);

/* eg_predictor_predict on DLPack tensors (float32, 2-D): on EG_DL_CUDA q and
 * k are read in place on the GPU (contiguous rows; the Sparsefinder methods
 * and lowrank-threshold only); the graph is a handle in host memory either
 * way. */
eg_status eg_predictor_predict_dlpack(const eg_predictor* predictor, const eg_dl_tensor* q, const eg_dl_tensor* k,
                                      size_t layer, size_t head, int causal, eg_graph** out);

/* The parameter file's JSON text, to be released with eg_string_free. */
eg_status eg_predictor_to_json(const eg_predictor* predictor, char** out);

/* ------------------------------------------------------------------------
 * The teacher: the small byte-level entmax transformer shipped in
 * data/teacher-* (docs: core/include/entgraph/model.hpp).
 */

typedef struct eg_teacher eg_teacher;
typedef struct eg_teacher_output eg_teacher_output;

/* Loads dir/config.json and its weights. EG_ERROR_IO if they are missing or
 * malformed. */
eg_status eg_teacher_load(const char* dir, eg_teacher** out);
void eg_teacher_free(eg_teacher* teacher);

typedef struct eg_teacher_info {
  size_t layers, heads, head_dim, d_model;
  size_t context; /* the longest input, in bytes */
  size_t outputs; /* logits per token */
  double alpha;   /* entmax alpha of every head */
  int causal;
} eg_teacher_info;
eg_status eg_teacher_get_info(const eg_teacher* teacher, eg_teacher_info* out);

/* Runs the model on `size` bytes of text (1 to context; any bytes, the
 * tokens are the bytes). attention_probs non-zero also records every head's
 * n x n attention weights. CPU only (another device gives EG_ERROR_DEVICE). */
eg_status eg_teacher_forward(eg_device device, const eg_teacher* teacher, const char* text, size_t size,
                             int attention_probs, eg_teacher_output** out);
void eg_teacher_output_free(eg_teacher_output* output);

typedef struct eg_teacher_output_info {
  size_t layers, heads, tokens, head_dim, outputs;
  int has_probs;
} eg_teacher_output_info;
eg_status eg_teacher_output_get_info(const eg_teacher_output* output, eg_teacher_output_info* out);

/* One head's rotated queries, keys and values (tokens x head_dim each,
 * borrowed) with the teacher's alpha, scale and causal flag: what
 * eg_gold_graph and eg_predictor_predict take. */
eg_status eg_teacher_output_get_head(const eg_teacher_output* output, size_t layer, size_t head,
                                     eg_head_view* out);
/* One head's attention weights P (tokens x tokens, borrowed);
 * EG_ERROR_ARGUMENT unless the forward recorded them. */
eg_status eg_teacher_output_get_probs(const eg_teacher_output* output, size_t layer, size_t head,
                                      eg_const_matrix* out);
/* The logits (tokens x outputs, borrowed). */
eg_status eg_teacher_output_get_logits(const eg_teacher_output* output, eg_const_matrix* out);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* ENTGRAPH_ENTGRAPH_H */
