// The C API's captures: read from a folder, sizes, one head's matrices.
#include "c_api/c_api_types.hpp"

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_capture_load(const char* dir, eg_capture** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, dir, "dir");
    require(fn, out, "out");
    emit(out, read_capture(dir));
  });
}

void eg_capture_free(eg_capture* capture) { delete capture; }

eg_status eg_capture_get_info(const eg_capture* capture, eg_capture_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, capture, "capture");
    require(fn, out, "out");
    const Capture& c = capture->capture;
    *out = {c.layers, c.heads, c.head_dim, c.sequences(), c.lengths.data(), c.tokens(), c.has_values() ? 1 : 0};
  });
}

eg_status eg_capture_get_head(const eg_capture* capture, size_t layer, size_t head, size_t sequence,
                              eg_head_view* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, capture, "capture");
    require(fn, out, "out");
    const Capture& c = capture->capture;
    const HeadSettings& s = c.head(layer, head);
    eg_head_view view{to_c(c.queries_of(layer, head, sequence)), to_c(c.keys_of(layer, head, sequence)),
                      eg_const_matrix{nullptr, 0, 0, 0}, s.alpha, s.scale, s.causal ? 1 : 0};
    if (c.has_values()) view.values = to_c(c.values_of(layer, head, sequence));
    *out = view;
  });
}

}  // extern "C"
