#define _POSIX_C_SOURCE 200809L /* mkfifo, mkdtemp, rmdir, unlink (test_capture_fifo) */
/* The C API (entgraph/entgraph.h) from a C99 program: every call family
 * against hand-computed values or its own invariants, and the error paths
 * (status, message, outputs untouched). Prints "N passed, N failed" and exits
 * non-zero on any failure. The shipped teacher and its fixture capture are
 * read from the repository at ENTGRAPH_SOURCE_DIR: the environment
 * variable, else the path CMake compiled in. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "entgraph/entgraph.h"
#ifdef ENTGRAPH_TEST_CUDA_FROM_C
#include "entgraph/cuda/entgraph_cuda.h"
#endif

#ifndef ENTGRAPH_SOURCE_DIR
#error "ENTGRAPH_SOURCE_DIR must be defined"
#endif

static int passed = 0, failed = 0;

static void check(int ok, const char* what, const char* file, int line) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    fprintf(stderr, "%s:%d: FAILED: %s (last error: \"%s\")\n", file, line, what, eg_last_error());
  }
}
#define CHECK(expr) check((expr) ? 1 : 0, #expr, __FILE__, __LINE__)
#define CHECK_OK(call) check((call) == EG_OK, #call " == EG_OK", __FILE__, __LINE__)
#define CHECK_NEAR(a, b, tol) check(fabs((double)(a) - (double)(b)) <= (tol), #a " ~ " #b, __FILE__, __LINE__)
/* status is `expected` and the message contains `needle`. */
#define CHECK_FAILS(call, expected, needle)                                                              \
  do {                                                                                                   \
    eg_status status_ = (call);                                                                          \
    check(status_ == (expected), #call " == " #expected, __FILE__, __LINE__);                            \
    check(strstr(eg_last_error(), (needle)) != NULL, "message contains \"" needle "\"", __FILE__, __LINE__); \
  } while (0)

static eg_const_matrix cmat(const float* data, size_t rows, size_t cols) {
  eg_const_matrix m = {data, rows, cols, 0};
  return m;
}
static eg_matrix mat(float* data, size_t rows, size_t cols) {
  eg_matrix m = {data, rows, cols, 0};
  return m;
}
static eg_transform transform_named(const char* name) {
  eg_transform t;
  memset(&t, 0, sizeof t);
  CHECK_OK(eg_transform_parse(name, &t));
  return t;
}

static void test_basics(void) {
  CHECK(strlen(eg_version()) > 0);
  CHECK(strcmp(eg_status_name(EG_ERROR_DEVICE), "EG_ERROR_DEVICE") == 0);
  CHECK(strcmp(eg_status_name((eg_status)99), "EG_STATUS_UNKNOWN") == 0);
  eg_string_free(NULL);
  eg_graph_free(NULL);
  eg_capture_free(NULL);
  eg_predictor_free(NULL);
  eg_teacher_free(NULL);
  eg_teacher_output_free(NULL);
}

static void test_transform_parse(void) {
  eg_transform t = transform_named("entmax15");
  CHECK(t.kind == EG_TRANSFORM_ENTMAX15 && t.alpha == 1.5);
  t = transform_named("topk");
  CHECK(t.kind == EG_TRANSFORM_TOPK_SOFTMAX && t.k == 0);
  t = transform_named("sparsemax");
  CHECK(t.kind == EG_TRANSFORM_SPARSEMAX && t.alpha == 2.0);
  t = transform_named("constrained_sparsemax");
  CHECK(t.kind == EG_TRANSFORM_CONSTRAINED_SPARSEMAX);
  CHECK_FAILS(eg_transform_parse("entmax13", &t), EG_ERROR_ARGUMENT, "entmax13");
  CHECK(eg_last_error_code() == EG_CODE_BAD_ARGUMENT);
  CHECK_FAILS(eg_transform_parse(NULL, &t), EG_ERROR_ARGUMENT, "eg_transform_parse: name is NULL");
  CHECK(strcmp(eg_last_error_argument(), "name") == 0);
}

static void test_transform_forward(void) {
  /* softmax of [0, ln 2] is [1/3, 2/3]; the second row masks its last entry
   * (a NaN that must be ignored) and is read with a stride of 4. */
  float scores[8] = {0.0f, (float)log(2.0), 99.0f, -1.0f, 0.0f, (float)log(2.0), NAN, -1.0f};
  float probs[6];
  uint8_t mask_data[6] = {1, 1, 1, 1, 1, 0};
  eg_const_matrix s = {scores, 2, 3, 4};
  eg_mask mask = {mask_data, 2, 3, 0};
  eg_transform softmax = transform_named("softmax");
  eg_transform sparsemax = transform_named("sparsemax");
  eg_transform topk = transform_named("topk");
  float p2[2];
  float one_zero[2] = {1.0f, 0.0f};
  float row[3] = {0.5f, 3.0f, 1.0f};
  float p3[3];

  /* row 0 keeps 99 unmasked: almost all weight there. */
  CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &softmax, s, mat(probs, 2, 3), &mask));
  CHECK(probs[2] > 0.999f);
  CHECK_NEAR(probs[3], 1.0 / 3.0, 1e-6);
  CHECK_NEAR(probs[4], 2.0 / 3.0, 1e-6);
  CHECK(probs[5] == 0.0f);

  /* sparsemax of [1, 0] is [1, 0] exactly. */
  CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &sparsemax, cmat(one_zero, 1, 2), mat(p2, 1, 2), NULL));
  CHECK(p2[0] == 1.0f && p2[1] == 0.0f);

  /* top-1 softmax keeps the largest score only. */
  topk.k = 1;
  CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &topk, cmat(row, 1, 3), mat(p3, 1, 3), NULL));
  CHECK(p3[0] == 0.0f && p3[1] == 1.0f && p3[2] == 0.0f);

  /* In place: probs may be scores itself. entmax with alpha 2 is sparsemax:
   * [0.5, 3, 1] -> [0, 1, 0]. */
  {
    eg_transform entmax = transform_named("entmax");
    entmax.alpha = 2.0;
    CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &entmax, cmat(row, 1, 3), mat(row, 1, 3), NULL));
    CHECK_NEAR(row[0], 0.0, 1e-6);
    CHECK_NEAR(row[1], 1.0, 1e-6);
    CHECK_NEAR(row[2], 0.0, 1e-6);
  }
}

/* L(z) = <g, p(z)>: its gradient is the backward of g. */
static double loss_at(const eg_transform* t, const float* z, const float* g, size_t n) {
  float p[8];
  double sum = 0.0;
  size_t j;
  if (eg_transform_forward(EG_DEVICE_CPU, t, cmat(z, 1, n), mat(p, 1, n), NULL) != EG_OK) return NAN;
  for (j = 0; j < n; ++j) sum += (double)g[j] * p[j];
  return sum;
}

/* A DLPack tensor over a float32 or uint8 host array: 2-D rows x cols, row stride `stride` elements (0: NULL strides). */
static eg_dl_tensor dl_tensor(void* data, uint8_t code, uint8_t bits, int64_t* shape, int64_t* strides) {
  eg_dl_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = EG_DL_CPU;
  t.ndim = 2;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static void test_transform_dlpack(void) {
  /* The same rows as eg_matrix and as DLPack tensors (one strided, one with a byte offset) give the same bits. */
  float scores[8] = {0.5f, 2.0f, -1.0f, 9.0f, 1.0f, 1.0f, 0.25f, 9.0f};
  float expect[6], got[7], grad[6], expect_grad[6], upstream[6] = {1, -2, 0.5f, 0.25f, 3, -1};
  uint8_t keep[6] = {1, 1, 1, 1, 0, 1};
  int64_t shape[2] = {2, 3}, strided[2] = {4, 1};
  eg_transform t = {EG_TRANSFORM_ENTMAX15, 1.5, 0};
  eg_mask m = {keep, 2, 3, 3};
  eg_dl_tensor s, out, mask, up, g;
  size_t i;
  /* scores read with row stride 4; probs written one float in (byte_offset 4). */
  {
    eg_const_matrix sm = {scores, 2, 3, 4};
    CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &t, sm, mat(expect, 2, 3), &m));
  }
  s = dl_tensor(scores, 2, 32, shape, strided);
  out = dl_tensor(got, 2, 32, shape, NULL);
  out.byte_offset = sizeof(float);
  mask = dl_tensor(keep, 6, 8, shape, NULL); /* DLPack's bool */
  got[0] = 42.0f;
  CHECK_OK(eg_transform_forward_dlpack(&t, &s, &out, &mask));
  CHECK(got[0] == 42.0f);
  for (i = 0; i < 6; ++i) CHECK(got[i + 1] == expect[i]);

  /* Backward against the eg_matrix call. */
  CHECK_OK(eg_transform_backward(EG_DEVICE_CPU, &t, cmat(expect, 2, 3), cmat(upstream, 2, 3), mat(expect_grad, 2, 3)));
  out = dl_tensor(expect, 2, 32, shape, NULL);
  up = dl_tensor(upstream, 2, 32, shape, NULL);
  g = dl_tensor(grad, 2, 32, shape, NULL);
  CHECK_OK(eg_transform_backward_dlpack(&t, &out, &up, &g));
  for (i = 0; i < 6; ++i) CHECK(grad[i] == expect_grad[i]);

  /* What DLPack can get wrong is named, with the argument as data. */
  s = dl_tensor(scores, 0, 32, shape, NULL); /* int32 */
  out = dl_tensor(got, 2, 32, shape, NULL);
  CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_ARGUMENT, "scores.dtype is not float32");
  CHECK(strcmp(eg_last_error_argument(), "scores.dtype") == 0);
  s = dl_tensor(scores, 2, 32, shape, NULL);
  s.ndim = 3;
  CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_ARGUMENT, "scores.ndim must be 1 or 2");
  s.ndim = 2;
  {
    int64_t bad_strides[2] = {3, 2};
    s.strides = bad_strides;
    CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_ARGUMENT, "the last stride must be 1");
    s.strides = NULL;
  }
  out.device.device_type = 7;
  CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_DEVICE, "probs.device.device_type is not supported");
  out.device.device_type = EG_DL_CPU;
  out.device.device_id = 1;
  CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_ARGUMENT, "probs.device differs from scores's");
  out.device.device_id = 0;
  CHECK_FAILS(eg_transform_forward_dlpack(&t, NULL, &out, NULL), EG_ERROR_ARGUMENT, "scores is NULL");
  {
    int64_t wide[2] = {2, 4};
    out.shape = wide;
    CHECK_FAILS(eg_transform_forward_dlpack(&t, &s, &out, NULL), EG_ERROR_ARGUMENT, "probs");
    out.shape = shape;
  }
  /* Tensors on a GPU go to the CUDA backend on its own memory; without one, EG_ERROR_DEVICE. (Host arrays
   * labelled EG_DL_CUDA must never reach a real GPU, hence only where none is usable.) */
  if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0)) {
    s.device.device_type = EG_DL_CUDA;
    out.device.device_type = EG_DL_CUDA;
    CHECK(eg_transform_forward_dlpack(&t, &s, &out, NULL) == EG_ERROR_DEVICE);
  }
}

static void test_transform_backward(void) {
  /* Central differences in float32: h = 1e-2 keeps rounding (~1e-7 / h)
   * well below the tolerance, and these scores keep the entmax15 support
   * 1e-2 away from changing. */
  const char* names[] = {"softmax", "entmax15", "sparsemax"};
  float z[5] = {0.5f, 0.1f, -0.3f, 0.9f, -2.0f};
  float g[5] = {1.0f, -2.0f, 0.5f, 0.25f, 3.0f};
  size_t i, j;
  for (i = 0; i < 3; ++i) {
    eg_transform t = transform_named(names[i]);
    float p[5], dz[5];
    CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(z, 1, 5), mat(p, 1, 5), NULL));
    CHECK_OK(eg_transform_backward(EG_DEVICE_CPU, &t, cmat(p, 1, 5), cmat(g, 1, 5), mat(dz, 1, 5)));
    for (j = 0; j < 5; ++j) {
      const float h = 1e-2f;
      float zp[5], zm[5];
      double numeric;
      memcpy(zp, z, sizeof z);
      memcpy(zm, z, sizeof z);
      zp[j] += h;
      zm[j] -= h;
      numeric = (loss_at(&t, zp, g, 5) - loss_at(&t, zm, g, 5)) / (2.0 * h);
      if (fabs(dz[j] - numeric) > 2e-3) fprintf(stderr, "%s: dz[%u] = %g, numeric %g\n", names[i], (unsigned)j, dz[j], numeric);
      CHECK_NEAR(dz[j], numeric, 2e-3);
    }
  }
}

static void test_transform_errors(void) {
  float scores[2] = {0.0f, 1.0f};
  float probs[2] = {-7.0f, -7.0f};
  eg_transform t = transform_named("entmax");
  t.alpha = 0.5;
  /* The C++ API's message, as it is. */
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "entmax: alpha out of range (got 0.5");
  CHECK(probs[0] == -7.0f && probs[1] == -7.0f); /* untouched */
  t.alpha = 1.5;
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(NULL, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "eg_transform_forward: scores is NULL");
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, NULL, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "eg_transform_forward: transform is NULL");
  CHECK_FAILS(eg_transform_backward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), cmat(scores, 1, 2), mat(NULL, 1, 2)),
              EG_ERROR_ARGUMENT, "eg_transform_backward: grad_scores is NULL");
  {
    eg_const_matrix narrow = {scores, 1, 2, 1};
    CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, narrow, mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
                "scores.stride is below its cols");
  }
  t.kind = (eg_transform_kind)42;
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "transform.kind is out of range (got 42");
  t = transform_named("adaptive_span");
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "needs extra inputs");
  t = transform_named("softmax");
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(probs, 2, 1), NULL), EG_ERROR_ARGUMENT,
              "softmax");
  CHECK_FAILS(eg_transform_forward((eg_device)7, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_ARGUMENT,
              "device is out of range (got 7");
  CHECK(probs[0] == -7.0f && probs[1] == -7.0f);

  /* A success does not clear the message. */
  CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL));
  CHECK(strstr(eg_last_error(), "device is out of range") != NULL);
}

static void* fail_on_other_thread(void* arg) {
  eg_transform t;
  (void)arg;
  eg_transform_parse("no-such-transform", &t);
  return strstr(eg_last_error(), "no-such-transform") != NULL ? arg : NULL;
}

static void test_last_error_is_per_thread(void) {
  eg_transform t;
  pthread_t thread;
  void* result = NULL;
  int token = 0;
  eg_transform_parse("main-thread-name", &t);
  CHECK(pthread_create(&thread, NULL, fail_on_other_thread, &token) == 0);
  CHECK(pthread_join(thread, &result) == 0);
  CHECK(result == &token);                                  /* the thread saw its own message */
  CHECK(strstr(eg_last_error(), "main-thread-name") != NULL); /* and this thread kept its own */
}

static void test_devices(void) {
  char why[256] = "unchanged";
  float scores[2] = {0.0f, 1.0f}, probs[2] = {-7.0f, -7.0f};
  eg_transform t = transform_named("softmax");
  CHECK(eg_device_available(EG_DEVICE_CPU, why, sizeof why) == 1);
  CHECK(why[0] == '\0');
  CHECK(eg_device_available((eg_device)9, why, sizeof why) == 0);
  CHECK(strstr(why, "eg_device_available: device is out of range (got 9") != NULL);
  if (eg_device_available(EG_DEVICE_CUDA, why, sizeof why)) {
    /* A registered, usable CUDA backend computes what the CPU does. */
    float cpu[2];
    CHECK_OK(eg_transform_forward(EG_DEVICE_CUDA, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL));
    CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(scores, 1, 2), mat(cpu, 1, 2), NULL));
    CHECK_NEAR(probs[0], cpu[0], 1e-6);
    CHECK_NEAR(probs[1], cpu[1], 1e-6);
    {
      /* Graph metrics on the GPU: the CPU's counts. */
      const size_t a_offsets[3] = {0, 2, 3}, b_offsets[3] = {0, 1, 3};
      const uint32_t a_indices[3] = {0, 2, 1}, b_indices[3] = {0, 0, 1};
      eg_graph *a = NULL, *b = NULL;
      eg_graph_metrics on_gpu, on_cpu;
      CHECK_OK(eg_graph_create(2, 3, a_offsets, a_indices, &a));
      CHECK_OK(eg_graph_create(2, 3, b_offsets, b_indices, &b));
      CHECK_OK(eg_compare_graphs(EG_DEVICE_CUDA, a, b, 1, &on_gpu));
      CHECK_OK(eg_compare_graphs(EG_DEVICE_CPU, a, b, 1, &on_cpu));
      CHECK(on_gpu.hits == on_cpu.hits && on_gpu.predicted == on_cpu.predicted && on_gpu.allowed == on_cpu.allowed);
      eg_graph_free(a);
      eg_graph_free(b);
    }
    printf("EG_DEVICE_CUDA is available: the GPU was compared with the CPU\n");
  } else {
    char small[8];
    CHECK(strlen(why) > 0);
    CHECK(eg_device_available(EG_DEVICE_CUDA, small, sizeof small) == 0);
    CHECK(strlen(small) == sizeof small - 1); /* truncated, terminated */
    CHECK_FAILS(eg_transform_forward(EG_DEVICE_CUDA, &t, cmat(scores, 1, 2), mat(probs, 1, 2), NULL), EG_ERROR_DEVICE,
                "transform_forward: device cuda is not available (");
    CHECK(probs[0] == -7.0f && probs[1] == -7.0f);
  }
  {
    /* Graph attention reports come from the CPU only. */
    const float x[2] = {1.0f, 0.0f};
    const size_t offsets[2] = {0, 1};
    const uint32_t indices[1] = {0};
    float out[2] = {-7.0f, -7.0f};
    eg_graph* g = NULL;
    eg_graph_attention_report report;
    memset(&report, 0, sizeof report);
    CHECK_OK(eg_graph_create(1, 1, offsets, indices, &g));
    CHECK_FAILS(eg_graph_attention_forward(EG_DEVICE_CUDA, cmat(x, 1, 2), cmat(x, 1, 2), cmat(x, 1, 2), g,
                                           mat(out, 1, 2), NULL, &report),
                EG_ERROR_DEVICE, "eg_graph_attention_forward: device cuda ");
    CHECK(out[0] == -7.0f && out[1] == -7.0f);
    eg_graph_free(g);
  }
  {
    /* CPU-only calls say so in the C++ API's words on another device. */
    eg_head_view head;
    eg_graph* g = NULL;
    memset(&head, 0, sizeof head);
    CHECK(eg_gold_graph(EG_DEVICE_CUDA, &head, &g) == EG_ERROR_DEVICE);
    CHECK(strstr(eg_last_error(), "eg_gold_graph: device cuda ") != NULL);
    CHECK(g == NULL);
  }
}

static void test_attention(void) {
  /* One query [1, 0] over keys [1, 0], [0, 1] with scale 1: scores [1, 0]. */
  const float q[2] = {1.0f, 0.0f};
  const float k[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  const float v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float out[2] = {0.0f, 0.0f};
  eg_attention_options options = eg_attention_options_default();
  const double e = exp(1.0), p0 = e / (e + 1.0), p1 = 1.0 / (e + 1.0);
  CHECK(options.transform.kind == EG_TRANSFORM_ENTMAX15 && options.scale == 0.0 && !options.causal);
  options.transform = transform_named("softmax");
  options.scale = 1.0;
  CHECK_OK(eg_attention_forward(EG_DEVICE_CPU, cmat(q, 1, 2), cmat(k, 2, 2), cmat(v, 2, 2), mat(out, 1, 2),
                                &options));
  CHECK_NEAR(out[0], p0 * 1.0 + p1 * 3.0, 1e-6);
  CHECK_NEAR(out[1], p0 * 2.0 + p1 * 4.0, 1e-6);

  {
    /* dL/dV = P^T dL/dO: row j of grad_v is p_j * grad_out. */
    const float grad_out[2] = {1.0f, -1.0f};
    float gq[2], gk[4], gv[4];
    CHECK_OK(eg_attention_backward(EG_DEVICE_CPU, cmat(q, 1, 2), cmat(k, 2, 2), cmat(v, 2, 2),
                                   cmat(grad_out, 1, 2), mat(gq, 1, 2), mat(gk, 2, 2), mat(gv, 2, 2), &options));
    CHECK_NEAR(gv[0], p0, 1e-6);
    CHECK_NEAR(gv[1], -p0, 1e-6);
    CHECK_NEAR(gv[2], p1, 1e-6);
    CHECK_NEAR(gv[3], -p1, 1e-6);
    /* dL/dp = [o . v_j] = [1 - 2, 3 - 4] = [-1, -1]: equal, so dL/dscores = 0. */
    CHECK_NEAR(gq[0], 0.0, 1e-6);
    CHECK_NEAR(gq[1], 0.0, 1e-6);
  }

  {
    /* Causal, two queries over two keys, sparsemax: query 0 sees key 0 only. */
    const float q2[4] = {0.0f, 1.0f, 1.0f, 0.0f};
    float out2[4];
    options.transform = transform_named("sparsemax");
    options.causal = 1;
    CHECK_OK(eg_attention_forward(EG_DEVICE_CPU, cmat(q2, 2, 2), cmat(k, 2, 2), cmat(v, 2, 2), mat(out2, 2, 2),
                                  &options));
    CHECK(out2[0] == 1.0f && out2[1] == 2.0f);
    /* query 1 = [1, 0]: scores [1, 0], sparsemax [1, 0]. */
    CHECK_NEAR(out2[2], 1.0, 1e-6);
    CHECK_NEAR(out2[3], 2.0, 1e-6);
  }
  CHECK_FAILS(eg_attention_forward(EG_DEVICE_CPU, cmat(q, 1, 2), cmat(k, 2, 2), cmat(v, 1, 2), mat(out, 1, 2), NULL),
              EG_ERROR_ARGUMENT, "attention");
  CHECK_FAILS(eg_attention_forward(EG_DEVICE_CPU, cmat(q, 1, 2), cmat(k, 2, 2), cmat(NULL, 2, 2), mat(out, 1, 2), NULL),
              EG_ERROR_ARGUMENT, "eg_attention_forward: v is NULL");
}

/* Softmax attention of one query row in double: out[c] = sum_j p_j v[j][c]
 * over keys j < visible (rows of k and v `stride` apart). */
static void softmax_row(const double* q, const double* k, const double* v, size_t visible, size_t d, size_t dv,
                        size_t stride, double scale, double* out) {
  double s[8], big = -INFINITY, sum = 0.0;
  size_t j, c;
  for (j = 0; j < visible; ++j) {
    s[j] = 0.0;
    for (c = 0; c < d; ++c) s[j] += q[c] * k[j * stride + c];
    s[j] *= scale;
    if (s[j] > big) big = s[j];
  }
  for (j = 0; j < visible; ++j) sum += exp(s[j] - big);
  for (c = 0; c < dv; ++c) out[c] = 0.0;
  for (j = 0; j < visible; ++j)
    for (c = 0; c < dv; ++c) out[c] += exp(s[j] - big) / sum * v[j * stride + c];
}

static void test_batched_attention(void) {
  /* B = 2 sequences, Hq = 2 query heads sharing Hkv = 1 key/value head, n = 3
   * queries, m = 4 keys, d = dv = 2; sequence 1 has 2 queries and 3 keys.
   * Causal: query i of sequence b sees keys j <= i + (m_b - n_b). Inputs are
   * multiples of 1/4 (exact in bfloat16 and float), q and k contiguous
   * [B, H, n, d] (zero strides), out [B, n, H, dv] (explicit strides). */
  const size_t B = 2, H = 2, n = 3, m = 4, d = 2;
  const int32_t qlen[2] = {3, 2}, klen[2] = {4, 3};
  double qd[2 * 2 * 3 * 2], kd[2 * 4 * 2], vd[2 * 4 * 2];
  float qf[24], kf[16], vf[16], outf[24];
  uint16_t qb[24], kb[16], vb[16], outb[24];
  eg_batched_attention_options options = eg_batched_attention_options_default();
  size_t i, b, h, c, x;
  CHECK(options.transform.kind == EG_TRANSFORM_ENTMAX15 && options.scale == 0.0 && !options.causal &&
        options.query_lengths == NULL && options.key_lengths == NULL);
  for (x = 0; x < 24; ++x) qd[x] = (double)((int)(x * 7 % 9) - 4) / 4.0;
  for (x = 0; x < 16; ++x) kd[x] = (double)((int)(x * 5 % 7) - 3) / 4.0;
  for (x = 0; x < 16; ++x) vd[x] = (double)((int)(x * 3 % 11) - 5) / 4.0;
  for (x = 0; x < 24; ++x) qf[x] = (float)qd[x], qb[x] = eg_float_to_bfloat16((float)qd[x]);
  for (x = 0; x < 16; ++x) kf[x] = (float)kd[x], kb[x] = eg_float_to_bfloat16((float)kd[x]);
  for (x = 0; x < 16; ++x) vf[x] = (float)vd[x], vb[x] = eg_float_to_bfloat16((float)vd[x]);
  for (x = 0; x < 24; ++x) outf[x] = -7.0f, outb[x] = 0x7fc0; /* NaN: must be overwritten */
  options.transform = transform_named("softmax");
  options.causal = 1;
  options.query_lengths = qlen;
  options.key_lengths = klen;
  {
    eg_tensor4 q = {qf, EG_DTYPE_FLOAT32, 2, 2, 3, 2, 0, 0, 0};
    eg_tensor4 k = {kf, EG_DTYPE_FLOAT32, 2, 1, 4, 2, 0, 0, 0};
    eg_tensor4 v = {vf, EG_DTYPE_FLOAT32, 2, 1, 4, 2, 0, 0, 0};
    eg_tensor4 out = {outf, EG_DTYPE_FLOAT32, 2, 2, 3, 2, 3 * 2 * 2, 2, 2 * 2};
    CHECK_OK(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, &options));
    q.data = qb, k.data = kb, v.data = vb, out.data = outb;
    q.dtype = k.dtype = v.dtype = out.dtype = EG_DTYPE_BFLOAT16;
    CHECK_OK(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, &options));
  }
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < n; ++i) {
        double want[2] = {0.0, 0.0};
        const long last = (long)i + (long)klen[b] - (long)qlen[b];
        if ((int32_t)i < qlen[b] && last >= 0)
          softmax_row(&qd[((b * H + h) * n + i) * d], &kd[b * m * d], &vd[b * m * d], (size_t)last + 1, d, d, d,
                      1.0 / sqrt(2.0), want);
        for (c = 0; c < 2; ++c) {
          const size_t at = ((b * n + i) * H + h) * 2 + c; /* [B, n, H, dv] */
          const float got16 = eg_bfloat16_to_float(outb[at]);
          CHECK_NEAR(outf[at], want[c], 1e-6);
          /* one bfloat16 rounding (at most 2^-8 relative) of the float32 result */
          CHECK_NEAR(got16, want[c], fabs(want[c]) / 256.0 + 1e-6);
          if ((int32_t)i >= qlen[b]) CHECK(outf[at] == 0.0f && outb[at] == 0);
        }
      }

  /* The conversions: exact widening, round to nearest even, overflow, NaN. */
  CHECK(eg_float_to_bfloat16(1.0f) == 0x3f80 && eg_bfloat16_to_float(0xc040) == -3.0f);
  CHECK(eg_float_to_bfloat16(1.0f + 1.0f / 256.0f) == 0x3f80); /* tie: even */
  CHECK(eg_float_to_float16(2049.0f) == 0x6800 && eg_float_to_float16(2051.0f) == 0x6802);
  CHECK(eg_float_to_float16(65520.0f) == 0x7c00 && eg_float16_to_float(0x7bff) == 65504.0f);
  CHECK(eg_float16_to_float(0x0001) == ldexpf(1.0f, -24));
  CHECK(isnan(eg_float16_to_float(eg_float_to_float16(NAN))) && isnan(eg_bfloat16_to_float(eg_float_to_bfloat16(NAN))));

  /* Errors: the C layer's (NULL, enum values, zero strides that overflow),
   * then the C++ API's, and out untouched. */
  {
    eg_tensor4 q = {qf, EG_DTYPE_FLOAT32, 2, 2, 3, 2, 0, 0, 0};
    eg_tensor4 k = {kf, EG_DTYPE_FLOAT32, 2, 1, 4, 2, 0, 0, 0};
    eg_tensor4 v = {vf, EG_DTYPE_FLOAT32, 2, 1, 4, 2, 0, 0, 0};
    float sentinel[24];
    eg_tensor4 out = {sentinel, EG_DTYPE_FLOAT32, 2, 2, 3, 2, 0, 0, 0};
    const int32_t bad_lengths[2] = {3, 5};
    for (x = 0; x < 24; ++x) sentinel[x] = -7.0f;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, NULL, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "eg_batched_attention_forward: q is NULL");
    k.dtype = (eg_dtype)7;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "eg_batched_attention_forward: k->dtype is out of range (got 7");
    k.dtype = EG_DTYPE_BFLOAT16;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "batched_attention_forward: k.dtype does not match q.dtype (got bfloat16, expected float32)");
    k.dtype = EG_DTYPE_FLOAT32;
    v.rows = (size_t)1 << 62;
    v.cols = 8;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "eg_batched_attention_forward: v: a zero stride's packed size overflows");
    v.rows = 4;
    v.cols = 2;
    q.heads = 3;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "batched_attention_forward: out.heads does not match q.heads (got 2, expected 3)");
    q.heads = 2;
    out.data = vf; /* only compared as addresses: the call refuses before writing */
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "batched_attention_forward: out overlaps v");
    out.data = sentinel;
    options.query_lengths = options.key_lengths = NULL;
    options.key_lengths = bad_lengths;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, &options), EG_ERROR_ARGUMENT,
                "batched_attention_forward: options.key_lengths[1] is out of range (got 5, expected 0 <= length <= m "
                "= 4)");
    options.key_lengths = NULL;
    options.transform.kind = (eg_transform_kind)11;
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, &options), EG_ERROR_ARGUMENT,
                "options->transform.kind is out of range (got 11");
    options.transform = transform_named("adaptive_span");
    CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CPU, &q, &k, &v, &out, &options), EG_ERROR_ARGUMENT,
                "options.transform is adaptive_span");
    for (x = 0; x < 24; ++x) CHECK(sentinel[x] == -7.0f);
    if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0))
      CHECK_FAILS(eg_batched_attention_forward(EG_DEVICE_CUDA, &q, &k, &v, &out, NULL), EG_ERROR_DEVICE,
                  "batched_attention_forward: device cuda is not available (");
  }
}

static void test_batched_attention_backward(void) {
  /* B = 1, Hq = 2 query heads sharing Hkv = 1 key/value head, n = 3, m = 4,
   * d = dv = 2, float32 contiguous: grad_q is each head's
   * eg_attention_backward, grad_k and grad_v their sum over the two heads
   * (float32, head 0 first), bit for bit; then the same call as bfloat16
   * DLPack tensors and as eg_tensor4 give the same bits. */
  float q[12], k[8], v[8], go[12], gq[12], gk[8], gv[8];
  float hq[6], hk[2][8], hv[2][8];
  uint16_t q16[12], k16[8], v16[8], go16[12], gq16[2][12], gk16[2][8], gv16[2][8];
  int64_t q_shape[4] = {1, 2, 3, 2}, kv_shape[4] = {1, 1, 4, 2};
  eg_batched_attention_options options = eg_batched_attention_options_default();
  eg_attention_options head_options = eg_attention_options_default();
  size_t x, h;
  for (x = 0; x < 12; ++x) q[x] = (float)((int)(x * 7 % 9) - 4) / 4.0f, go[x] = (float)((int)(x * 5 % 11) - 5) / 8.0f;
  for (x = 0; x < 8; ++x) k[x] = (float)((int)(x * 5 % 7) - 3) / 4.0f, v[x] = (float)((int)(x * 3 % 11) - 5) / 4.0f;
  options.transform = head_options.transform = transform_named("entmax15");
  options.causal = head_options.causal = 1;
  {
    eg_tensor4 tq = {q, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0}, tk = {k, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0};
    eg_tensor4 tv = {v, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0}, tgo = {go, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0};
    eg_tensor4 tgq = {gq, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0}, tgk = {gk, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0};
    eg_tensor4 tgv = {gv, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0};
    CHECK_OK(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options));
    for (h = 0; h < 2; ++h) {
      CHECK_OK(eg_attention_backward(EG_DEVICE_CPU, cmat(q + 6 * h, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2),
                                     cmat(go + 6 * h, 3, 2), mat(hq, 3, 2), mat(hk[h], 4, 2), mat(hv[h], 4, 2),
                                     &head_options));
      for (x = 0; x < 6; ++x) CHECK(gq[6 * h + x] == hq[x]);
    }
    for (x = 0; x < 8; ++x) CHECK(gk[x] == hk[0][x] + hk[1][x] && gv[x] == hv[0][x] + hv[1][x]);

    /* Errors: the C layer's and the C++ API's, gradients untouched. */
    for (x = 0; x < 8; ++x) gk[x] = -7.0f;
    CHECK_FAILS(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, NULL, &options),
                EG_ERROR_ARGUMENT, "eg_batched_attention_backward: grad_v is NULL");
    tgk.data = k;
    CHECK_FAILS(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options),
                EG_ERROR_ARGUMENT, "batched_attention_backward: grad_k overlaps k");
    tgk.data = gk;
    tgk.heads = 2;
    CHECK_FAILS(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options),
                EG_ERROR_ARGUMENT, "batched_attention_backward: grad_k.heads does not match k.heads (got 2, expected 1)");
    tgk.heads = 1;
    {
      const float kept = go[7];
      go[7] = NAN;
      CHECK_FAILS(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options),
                  EG_ERROR_ARGUMENT,
                  "batched_attention_backward: grad_out has a non-finite entry at [0, 1, 0, 1] (got NaN");
      go[7] = kept;
    }
    for (x = 0; x < 8; ++x) CHECK(gk[x] == -7.0f);
    if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0))
      CHECK_FAILS(eg_batched_attention_backward(EG_DEVICE_CUDA, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options),
                  EG_ERROR_DEVICE, "batched_attention_backward: device cuda is not available (");
  }
  for (x = 0; x < 12; ++x) q16[x] = eg_float_to_bfloat16(q[x]), go16[x] = eg_float_to_bfloat16(go[x]);
  for (x = 0; x < 8; ++x) k16[x] = eg_float_to_bfloat16(k[x]), v16[x] = eg_float_to_bfloat16(v[x]);
  {
    eg_tensor4 tq = {q16, EG_DTYPE_BFLOAT16, 1, 2, 3, 2, 0, 0, 0}, tk = {k16, EG_DTYPE_BFLOAT16, 1, 1, 4, 2, 0, 0, 0};
    eg_tensor4 tv = {v16, EG_DTYPE_BFLOAT16, 1, 1, 4, 2, 0, 0, 0};
    eg_tensor4 tgo = {go16, EG_DTYPE_BFLOAT16, 1, 2, 3, 2, 0, 0, 0};
    eg_tensor4 tgq = {gq16[0], EG_DTYPE_BFLOAT16, 1, 2, 3, 2, 0, 0, 0};
    eg_tensor4 tgk = {gk16[0], EG_DTYPE_BFLOAT16, 1, 1, 4, 2, 0, 0, 0};
    eg_tensor4 tgv = {gv16[0], EG_DTYPE_BFLOAT16, 1, 1, 4, 2, 0, 0, 0};
    eg_dl_tensor dq = dl_tensor(q16, 4, 16, q_shape, NULL), dk = dl_tensor(k16, 4, 16, kv_shape, NULL);
    eg_dl_tensor dv = dl_tensor(v16, 4, 16, kv_shape, NULL), dgo = dl_tensor(go16, 4, 16, q_shape, NULL);
    eg_dl_tensor dgq = dl_tensor(gq16[1], 4, 16, q_shape, NULL), dgk = dl_tensor(gk16[1], 4, 16, kv_shape, NULL);
    eg_dl_tensor dgv = dl_tensor(gv16[1], 4, 16, kv_shape, NULL);
    dq.ndim = dk.ndim = dv.ndim = dgo.ndim = dgq.ndim = dgk.ndim = dgv.ndim = 4;
    CHECK_OK(eg_batched_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &tgo, &tgq, &tgk, &tgv, &options));
    CHECK_OK(eg_batched_attention_backward_dlpack(&dq, &dk, &dv, &dgo, &dgq, &dgk, &dgv, &options));
    for (x = 0; x < 12; ++x) CHECK(gq16[0][x] == gq16[1][x]);
    for (x = 0; x < 8; ++x) CHECK(gk16[0][x] == gk16[1][x] && gv16[0][x] == gv16[1][x]);
    /* within bfloat16's rounding of the float32 gradients of the same (exactly representable) inputs */
    for (x = 0; x < 8; ++x) CHECK_NEAR(eg_bfloat16_to_float(gv16[0][x]), gv[x], fabs(gv[x]) / 128.0 + 1e-6);
    dgv.device.device_id = 1;
    CHECK_FAILS(eg_batched_attention_backward_dlpack(&dq, &dk, &dv, &dgo, &dgq, &dgk, &dgv, &options),
                EG_ERROR_ARGUMENT, "grad_v.device differs from q's");
  }
}

static void test_block_sparse_attention(void) {
  /* B = 1, Hq = 2, Hkv = 1, n = 3, m = 4, d = dv = 2, float32, causal softmax; blocks of 2 x 2. Every block kept
   * is batched attention; head 1's graph without its first key block sees keys 2 and 3 only. */
  float q[12], k[8], v[8], dense[12], sparse[12], go[12], gq[12], gk[8], gv[8];
  const size_t all_offsets[5] = {0, 2, 4, 6, 8}; /* (head, query block): {0, 1} each */
  const uint32_t all_blocks[8] = {0, 1, 0, 1, 0, 1, 0, 1};
  const size_t part_offsets[5] = {0, 2, 4, 4, 5}; /* head 1: block row 0 empty, row 1 = {1} */
  const uint32_t part_blocks[5] = {0, 1, 0, 1, 1};
  eg_block_graph graph = {1, 2, 3, 4, 2, 2, all_offsets, all_blocks};
  eg_batched_attention_options options = eg_batched_attention_options_default();
  eg_tensor4 tq = {q, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0}, tk = {k, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0};
  eg_tensor4 tv = {v, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0}, tout = {dense, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0};
  eg_tensor4 tgo = {go, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0}, tgq = {gq, EG_DTYPE_FLOAT32, 1, 2, 3, 2, 0, 0, 0};
  eg_tensor4 tgk = {gk, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0}, tgv = {gv, EG_DTYPE_FLOAT32, 1, 1, 4, 2, 0, 0, 0};
  size_t x;
  for (x = 0; x < 12; ++x) q[x] = (float)((int)(x * 7 % 9) - 4) / 4.0f, go[x] = (float)((int)(x * 5 % 11) - 5) / 8.0f;
  for (x = 0; x < 8; ++x) k[x] = (float)((int)(x * 5 % 7) - 3) / 4.0f, v[x] = (float)((int)(x * 3 % 11) - 5) / 4.0f;
  options.transform = transform_named("softmax");
  options.causal = 1;
  CHECK_OK(eg_batched_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &tout, &options));
  tout.data = sparse;
  CHECK_OK(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tout, &options));
  for (x = 0; x < 12; ++x) CHECK_NEAR(sparse[x], dense[x], 1e-6);
  CHECK_OK(eg_block_sparse_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tgo, &tgq, &tgk, &tgv, &options));
  graph.offsets = part_offsets;
  graph.blocks = part_blocks;
  CHECK_OK(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tout, &options));
  for (x = 0; x < 6; ++x) CHECK_NEAR(sparse[x], dense[x], 1e-6); /* head 0 unchanged */
  /* head 1: queries 0 and 1 (block row 0) see nothing; query 2 sees keys 2 and 3 (causal: j <= 2 + 1) */
  for (x = 6; x < 10; ++x) CHECK(sparse[x] == 0.0f);
  {
    const double s2 = (q[10] * k[4] + q[11] * k[5]) / sqrt(2.0), s3 = (q[10] * k[6] + q[11] * k[7]) / sqrt(2.0);
    const double p2 = 1.0 / (1.0 + exp(s3 - s2));
    CHECK_NEAR(sparse[10], p2 * v[4] + (1.0 - p2) * v[6], 1e-6);
    CHECK_NEAR(sparse[11], p2 * v[5] + (1.0 - p2) * v[7], 1e-6);
  }
  /* Errors: the graph's, named; out untouched. */
  for (x = 0; x < 12; ++x) sparse[x] = -7.0f;
  CHECK_FAILS(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, NULL, &tout, &options), EG_ERROR_ARGUMENT,
              "eg_block_sparse_attention_forward: graph is NULL");
  graph.heads = 3;
  CHECK_FAILS(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tout, &options),
              EG_ERROR_ARGUMENT,
              "block_sparse_attention_forward: graph.heads does not match q.heads (got 3, expected 2 or 1)");
  graph.heads = 2;
  graph.key_block = 0;
  CHECK_FAILS(eg_block_sparse_attention_backward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tgo, &tgq, &tgk, &tgv, &options),
              EG_ERROR_ARGUMENT,
              "block_sparse_attention_backward: graph: query_block and key_block must be >= 1 (got 2 and 0)");
  graph.key_block = 2;
  graph.blocks = NULL;
  CHECK_FAILS(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tout, &options), EG_ERROR_ARGUMENT,
              "graph->blocks is NULL");
  graph.blocks = part_blocks;
  graph.batch = 2;
  CHECK_FAILS(eg_block_sparse_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &graph, &tout, &options), EG_ERROR_ARGUMENT,
              "graph.batch does not match q.batch (got 2, expected 1)");
  graph.batch = 1;
  /* Another device runs it through its backend; without a usable GPU, EG_ERROR_DEVICE. */
  if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0))
    CHECK(eg_block_sparse_attention_forward(EG_DEVICE_CUDA, &tq, &tk, &tv, &graph, &tout, &options) ==
          EG_ERROR_DEVICE);
  for (x = 0; x < 12; ++x) CHECK(sparse[x] == -7.0f);
  if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0))
    CHECK_FAILS(eg_block_sparse_attention_forward(EG_DEVICE_CUDA, &tq, &tk, &tv, &graph, &tout, &options),
                EG_ERROR_DEVICE, "device cuda is not available");
}

static void test_device_stream(void) {
  int queue = 0; /* any address stands for a stream: nothing runs on it here */
  CHECK_OK(eg_set_device_stream(EG_DEVICE_CUDA, &queue));
  CHECK_OK(eg_set_device_stream(EG_DEVICE_CUDA, NULL));
  CHECK_FAILS(eg_set_device_stream(EG_DEVICE_CPU, &queue), EG_ERROR_ARGUMENT,
              "set_device_stream: device is cpu, which has no stream");
  CHECK_OK(eg_set_device_stream(EG_DEVICE_CPU, NULL));
  CHECK_FAILS(eg_set_device_stream((eg_device)9, NULL), EG_ERROR_ARGUMENT, "device is out of range");
}

static void test_attention_dlpack(void) {
  /* One head as eg_matrix and as DLPack tensors (q read with row stride 4) gives the same bits. */
  float q[3 * 4], k[5 * 2], v[5 * 2], expect[6], got[6];
  uint8_t padding[5] = {1, 0, 1, 1, 1};
  int64_t q_shape[2] = {3, 2}, q_strides[2] = {4, 1}, kv_shape[2] = {5, 2}, out_shape[2] = {3, 2};
  eg_attention_options options = eg_attention_options_default();
  eg_dl_tensor tq, tk, tv, tout;
  size_t x;
  for (x = 0; x < 12; ++x) q[x] = (float)((int)(x * 7 % 9) - 4) / 4.0f;
  for (x = 0; x < 10; ++x) k[x] = (float)((int)(x * 5 % 7) - 3) / 4.0f, v[x] = (float)((int)(x * 3 % 11) - 5) / 4.0f;
  options.causal = 1;
  options.key_padding = padding;
  {
    eg_const_matrix mq = {q, 3, 2, 4};
    CHECK_OK(eg_attention_forward(EG_DEVICE_CPU, mq, cmat(k, 5, 2), cmat(v, 5, 2), mat(expect, 3, 2), &options));
  }
  tq = dl_tensor(q, 2, 32, q_shape, q_strides);
  tk = dl_tensor(k, 2, 32, kv_shape, NULL);
  tv = dl_tensor(v, 2, 32, kv_shape, NULL);
  tout = dl_tensor(got, 2, 32, out_shape, NULL);
  CHECK_OK(eg_attention_forward_dlpack(&tq, &tk, &tv, &tout, &options));
  for (x = 0; x < 6; ++x) CHECK(got[x] == expect[x]);
  tv.dtype.bits = 16;
  CHECK_FAILS(eg_attention_forward_dlpack(&tq, &tk, &tv, &tout, &options), EG_ERROR_ARGUMENT, "v.dtype is not float32");
  tv.dtype.bits = 32;
  tk.device.device_id = 2;
  CHECK_FAILS(eg_attention_forward_dlpack(&tq, &tk, &tv, &tout, &options), EG_ERROR_ARGUMENT, "k.device differs from q's");
  tk.device.device_id = 0;
  if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0)) {
    tq.device.device_type = tk.device.device_type = tv.device.device_type = tout.device.device_type = EG_DL_CUDA;
    CHECK(eg_attention_forward_dlpack(&tq, &tk, &tv, &tout, &options) == EG_ERROR_DEVICE);
  }
}

static void test_batched_attention_dlpack(void) {
  /* The same call as eg_tensor4 and as 4-D DLPack tensors gives the same bits: bfloat16 (code 4) and float16
   * (code 2, 16 bits) q, k, v contiguous [B, H, n, d]; out a [B, H, n, dv] view of [B, n, H, dv] memory, as
   * torch's out.transpose(1, 2) hands it over. */
  const int32_t qlen[2] = {3, 2}, klen[2] = {4, 3};
  uint16_t q16[24], k16[16], v16[16], expect[24], got[24];
  int64_t q_shape[4] = {2, 2, 3, 2}, kv_shape[4] = {2, 1, 4, 2}, out_strides[4] = {12, 2, 4, 1};
  eg_batched_attention_options options = eg_batched_attention_options_default();
  eg_dl_tensor q, k, v, out;
  size_t x;
  int pass;
  options.causal = 1;
  options.query_lengths = qlen;
  options.key_lengths = klen;
  for (pass = 0; pass < 2; ++pass) {
    const eg_dtype dtype = pass == 0 ? EG_DTYPE_BFLOAT16 : EG_DTYPE_FLOAT16;
    const uint8_t code = pass == 0 ? 4 : 2;
    for (x = 0; x < 24; ++x) {
      const float f = (float)((int)(x * 7 % 9) - 4) / 4.0f;
      q16[x] = pass == 0 ? eg_float_to_bfloat16(f) : eg_float_to_float16(f);
      expect[x] = got[x] = 0x1234;
    }
    for (x = 0; x < 16; ++x) {
      const float fk = (float)((int)(x * 5 % 7) - 3) / 4.0f, fv = (float)((int)(x * 3 % 11) - 5) / 4.0f;
      k16[x] = pass == 0 ? eg_float_to_bfloat16(fk) : eg_float_to_float16(fk);
      v16[x] = pass == 0 ? eg_float_to_bfloat16(fv) : eg_float_to_float16(fv);
    }
    {
      eg_tensor4 tq = {q16, dtype, 2, 2, 3, 2, 0, 0, 0}, tk = {k16, dtype, 2, 1, 4, 2, 0, 0, 0};
      eg_tensor4 tv = {v16, dtype, 2, 1, 4, 2, 0, 0, 0}, tout = {expect, dtype, 2, 2, 3, 2, 12, 2, 4};
      CHECK_OK(eg_batched_attention_forward(EG_DEVICE_CPU, &tq, &tk, &tv, &tout, &options));
    }
    q = dl_tensor(q16, code, 16, q_shape, NULL);
    k = dl_tensor(k16, code, 16, kv_shape, NULL);
    v = dl_tensor(v16, code, 16, kv_shape, NULL);
    out = dl_tensor(got, code, 16, q_shape, out_strides);
    q.ndim = k.ndim = v.ndim = out.ndim = 4;
    CHECK_OK(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, &options));
    for (x = 0; x < 24; ++x) CHECK(got[x] == expect[x]);
  }

  /* What DLPack can get wrong is named, with the argument as data; out untouched. */
  for (x = 0; x < 24; ++x) got[x] = 0x1234;
  q.dtype.bits = 32; /* float16's code with 32 bits is float32, which k and v are not */
  CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
              "batched_attention_forward: k.dtype does not match q.dtype");
  q.dtype.code = 0;
  CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
              "q.dtype is not float32, bfloat16 or float16 (got code 0, 32 bits, 1 lanes)");
  CHECK(strcmp(eg_last_error_argument(), "q.dtype") == 0);
  q.dtype.code = 2;
  q.dtype.bits = 16;
  k.ndim = 3;
  CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
              "k.ndim must be 4, (batch, heads, rows, cols) (got 3)");
  k.ndim = 4;
  {
    int64_t negative[4] = {2, 1, 4, -2}, not_last[4] = {16, 8, 2, 2};
    v.shape = negative;
    CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "v.shape has a negative size (got [2, 1, 4, -2])");
    v.shape = kv_shape;
    v.strides = not_last;
    CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "v.strides: the last stride must be 1 (got [16, 8, 2, 2])");
    v.strides = NULL;
  }
  {
    int64_t huge[4] = {2, (int64_t)1 << 40, (int64_t)1 << 40, 2};
    v.shape = huge;
    CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
                "v.shape is too large to be packed");
    v.shape = kv_shape;
  }
  out.device.device_id = 3;
  CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
              "out.device differs from q's");
  out.device.device_id = 0;
  /* The C++ checks on the views: out is q's memory. */
  out.data = q16;
  out.strides = NULL;
  CHECK_FAILS(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL), EG_ERROR_ARGUMENT,
              "batched_attention_forward: out overlaps q");
  out.data = got;
  for (x = 0; x < 24; ++x) CHECK(got[x] == 0x1234);
  if (!eg_device_available(EG_DEVICE_CUDA, NULL, 0)) {
    q.device.device_type = k.device.device_type = v.device.device_type = out.device.device_type = EG_DL_CUDA;
    CHECK(eg_batched_attention_forward_dlpack(&q, &k, &v, &out, NULL) == EG_ERROR_DEVICE);
  }
}

static void test_graphs(void) {
  /* 2 queries x 3 keys: row 0 = {0, 2}, row 1 = {1}. */
  const size_t offsets[3] = {0, 2, 3};
  const uint32_t indices[3] = {0, 2, 1};
  const size_t gold_offsets[3] = {0, 1, 3};
  const uint32_t gold_indices[3] = {0, 0, 1};
  const uint32_t unsorted[3] = {2, 0, 1};
  eg_graph *g = NULL, *gold = NULL, *bad = NULL;
  eg_graph_csr csr;
  eg_graph_metrics m;
  CHECK_OK(eg_graph_create(2, 3, offsets, indices, &g));
  CHECK_OK(eg_graph_get_csr(g, &csr));
  CHECK(csr.queries == 2 && csr.keys == 3 && csr.edges == 3);
  CHECK(csr.offsets[1] == 2 && csr.indices[1] == 2 && csr.indices[2] == 1);
  CHECK_FAILS(eg_graph_create(2, 3, offsets, unsorted, &bad), EG_ERROR_ARGUMENT,
              "eg_graph_create: the keys of query 0 are not sorted and unique");
  CHECK_FAILS(eg_graph_create(2, 2, offsets, indices, &bad), EG_ERROR_ARGUMENT, "not below keys = 2");
  CHECK_FAILS(eg_graph_create(2, 3, NULL, indices, &bad), EG_ERROR_ARGUMENT, "eg_graph_create: offsets is NULL");
  CHECK(bad == NULL);

  /* gold {(0,0), (1,0), (1,1)}; predicted {(0,0), (0,2), (1,1)}: 2 hits. */
  CHECK_OK(eg_graph_create(2, 3, gold_offsets, gold_indices, &gold));
  CHECK_OK(eg_compare_graphs(EG_DEVICE_CPU, g, gold, 0, &m));
  CHECK(m.gold == 3 && m.predicted == 3 && m.hits == 2 && m.allowed == 6 && m.queries == 2);
  CHECK_NEAR(m.recall, 2.0 / 3.0, 1e-12);
  CHECK_NEAR(m.sparsity, 0.5, 1e-12);
  /* causal with n = 2, m = 3: query 0 sees keys 0..1, so (0,2) is not allowed. */
  CHECK_OK(eg_compare_graphs(EG_DEVICE_CPU, g, gold, 1, &m));
  CHECK(m.predicted == 2 && m.allowed == 5);
  CHECK_FAILS(eg_compare_graphs(EG_DEVICE_CPU, g, NULL, 0, &m), EG_ERROR_ARGUMENT, "eg_compare_graphs: gold is NULL");
  eg_graph_free(g);
  eg_graph_free(gold);

  {
    /* sparsemax of scores [1, 0, -1] keeps key 0 only. */
    const float q[2] = {1.0f, 0.0f};
    const float k[6] = {1.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.0f};
    eg_head_view head;
    eg_graph* gg = NULL;
    memset(&head, 0, sizeof head);
    head.queries = cmat(q, 1, 2);
    head.keys = cmat(k, 3, 2);
    head.alpha = 2.0;
    head.scale = 1.0;
    CHECK_OK(eg_gold_graph(EG_DEVICE_CPU, &head, &gg));
    CHECK_OK(eg_graph_get_csr(gg, &csr));
    CHECK(csr.edges == 1 && csr.indices[0] == 0);
    eg_graph_free(gg);
  }
}

static void test_graph_attention(void) {
  /* 3 queries, 4 keys, d = dv = 2, sparsemax: attention on an empty graph
   * in exact mode repairs every row to dense attention; fast mode on the
   * empty graph gives zero rows, all unsettled. */
  const float q[6] = {1.0f, 0.0f, 0.0f, 2.0f, -1.0f, 1.0f};
  const float k[8] = {1.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.0f, 0.5f, 0.5f};
  const float v[8] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  const size_t offsets[4] = {0, 0, 0, 0};
  float dense[6], exact[6], fast[6];
  uint8_t settled[3] = {9, 9, 9};
  eg_graph* empty = NULL;
  eg_graph_attention_options options = eg_graph_attention_options_default();
  eg_graph_attention_report report;
  size_t i;
  CHECK(options.mode == EG_GRAPH_ATTENTION_FAST && options.bound_rank == EG_BOUND_RANK_AUTO);
  CHECK_OK(eg_graph_create(3, 4, offsets, NULL, &empty));
  options.attention.transform = transform_named("sparsemax");
  CHECK_OK(eg_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), mat(dense, 3, 2),
                                &options.attention));
  options.mode = EG_GRAPH_ATTENTION_EXACT;
  memset(&report, 0, sizeof report);
  report.settled = settled;
  CHECK_OK(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                      mat(exact, 3, 2), &options, &report));
  for (i = 0; i < 6; ++i) CHECK_NEAR(exact[i], dense[i], 1e-5);
  CHECK(report.graph_rows + report.repaired_rows + report.dense_rows == 3);
  CHECK(report.graph_pairs == 0 && report.repair_pairs > 0);
  for (i = 0; i < 3; ++i) CHECK(settled[i] == EG_ROW_REPAIRED || settled[i] == EG_ROW_DENSE);

  /* The same call on DLPack tensors gives the same bits. */
  {
    float again[6];
    int64_t q_shape[2] = {3, 2}, kv_shape[2] = {4, 2};
    eg_dl_tensor tq = dl_tensor((void*)q, 2, 32, q_shape, NULL), tk = dl_tensor((void*)k, 2, 32, kv_shape, NULL);
    eg_dl_tensor tv = dl_tensor((void*)v, 2, 32, kv_shape, NULL), tout = dl_tensor(again, 2, 32, q_shape, NULL);
    CHECK_OK(eg_graph_attention_forward_dlpack(&tq, &tk, &tv, empty, &tout, &options));
    for (i = 0; i < 6; ++i) CHECK(again[i] == exact[i]);
    CHECK_FAILS(eg_graph_attention_forward_dlpack(&tq, &tk, &tv, NULL, &tout, &options), EG_ERROR_ARGUMENT,
                "graph is NULL");
    tout.device.device_type = EG_DL_CUDA;
    CHECK_FAILS(eg_graph_attention_forward_dlpack(&tq, &tk, &tv, empty, &tout, &options), EG_ERROR_ARGUMENT,
                "out.device differs from q's");
  }

  options.mode = EG_GRAPH_ATTENTION_FAST;
  CHECK_OK(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                      mat(fast, 3, 2), &options, &report));
  for (i = 0; i < 6; ++i) CHECK(fast[i] == 0.0f);
  for (i = 0; i < 3; ++i) CHECK(settled[i] == EG_ROW_UNSETTLED);

  /* Fast mode's error: unknown in fast mode on rows that miss keys; certify
   * bounds it, and the empty graph misses all of every row, so its output
   * (0) is off by at most max |v| = 8. Exact mode misses nothing. */
  {
    double missed[3] = {-1.0, -1.0, -1.0};
    report.missed_mass = missed;
    CHECK_OK(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                        mat(fast, 3, 2), &options, &report));
    for (i = 0; i < 3; ++i) CHECK(isnan(missed[i]));
    CHECK(report.bounded_rows == 0 && isnan(report.max_missed_mass) && isnan(report.mean_missed_mass));
    CHECK(isnan(report.output_error_bound));
    options.mode = EG_GRAPH_ATTENTION_CERTIFY;
    CHECK_OK(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                        mat(fast, 3, 2), &options, &report));
    for (i = 0; i < 3; ++i) CHECK(missed[i] == 1.0);
    CHECK(report.bounded_rows == 3 && report.max_missed_mass == 1.0 && report.mean_missed_mass == 1.0);
    CHECK(report.output_error_bound == 8.0);
    for (i = 0; i < 6; ++i) CHECK(fabs(dense[i]) <= report.output_error_bound);
    options.mode = EG_GRAPH_ATTENTION_EXACT;
    CHECK_OK(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                        mat(exact, 3, 2), &options, &report));
    for (i = 0; i < 3; ++i) CHECK(missed[i] == 0.0);
    CHECK(report.bounded_rows == 3 && report.max_missed_mass == 0.0 && report.output_error_bound == 0.0);
    report.missed_mass = NULL;
    options.mode = EG_GRAPH_ATTENTION_FAST;
  }

  /* softmax has no threshold: exact mode refuses it. */
  options.mode = EG_GRAPH_ATTENTION_EXACT;
  options.attention.transform = transform_named("softmax");
  CHECK_FAILS(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                         mat(fast, 3, 2), &options, NULL),
              EG_ERROR_ARGUMENT, "softmax");
  options.mode = (eg_graph_attention_mode)5;
  CHECK_FAILS(eg_graph_attention_forward(EG_DEVICE_CPU, cmat(q, 3, 2), cmat(k, 4, 2), cmat(v, 4, 2), empty,
                                         mat(fast, 3, 2), &options, NULL),
              EG_ERROR_ARGUMENT, "options->mode is out of range (got 5");
  eg_graph_free(empty);
}

static void test_predictors(void) {
  /* A causal window of half-width 1 over 4 tokens: row i = {i-1, i}. */
  const float q[8] = {1, 0, 0, 1, 1, 1, -1, 0};
  const char* settings[1] = {"window=1"};
  const char* bad_key[1] = {"nonsense=1"};
  const char* no_eq[1] = {"window"};
  eg_predictor *p = NULL, *same = NULL, *bad = NULL;
  eg_graph *g = NULL, *g2 = NULL;
  eg_graph_csr csr, csr2;
  const char* method = NULL;
  char* json = NULL;
  size_t i;
  CHECK_OK(eg_predictor_make("window", settings, 1, &p));
  CHECK_OK(eg_predictor_method(p, &method));
  CHECK(method != NULL && strcmp(method, "window") == 0);
  CHECK_OK(eg_predictor_predict(EG_DEVICE_CPU, p, cmat(q, 4, 2), cmat(q, 4, 2), 0, 0, 1, &g));
  CHECK_OK(eg_graph_get_csr(g, &csr));
  CHECK(csr.queries == 4 && csr.keys == 4 && csr.edges == 7);
  CHECK(csr.offsets[1] == 1 && csr.indices[0] == 0);
  for (i = 1; i < 4; ++i)
    CHECK(csr.offsets[i + 1] - csr.offsets[i] == 2 && csr.indices[csr.offsets[i]] == i - 1 &&
          csr.indices[csr.offsets[i] + 1] == i);

  /* Saved and loaded, it predicts the same graph. */
  CHECK_OK(eg_predictor_to_json(p, &json));
  CHECK(json != NULL && strstr(json, "\"entgraph-predictor\"") != NULL);
  CHECK_OK(eg_predictor_load_json(json, &same));
  CHECK_OK(eg_predictor_predict(EG_DEVICE_CPU, same, cmat(q, 4, 2), cmat(q, 4, 2), 0, 0, 1, &g2));
  CHECK_OK(eg_graph_get_csr(g2, &csr2));
  CHECK(csr2.edges == csr.edges && memcmp(csr2.indices, csr.indices, csr.edges * sizeof *csr.indices) == 0);
  eg_string_free(json);
  {
    /* On DLPack tensors: the same graph. */
    eg_graph* g3 = NULL;
    eg_graph_csr csr3;
    int64_t shape[2] = {4, 2};
    eg_dl_tensor tq = dl_tensor((void*)q, 2, 32, shape, NULL), tk = dl_tensor((void*)q, 2, 32, shape, NULL);
    CHECK_OK(eg_predictor_predict_dlpack(p, &tq, &tk, 0, 0, 1, &g3));
    CHECK_OK(eg_graph_get_csr(g3, &csr3));
    CHECK(csr3.edges == csr.edges && memcmp(csr3.indices, csr.indices, csr.edges * sizeof *csr.indices) == 0);
    eg_graph_free(g3);
    tk.dtype.code = 1;
    CHECK_FAILS(eg_predictor_predict_dlpack(p, &tq, &tk, 0, 0, 1, &g3), EG_ERROR_ARGUMENT, "k.dtype is not float32");
    CHECK_FAILS(eg_predictor_predict_dlpack(p, &tq, &tk, 0, 0, 1, NULL), EG_ERROR_ARGUMENT, "out is NULL");
  }

  CHECK_FAILS(eg_predictor_make("window", bad_key, 1, &bad), EG_ERROR_ARGUMENT, "nonsense");
  CHECK_FAILS(eg_predictor_make("window", no_eq, 1, &bad), EG_ERROR_ARGUMENT,
              "eg_predictor_make: settings[0] is not key=value (got 'window')");
  CHECK_FAILS(eg_predictor_make("no-such-method", NULL, 0, &bad), EG_ERROR_ARGUMENT, "no-such-method");
  CHECK_FAILS(eg_predictor_make("window", NULL, 1, &bad), EG_ERROR_ARGUMENT, "eg_predictor_make: settings is NULL");
  CHECK_FAILS(eg_predictor_load_json("{\"format\": 1", &bad), EG_ERROR_ARGUMENT, "load_predictor");
  CHECK_FAILS(eg_predictor_load_file("/nonexistent/params.json", &bad), EG_ERROR_IO, "/nonexistent/params.json");
  {
    /* A parameter file (in the test's working folder) loads as the text does. */
    const char* path = "c_api_test_predictor.json";
    FILE* file = fopen(path, "w");
    eg_predictor* from_file = NULL;
    const char* file_method = NULL;
    CHECK(file != NULL);
    if (file != NULL) {
      CHECK_OK(eg_predictor_to_json(p, &json));
      fputs(json, file);
      fclose(file);
      eg_string_free(json);
      CHECK_OK(eg_predictor_load_file(path, &from_file));
      CHECK_OK(eg_predictor_method(from_file, &file_method));
      CHECK(file_method != NULL && strcmp(file_method, "window") == 0);
      eg_predictor_free(from_file);
      remove(path);
    }
  }
  CHECK_FAILS(eg_predictor_predict(EG_DEVICE_CPU, p, cmat(q, 4, 2), cmat(q, 2, 4), 0, 0, 1, &g), EG_ERROR_ARGUMENT,
              "columns");
  CHECK(bad == NULL);
  eg_graph_free(g);
  eg_graph_free(g2);
  eg_predictor_free(p);
  eg_predictor_free(same);
}

/* The first text of data/teacher-causal/fixture, the PyTorch capture of the
 * shipped teacher: the C API's forward must reproduce its queries. */
static const char kFixtureText[] =
    "And God remembered Noah, and every living thing, and all the cattle that was with him in the ark: and God "
    "made a wind to pass over the earth, and the waters ass";

/* path under the repository root, in a static buffer. */
static const char* source_path(const char* path) {
  static char buffer[4096];
  const char* root = getenv("ENTGRAPH_SOURCE_DIR");
  snprintf(buffer, sizeof buffer, "%s/%s", root != NULL ? root : ENTGRAPH_SOURCE_DIR, path);
  return buffer;
}

static void test_capture_teacher_predictor(void) {
  eg_capture* capture = NULL;
  eg_capture_info info;
  eg_head_view cap_head, teacher_head;
  eg_teacher* teacher = NULL;
  eg_teacher_info tinfo;
  eg_teacher_output* output = NULL;
  eg_teacher_output_info oinfo;
  eg_const_matrix probs, logits;
  eg_predictor* predictor = NULL;
  const char* settings[3] = {"r=2", "clusters=2", "seed=1"};
  eg_graph *predicted = NULL, *gold = NULL;
  eg_graph_metrics metrics;
  double max_diff = 0.0, row_sum = 0.0;
  size_t i, j;

  CHECK_FAILS(eg_capture_load("/nonexistent/capture", &capture), EG_ERROR_IO, "/nonexistent/capture");
  CHECK(eg_last_error_code() == EG_CODE_IO);
  CHECK_FAILS(eg_teacher_load("/nonexistent/teacher", &teacher), EG_ERROR_IO, "/nonexistent/teacher");
  CHECK(eg_last_error_code() == EG_CODE_IO);
  CHECK_FAILS(eg_capture_load(NULL, &capture), EG_ERROR_ARGUMENT, "eg_capture_load: dir is NULL");
  CHECK(capture == NULL && teacher == NULL);

  CHECK_OK(eg_capture_load(source_path("data/teacher-causal/fixture"), &capture));
  CHECK_OK(eg_teacher_load(source_path("data/teacher-causal"), &teacher));
  if (capture == NULL || teacher == NULL) return;
  CHECK_OK(eg_capture_get_info(capture, &info));
  CHECK(info.layers == 4 && info.heads == 4 && info.head_dim == 32 && info.sequences == 2);
  CHECK(info.lengths[0] == 160 && info.lengths[1] == 37 && info.tokens == 197 && info.has_values);
  CHECK_OK(eg_capture_get_head(capture, 3, 2, 0, &cap_head));
  CHECK(cap_head.queries.rows == 160 && cap_head.queries.cols == 32 && cap_head.values.data != NULL);
  CHECK(cap_head.alpha == 1.5 && cap_head.causal == 1);
  CHECK_FAILS(eg_capture_get_head(capture, 4, 0, 0, &cap_head), EG_ERROR_ARGUMENT, "layer");

  CHECK_OK(eg_teacher_get_info(teacher, &tinfo));
  CHECK(tinfo.layers == 4 && tinfo.heads == 4 && tinfo.head_dim == 32 && tinfo.causal == 1 && tinfo.alpha == 1.5);
  CHECK(strlen(kFixtureText) == 160);
  CHECK_OK(eg_teacher_forward(EG_DEVICE_CPU, teacher, kFixtureText, 160, 1, &output));
  CHECK_FAILS(eg_teacher_forward(EG_DEVICE_CPU, teacher, kFixtureText, 0, 0, &output), EG_ERROR_ARGUMENT, "empty");
  if (output == NULL) return;
  CHECK_OK(eg_teacher_output_get_info(output, &oinfo));
  CHECK(oinfo.tokens == 160 && oinfo.outputs == 256 && oinfo.has_probs);
  CHECK_OK(eg_teacher_output_get_head(output, 3, 2, &teacher_head));
  CHECK(teacher_head.queries.rows == 160 && teacher_head.keys.cols == 32 && teacher_head.causal == 1);
  CHECK_NEAR(teacher_head.scale, cap_head.scale, 1e-12);
  for (i = 0; i < 160; ++i)
    for (j = 0; j < 32; ++j) {
      const double d = fabs(teacher_head.queries.data[i * teacher_head.queries.stride + j] -
                            cap_head.queries.data[i * cap_head.queries.stride + j]);
      if (d > max_diff) max_diff = d;
    }
  CHECK(max_diff < 1e-3); /* PyTorch's float32 forward of float16 weights */
  CHECK_OK(eg_teacher_output_get_probs(output, 3, 2, &probs));
  CHECK(probs.rows == 160 && probs.cols == 160);
  for (j = 0; j < 160; ++j) row_sum += probs.data[159 * probs.stride + j];
  CHECK_NEAR(row_sum, 1.0, 1e-5);
  CHECK(probs.data[0 * probs.stride + 1] == 0.0f); /* causal */
  CHECK_OK(eg_teacher_output_get_logits(output, &logits));
  CHECK(logits.rows == 160 && logits.cols == 256);

  /* A learned predictor fitted on the capture, predicting the teacher's head. */
  CHECK_OK(eg_predictor_make("sparsefinder-kmeans", settings, 3, &predictor));
  CHECK_FAILS(eg_predictor_fit(EG_DEVICE_CUDA, predictor, capture, 0), EG_ERROR_DEVICE, "device cuda");
  CHECK_FAILS(eg_predictor_predict(EG_DEVICE_CPU, predictor, teacher_head.queries, teacher_head.keys, 3, 2, 1,
                                   &predicted),
              EG_ERROR_ARGUMENT, "sparsefinder-kmeans");
  CHECK_OK(eg_predictor_fit(EG_DEVICE_CPU, predictor, capture, 0));
  CHECK_OK(eg_predictor_predict(EG_DEVICE_CPU, predictor, teacher_head.queries, teacher_head.keys, 3, 2, 1,
                                &predicted));
  CHECK_OK(eg_gold_graph(EG_DEVICE_CPU, &teacher_head, &gold));
  CHECK_OK(eg_compare_graphs(EG_DEVICE_CPU, predicted, gold, 1, &metrics));
  CHECK(metrics.gold > 0 && metrics.allowed == 160 * 161 / 2);
  CHECK(metrics.recall > 0.0 && metrics.recall <= 1.0 && metrics.sparsity > 0.0);
  {
    /* The gold graph is the support of the recorded probabilities. */
    eg_graph_csr csr;
    size_t nonzero = 0;
    CHECK_OK(eg_graph_get_csr(gold, &csr));
    for (i = 0; i < 160; ++i)
      for (j = 0; j < 160; ++j) nonzero += probs.data[i * probs.stride + j] > 0.0f;
    CHECK(csr.edges == nonzero);
  }

  eg_graph_free(predicted);
  eg_graph_free(gold);
  eg_predictor_free(predictor);
  eg_teacher_output_free(output);
  eg_teacher_free(teacher);
  eg_capture_free(capture);
}

/* A stride whose row addresses wrap past the top of memory is refused in
 * the one conversion every matrix argument goes through, naming the
 * argument, before anything is read or written; a huge stride over a single
 * row (only row 0 is addressed) is still accepted. */
static void test_stride_wrap(void) {
  const float scores[2] = {0.0f, 1.0f};
  float probs[4] = {-7.0f, -7.0f, -7.0f, -7.0f};
  const uint8_t keep[2] = {1, 1};
  const size_t huge = (size_t)-1 / 4; /* 2 rows of floats: data + huge * 4 bytes wraps */
  eg_transform t = transform_named("softmax");
  eg_const_matrix wrapped = {scores, 2, 2, huge};
  eg_matrix wrapped_out = {probs, 2, 2, huge};
  eg_mask wrapped_mask = {keep, 2, 2, (size_t)-1 - 1};
  eg_const_matrix one_row = {scores, 1, 2, huge};
  eg_matrix one_row_out = {probs, 1, 2, huge};
  eg_predictor* p = NULL;
  eg_graph* g = NULL;
  const char* settings[1] = {"window=1"};
  float grad[4] = {-7.0f, -7.0f, -7.0f, -7.0f};
  eg_matrix grad_wrapped = {grad, 2, 2, huge};
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, wrapped, mat(probs, 2, 2), NULL), EG_ERROR_ARGUMENT,
              "eg_transform_forward: scores: rows x stride reach past the end of the address space");
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(probs, 2, 2), wrapped_out, NULL), EG_ERROR_ARGUMENT,
              "eg_transform_forward: probs: rows x stride");
  CHECK_FAILS(eg_transform_forward(EG_DEVICE_CPU, &t, cmat(probs, 2, 2), mat(probs, 2, 2), &wrapped_mask),
              EG_ERROR_ARGUMENT, "eg_transform_forward: mask: rows x stride");
  CHECK_FAILS(eg_transform_backward(EG_DEVICE_CPU, &t, cmat(probs, 2, 2), cmat(probs, 2, 2), grad_wrapped),
              EG_ERROR_ARGUMENT, "eg_transform_backward: grad_scores: rows x stride");
  CHECK(grad[0] == -7.0f && grad[3] == -7.0f); /* untouched */
  CHECK_OK(eg_predictor_make("window", settings, 1, &p));
  CHECK_FAILS(eg_predictor_predict(EG_DEVICE_CPU, p, wrapped, cmat(scores, 1, 2), 0, 0, 1, &g), EG_ERROR_ARGUMENT,
              "eg_predictor_predict: q: rows x stride");
  CHECK(g == NULL);
  eg_predictor_free(p);
  /* One row never steps by the stride. */
  CHECK_OK(eg_transform_forward(EG_DEVICE_CPU, &t, one_row, one_row_out, NULL));
  CHECK_NEAR(probs[0] + probs[1], 1.0, 1e-6);
}

/* A FIFO named capture.json, or named as one of its arrays, is refused with
 * an error naming the file, at once: before issue 29 the load waited for a
 * writer forever. */
static void test_capture_fifo(void) {
  char dir[] = "/tmp/entgraph_c_api_fifo_XXXXXX";
  char json[64], queries[64];
  eg_capture* capture = NULL;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(json, sizeof json, "%s/capture.json", dir);
  snprintf(queries, sizeof queries, "%s/queries.npy", dir);
  CHECK(mkfifo(json, 0600) == 0);
  CHECK_FAILS(eg_capture_load(dir, &capture), EG_ERROR_IO, "capture.json: is a FIFO (pipe), not a regular file");
  CHECK(capture == NULL);
  unlink(json);
  /* A valid capture.json whose queries.npy is a FIFO. */
  {
    FILE* f = fopen(json, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
      fputs("{\"format\": \"entgraph-capture\", \"version\": 1, \"layers\": 1, \"heads\": 1, \"head_dim\": 2, "
            "\"lengths\": [3], \"queries\": \"queries.npy\", \"keys\": \"queries.npy\"}",
            f);
      fclose(f);
    }
  }
  CHECK(mkfifo(queries, 0600) == 0);
  CHECK_FAILS(eg_capture_load(dir, &capture), EG_ERROR_IO, "queries.npy: is a FIFO (pipe), not a regular file");
  CHECK(capture == NULL);
  unlink(queries);
  unlink(json);
  rmdir(dir);
}

int main(void) {
#ifdef ENTGRAPH_TEST_CUDA_FROM_C
  /* A C host registers the CUDA backend itself; twice is harmless. */
  CHECK_OK(eg_cuda_register_backend());
  CHECK_OK(eg_cuda_register_backend());
#endif
  test_basics();
  test_transform_parse();
  test_transform_forward();
  test_transform_backward();
  test_transform_dlpack();
  test_transform_errors();
  test_last_error_is_per_thread();
  test_devices();
  test_attention();
  test_batched_attention();
  test_batched_attention_backward();
  test_block_sparse_attention();
  test_device_stream();
  test_attention_dlpack();
  test_batched_attention_dlpack();
  test_graphs();
  test_graph_attention();
  test_predictors();
  test_capture_teacher_predictor();
  test_stride_wrap();
  test_capture_fifo();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
