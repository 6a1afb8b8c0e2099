// The C API's teacher model: load, forward, and the forward's per-head
// matrices and logits.
#include <cmath>
#include <string_view>

#include "c_api/c_api_types.hpp"
#include "entgraph/model.hpp"

struct eg_teacher {
  entgraph::Teacher teacher;
};

struct eg_teacher_output {
  entgraph::TeacherOutput output;
  // What eg_teacher_output_get_head reports beside the matrices.
  double alpha;
  double scale;
  bool causal;
};

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_teacher_load(const char* dir, eg_teacher** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, dir, "dir");
    require(fn, out, "out");
    emit(out, Teacher::load(dir));
  });
}

void eg_teacher_free(eg_teacher* teacher) { delete teacher; }

eg_status eg_teacher_get_info(const eg_teacher* teacher, eg_teacher_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, teacher, "teacher");
    require(fn, out, "out");
    const TeacherConfig& c = teacher->teacher.config();
    *out = {c.layers, c.heads, c.head_dim(), c.d_model, c.context, c.outputs, c.alpha, c.causal ? 1 : 0};
  });
}

eg_status eg_teacher_forward(eg_device device, const eg_teacher* teacher, const char* text, size_t size,
                             int attention_probs, eg_teacher_output** out) {
  return guard(__func__, [&](const char* fn) {
    require_cpu(fn, device);
    require(fn, teacher, "teacher");
    require(fn, text, "text");
    require(fn, out, "out");
    ForwardOptions options;
    options.attention_probs = attention_probs != 0;
    const TeacherConfig& c = teacher->teacher.config();
    // The scale the forward uses, as Teacher::capture records it.
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
    *out = new eg_teacher_output{teacher->teacher.forward(std::string_view(text, size), options), c.alpha, scale,
                                 c.causal};
  });
}

void eg_teacher_output_free(eg_teacher_output* output) { delete output; }

eg_status eg_teacher_output_get_info(const eg_teacher_output* output, eg_teacher_output_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, output, "output");
    require(fn, out, "out");
    const TeacherOutput& o = output->output;
    *out = {o.layers, o.heads, o.tokens, o.head_dim, o.outputs, o.probs.empty() ? 0 : 1};
  });
}

eg_status eg_teacher_output_get_head(const eg_teacher_output* output, size_t layer, size_t head,
                                     eg_head_view* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, output, "output");
    require(fn, out, "out");
    const TeacherOutput& o = output->output;
    *out = {to_c(o.queries_of(layer, head)), to_c(o.keys_of(layer, head)), to_c(o.values_of(layer, head)),
            output->alpha, output->scale, output->causal ? 1 : 0};
  });
}

eg_status eg_teacher_output_get_probs(const eg_teacher_output* output, size_t layer, size_t head,
                                      eg_const_matrix* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, output, "output");
    require(fn, out, "out");
    *out = to_c(output->output.probs_of(layer, head));
  });
}

eg_status eg_teacher_output_get_logits(const eg_teacher_output* output, eg_const_matrix* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, output, "output");
    require(fn, out, "out");
    *out = to_c(output->output.logits_view());
  });
}

}  // extern "C"
