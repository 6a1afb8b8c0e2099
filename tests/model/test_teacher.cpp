// The teacher's C++ forward pass against PyTorch: each shipped teacher has a
// fixture (a capture of its Q, K, V on two sequences, plus the logits),
// exported by tools/train_teacher.py from the same float16 weights evaluated
// in float32. Also invariants of the attention it computes, loading errors,
// and split_text.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/io/safetensors.hpp"
#include "entgraph/model.hpp"
#include "support.hpp"

namespace entgraph {
namespace {

namespace fs = std::filesystem;

const std::string kTeachers[] = {"teacher-causal", "teacher-masked"};

std::string teacher_dir(const std::string& name) { return std::string(ENTGRAPH_SOURCE_DIR) + "/data/" + name; }

// Largest |a - b| over a head's rows.
double max_diff(MatrixView<const float> a, MatrixView<const float> b) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.cols == b.cols);
  double worst = 0.0;
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < a.cols; ++j) worst = std::max(worst, std::abs(double(a(i, j)) - double(b(i, j))));
  return worst;
}

// A scratch folder removed at the end of the test.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / ("entgraph_test_model_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

TEST_SUITE("model") {
  TEST_CASE("the C++ forward pass reproduces PyTorch's on the shipped teachers' fixtures") {
    for (const std::string& name : kTeachers) {
      CAPTURE(name);
      const Teacher teacher = Teacher::load(teacher_dir(name));
      const Capture fixture = read_capture(teacher_dir(name) + "/fixture");
      const std::vector<float> logits = read_npy(teacher_dir(name) + "/fixture/logits.npy").values<float>();
      const TeacherConfig& c = teacher.config();
      REQUIRE(fixture.layers == c.layers);
      REQUIRE(fixture.heads == c.heads);
      REQUIRE(fixture.texts.size() == fixture.sequences());
      REQUIRE(logits.size() == fixture.tokens() * c.outputs);
      for (CpuIsa isa : available_cpu_isas()) {
        test::IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        double worst_qkv = 0.0, worst_logit = 0.0;
        for (std::size_t s = 0; s < fixture.sequences(); ++s) {
          const TeacherOutput out = teacher.forward(fixture.texts[s]);
          REQUIRE(out.tokens == fixture.lengths[s]);
          for (std::size_t l = 0; l < c.layers; ++l)
            for (std::size_t h = 0; h < c.heads; ++h) {
              worst_qkv = std::max(worst_qkv, max_diff(out.queries_of(l, h), fixture.queries_of(l, h, s)));
              worst_qkv = std::max(worst_qkv, max_diff(out.keys_of(l, h), fixture.keys_of(l, h, s)));
              worst_qkv = std::max(worst_qkv, max_diff(out.values_of(l, h), fixture.values_of(l, h, s)));
            }
          const MatrixView<const float> want(logits.data() + fixture.offset(s) * c.outputs, out.tokens, c.outputs);
          worst_logit = std::max(worst_logit, max_diff(out.logits_view(), want));
        }
        MESSAGE(name << " " << isa_name << ": max |Q,K,V - torch| = " << worst_qkv
                     << ", max |logits - torch| = " << worst_logit);
        CHECK(worst_qkv <= 1e-4);
        CHECK(worst_logit <= 1e-4);
      }
    }
  }

  TEST_CASE("the teacher's attention is entmax: rows sum to 1, causal rows see no future, a = P v") {
    for (const std::string& name : kTeachers) {
      CAPTURE(name);
      const Teacher teacher = Teacher::load(teacher_dir(name));
      ForwardOptions options;
      options.attention_probs = true;
      const TeacherOutput out = teacher.forward("In the beginning was the Word, and the Word was with God.", options);
      std::size_t zeros = 0, allowed = 0;
      for (std::size_t l = 0; l < out.layers; ++l)
        for (std::size_t h = 0; h < out.heads; ++h) {
          const MatrixView<const float> p = out.probs_of(l, h), v = out.values_of(l, h), a = out.attention_of(l, h);
          for (std::size_t i = 0; i < out.tokens; ++i) {
            double sum = 0.0;
            for (std::size_t j = 0; j < out.tokens; ++j) {
              CHECK(p(i, j) >= 0.0f);
              if (teacher.config().causal && j > i) CHECK(p(i, j) == 0.0f);
              sum += p(i, j);
              if (!teacher.config().causal || j <= i) {
                ++allowed;
                zeros += p(i, j) == 0.0f ? 1 : 0;
              }
            }
            CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
            for (std::size_t c = 0; c < out.head_dim; ++c) {
              double pv = 0.0;
              for (std::size_t j = 0; j < out.tokens; ++j) pv += double(p(i, j)) * v(j, c);
              CHECK(a(i, c) == doctest::Approx(pv).epsilon(1e-4).scale(1.0));
            }
          }
        }
      MESSAGE(name << ": " << zeros << " of " << allowed << " allowed pairs get exactly 0");
      CHECK(zeros > 0);  // entmax attention of a trained teacher is sparse
    }
  }

  TEST_CASE("Teacher::capture holds the forward pass's Q, K and V, sequence by sequence") {
    const Teacher teacher = Teacher::load(teacher_dir("teacher-causal"));
    const std::vector<std::string> texts = {"And God said, Let there be light.", "x", "Amen."};
    const Capture cap = teacher.capture(texts);
    REQUIRE(cap.sequences() == 3);
    CHECK(cap.texts == texts);
    CHECK(cap.head(0, 0).causal);
    CHECK(cap.head(0, 0).alpha == 1.5);
    CHECK(cap.head(0, 0).scale == doctest::Approx(1.0 / std::sqrt(double(cap.head_dim))));
    for (std::size_t s = 0; s < texts.size(); ++s) {
      const TeacherOutput out = teacher.forward(texts[s]);
      for (std::size_t l = 0; l < cap.layers; ++l)
        for (std::size_t h = 0; h < cap.heads; ++h) {
          CHECK(max_diff(out.queries_of(l, h), cap.queries_of(l, h, s)) == 0.0);
          CHECK(max_diff(out.keys_of(l, h), cap.keys_of(l, h, s)) == 0.0);
          CHECK(max_diff(out.values_of(l, h), cap.values_of(l, h, s)) == 0.0);
        }
    }
    CHECK_THROWS_WITH_AS(teacher.capture({}), doctest::Contains("texts is empty"), Error);
    CHECK_THROWS_WITH_AS(teacher.capture({"ok", ""}), doctest::Contains("texts[1]"), Error);
  }

  TEST_CASE("Teacher::from_memory equals Teacher::load, and names the weights in its errors") {
    const std::string dir = teacher_dir("teacher-causal");
    const Teacher loaded = Teacher::load(dir);
    std::ifstream in(dir + "/model.safetensors", std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > 1000);
    const Teacher from_bytes = Teacher::from_memory(loaded.config(), bytes.data(), bytes.size(), "fetched.safetensors");
    const TeacherOutput a = loaded.forward("In the beginning");
    const TeacherOutput b = from_bytes.forward("In the beginning");
    CHECK(a.logits == b.logits);
    CHECK(a.queries == b.queries);
    CHECK_THROWS_WITH_AS(Teacher::from_memory(loaded.config(), bytes.data(), bytes.size() / 2, "fetched.safetensors"),
                         doctest::Contains("fetched.safetensors"), Error);
  }

  TEST_CASE("forward rejects empty and over-long text and out-of-vocab tokens") {
    const Teacher teacher = Teacher::load(teacher_dir("teacher-causal"));
    const std::size_t context = teacher.config().context;
    CHECK_THROWS_WITH_AS(teacher.forward(""), doctest::Contains("text is empty"), Error);
    CHECK_THROWS_WITH_AS(teacher.forward(std::string(context + 1, 'a')), doctest::Contains("more than the model's context"),
                         Error);
    CHECK_NOTHROW(teacher.forward(std::string(context, 'a')));
    CHECK_THROWS_WITH_AS(teacher.forward_tokens({1, 2, teacher.config().vocab}), doctest::Contains("outside the vocab"),
                         Error);
    CHECK_THROWS_WITH_AS(TeacherOutput{}.probs_of(0, 0), doctest::Contains("out of range"), Error);
    const TeacherOutput out = teacher.forward("abc");
    CHECK_THROWS_WITH_AS(out.probs_of(0, 0), doctest::Contains("not recorded"), Error);
  }

  TEST_CASE("loading rejects bad configs and weights that do not match them") {
    const std::string good_config = [] {
      std::ifstream f(teacher_dir("teacher-causal") + "/config.json");
      return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    CHECK_NOTHROW(parse_teacher_config(good_config));
    struct Case {
      const char* json;
      const char* error;
    };
    const Case cases[] = {
        {"not json", "not valid JSON"},
        {"[1, 2]", "expected a JSON object"},
        {R"({"version": 1})", "'format'"},
        {R"({"format": "entgraph-teacher", "version": 2})", "unsupported 'version'"},
        {R"({"format": "entgraph-teacher", "version": 1, "kind": "both"})", "'kind'"},
        {R"({"format": "entgraph-teacher", "version": 1, "d_model": 0})", "'d_model'"},
        {R"({"format": "entgraph-teacher", "version": 1, "d_model": -3})", "'d_model'"},
        {R"({"format": "entgraph-teacher", "version": 1, "layers": 1e9})", "'layers'"},
        {R"({"format": "entgraph-teacher", "version": 1, "d_model": 130, "heads": 4})", "multiple of 'heads'"},
        {R"({"format": "entgraph-teacher", "version": 1, "alpha": 0.5})", "'alpha'"},
        {R"({"format": "entgraph-teacher", "version": 1, "alpha": "high"})", "wrong type"},
        {R"({"format": "entgraph-teacher", "version": 1, "mask_token": 300})", "'mask_token'"},
        {R"({"format": "entgraph-teacher", "version": 1, "layer_norm_eps": 0})", "'layer_norm_eps'"},
        {R"({"format": "entgraph-teacher", "version": 1, "weights": "../../etc/passwd"})", "'weights'"},
    };
    for (const Case& c : cases) {
      const std::string json = c.json;
      CAPTURE(json);
      CHECK_THROWS_WITH_AS(parse_teacher_config(c.json, "cfg.json"), doctest::Contains(c.error), Error);
    }

    // Weights that disagree with the config: a missing, a misshapen and an extra tensor.
    const std::string dir = teacher_dir("teacher-causal");
    const TeacherConfig config = parse_teacher_config(good_config);
    const SafetensorsFile weights = read_safetensors(dir + "/" + config.weights);
    ScratchDir scratch("weights");
    const std::string path = (scratch.path / "w.safetensors").string();

    SafetensorsFile missing = weights;
    missing.tensors.erase(std::find_if(missing.tensors.begin(), missing.tensors.end(),
                                       [](const SafeTensor& t) { return t.name == "layers.2.fc1.bias"; }));
    write_safetensors(path, missing);
    CHECK_THROWS_WITH_AS(Teacher::from_parts(config, path), doctest::Contains("missing tensor 'layers.2.fc1.bias'"), Error);

    SafetensorsFile extra = weights;
    const float one = 1.0f;
    extra.tensors.push_back(make_f32_tensor("layers.9.q.weight", &one, {1}));
    write_safetensors(path, extra);
    CHECK_THROWS_WITH_AS(Teacher::from_parts(config, path), doctest::Contains("unexpected tensor 'layers.9.q.weight'"),
                         Error);

    TeacherConfig wider = config;
    wider.d_mlp = config.d_mlp * 2;
    CHECK_THROWS_WITH_AS(Teacher::from_parts(wider, dir + "/" + config.weights),
                         doctest::Contains("layers.0.fc1.weight' has shape"), Error);

    SafetensorsFile nan = weights;
    for (SafeTensor& t : nan.tensors)
      if (t.name == "ln_f.bias") {
        std::vector<float> v = t.to_float();
        v[3] = std::nanf("");
        t = make_f32_tensor(t.name, v.data(), t.shape);
      }
    write_safetensors(path, nan);
    CHECK_THROWS_WITH_AS(Teacher::from_parts(config, path), doctest::Contains("'ln_f.bias' holds NaN"), Error);

    CHECK_THROWS_WITH_AS(Teacher::load((scratch.path / "nowhere").string()), doctest::Contains("config.json"), Error);
  }

  TEST_CASE("split_text cuts at most max_bytes, keeps every byte, and does not cut UTF-8 characters") {
    CHECK(split_text("abcdefg", 3) == std::vector<std::string>{"abc", "def", "g"});
    CHECK(split_text("abc", 3) == std::vector<std::string>{"abc"});
    CHECK(split_text("", 3).empty());
    // "é" is 2 bytes: a cut after "ab" + first byte of é moves back by one.
    CHECK(split_text("ab\xc3\xa9z", 3) == std::vector<std::string>{"ab", "\xc3\xa9z"});
    // A piece of one byte cannot hold a 2-byte character: it is cut anyway.
    CHECK(split_text("\xc3\xa9", 1) == std::vector<std::string>{"\xc3", "\xa9"});
    CHECK_THROWS_WITH_AS(split_text("abc", 0), doctest::Contains("max_bytes"), Error);
  }
}

}  // namespace
}  // namespace entgraph
