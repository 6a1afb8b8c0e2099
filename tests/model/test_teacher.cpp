// The teacher's C++ forward pass against PyTorch: each shipped teacher has a
// fixture (a capture of its Q, K, V on two sequences, plus the logits),
// exported by tools/train_teacher.py from the same float16 weights evaluated
// in float32. Also invariants of the attention it computes, rotary positions
// (teacher-long) far beyond the fixture, loading errors, the streaming
// capture, and split_text.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
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

const std::string kTeachers[] = {"teacher-causal", "teacher-masked", "teacher-long"};

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

  TEST_CASE("a forward without logits, or of the first k layers, has the full forward's heads, bit for bit") {
    for (const std::string& name : kTeachers) {
      CAPTURE(name);
      const Teacher teacher = Teacher::load(teacher_dir(name));
      ForwardOptions full;
      full.attention_probs = true;
      ForwardOptions heads = full;
      heads.logits = false;
      const std::string text = "Heads only: the last layer's MLP and the output head are skipped.";
      const TeacherOutput a = teacher.forward(text, full), b = teacher.forward(text, heads);
      CHECK(b.queries == a.queries);
      CHECK(b.keys == a.keys);
      CHECK(b.values == a.values);
      CHECK(b.attention == a.attention);
      CHECK(b.probs == a.probs);
      CHECK(b.logits.empty());
      CHECK_THROWS_WITH_AS(b.logits_view(), doctest::Contains("not computed (ForwardOptions::logits"), Error);
      CHECK(a.logits_view().rows == a.tokens);

      // The first k layers: the full forward's first k layers of every array, and no logits.
      for (std::size_t k = 1; k <= a.layers; ++k) {
        CAPTURE(k);
        ForwardOptions first = full;
        first.layers = k;
        const TeacherOutput f = teacher.forward(text, first);
        CHECK(f.layers == k);
        const std::size_t per_layer = a.heads * a.tokens * a.head_dim;
        const auto prefix = [&](const std::vector<float>& v, std::size_t size) { return std::vector<float>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(size)); };
        CHECK(f.queries == prefix(a.queries, k * per_layer));
        CHECK(f.keys == prefix(a.keys, k * per_layer));
        CHECK(f.attention == prefix(a.attention, k * per_layer));
        CHECK(f.probs == prefix(a.probs, k * a.heads * a.tokens * a.tokens));
        CHECK(f.logits.size() == (k == a.layers ? a.logits.size() : 0));
        CHECK_THROWS_WITH_AS(f.queries_of(k, 0), doctest::Contains("out of range"), Error);
      }
      ForwardOptions too_many = full;
      too_many.layers = a.layers + 1;
      CHECK_THROWS_WITH_AS(teacher.forward(text, too_many), doctest::Contains("ForwardOptions::layers is 5, the model has 4"), Error);
    }
  }

  TEST_CASE("the forward pass is bit-identical on 1, 2 and 3 threads") {
    for (const std::string& name : kTeachers) {
      CAPTURE(name);
      const Teacher teacher = Teacher::load(teacher_dir(name));
      ForwardOptions options;
      options.attention_probs = true;
      const std::string text(200, 'x');  // 200 rows: blocks of 32 and a partial one
      TeacherOutput one;
      {
        const test::ThreadsScope threads(1);
        one = teacher.forward(text + "The last rows differ from the first.", options);
      }
      for (const std::size_t t : {2, 3}) {
        CAPTURE(t);
        const test::ThreadsScope threads(t);
        const TeacherOutput many = teacher.forward(text + "The last rows differ from the first.", options);
        CHECK(many.queries == one.queries);
        CHECK(many.attention == one.attention);
        CHECK(many.probs == one.probs);
        CHECK(many.logits == one.logits);
      }
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
        {R"({"format": "entgraph-teacher", "version": 1, "alpha": "high"})", "'alpha' must be a number, got \"high\""},
        {R"({"format": "entgraph-teacher", "version": 1, "mask_token": 300})", "'mask_token'"},
        {R"({"format": "entgraph-teacher", "version": 1, "layer_norm_eps": 0})", "'layer_norm_eps'"},
        {R"({"format": "entgraph-teacher", "version": 1, "weights": "../../etc/passwd"})", "'weights'"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "sinusoidal"})",
         "'positions' must be \"learned\" or \"rotary\", got \"sinusoidal\""},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": 2})", "'positions' must be"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary"})", "'rotary_base' is required"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": 1})",
         "'rotary_base' must be a finite number > 1, got 1"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": 0.5})", "'rotary_base'"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": -100})", "'rotary_base'"},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": "100"})",
         "'rotary_base' must be a finite number > 1, got \"100\""},
        {R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": 100, "d_model": 12,
             "heads": 4})",
         "rotary positions need an even head dimension"},
        {R"({"format": "entgraph-teacher", "version": 1, "rotary_base": 100})", "'rotary_base' applies only"},
        {R"({"format": "entgraph-teacher", "version": 1, "alpha": 1.5, "alpha": 2})",
         "teacher config: cfg.json: duplicate key \"alpha\" in the file"},
        {R"({"format": "entgraph-teacher", "version": 1, "train": {"lr": 1, "lr": 2}})",
         "teacher config: cfg.json: duplicate key \"lr\" in the object \"train\" of the file"},
    };
    for (const Case& c : cases) {
      const std::string json = c.json;
      CAPTURE(json);
      CHECK_THROWS_WITH_AS(parse_teacher_config(c.json, "cfg.json"), doctest::Contains(c.error), Error);
    }

    // A bad value is quoted short, however long it is.
    const std::string long_positions = R"({"format": "entgraph-teacher", "version": 1, "positions": [)" +
                                       std::string(5000, '1').insert(0, "\"").append("\"") + "]}";
    try {
      parse_teacher_config(long_positions, "cfg.json");
      FAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("'positions' must be") != std::string::npos);
      CHECK(what.size() < 200);
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

    // Integer or boolean weights are a wrong file, not something to convert.
    for (const char* dtype : {"I16", "I32", "I64", "I8", "U8", "BOOL"}) {
      CAPTURE(dtype);
      SafetensorsFile ints = weights;
      for (SafeTensor& t : ints.tensors)
        if (t.name == "ln_f.bias") {
          t.dtype = dtype;
          t.bytes.assign(t.size() * safetensors_dtype_size(dtype), 0);
        }
      write_safetensors(path, ints);
      const std::string expected = std::string("tensor 'ln_f.bias' has dtype ") + dtype + " (expected a float dtype";
      CHECK_THROWS_WITH_AS(Teacher::from_parts(config, path), doctest::Contains(expected.c_str()), Error);
    }
    SafetensorsFile doubles = weights;  // F64 is a float dtype: read, rounded to float
    for (SafeTensor& t : doubles.tensors)
      if (t.name == "ln_f.bias") {
        const std::vector<float> v = t.to_float();
        t.dtype = "F64";
        t.bytes.assign(v.size() * 8, 0);
        for (std::size_t i = 0; i < v.size(); ++i) {
          const double x = v[i];
          std::memcpy(t.bytes.data() + 8 * i, &x, 8);  // little-endian host
        }
      }
    write_safetensors(path, doubles);
    CHECK_NOTHROW(Teacher::from_parts(config, path));

    // Positions: a rotary config has no position table, a learned one needs it.
    const TeacherConfig rotary = parse_teacher_config(
        R"({"format": "entgraph-teacher", "version": 1, "positions": "rotary", "rotary_base": 100})", "rotary.json");
    CHECK(rotary.positions == PositionScheme::rotary);
    CHECK(rotary.rotary_base == 100.0);
    CHECK(config.positions == PositionScheme::learned);
    CHECK_THROWS_WITH_AS(Teacher::from_parts(rotary, dir + "/" + config.weights),
                         doctest::Contains("unexpected tensor 'pos_emb.weight'"), Error);
    SafetensorsFile no_table = weights;
    no_table.tensors.erase(std::find_if(no_table.tensors.begin(), no_table.tensors.end(),
                                        [](const SafeTensor& t) { return t.name == "pos_emb.weight"; }));
    write_safetensors(path, no_table);
    CHECK_THROWS_WITH_AS(Teacher::from_parts(config, path), doctest::Contains("missing tensor 'pos_emb.weight'"), Error);
    CHECK_NOTHROW(Teacher::from_parts(rotary, path));
    TeacherConfig odd = rotary;
    odd.rotary_base = 0.5;
    CHECK_THROWS_WITH_AS(Teacher::from_parts(odd, path), doctest::Contains("rotary_base > 1"), Error);

    CHECK_THROWS_WITH_AS(Teacher::load((scratch.path / "nowhere").string()), doctest::Contains("config.json"), Error);
  }

  TEST_CASE("the long teacher: rotary positions, no position table, its whole context of 8192 bytes in one pass") {
    const Teacher teacher = Teacher::load(teacher_dir("teacher-long"));
    const TeacherConfig& c = teacher.config();
    CHECK(c.positions == PositionScheme::rotary);
    CHECK(c.rotary_base == 100.0);
    CHECK(c.causal);
    REQUIRE(c.context == 8192);
    CHECK_THROWS_WITH_AS(teacher.forward(std::string(c.context + 1, 'a')),
                         doctest::Contains("more than the model's context of 8192"), Error);
    // data/heldout.txt is 8192 held-out bytes and the fixture's first
    // sequence is its first 160: a causal model's outputs on a prefix do not
    // depend on what follows, so the full-length pass must agree with PyTorch
    // there too.
    std::ifstream in(std::string(ENTGRAPH_SOURCE_DIR) + "/data/heldout.txt", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(text.size() == c.context);
    const Capture fixture = read_capture(teacher_dir("teacher-long") + "/fixture");
    REQUIRE(text.compare(0, fixture.lengths[0], fixture.texts[0]) == 0);
    const std::vector<float> logits = read_npy(teacher_dir("teacher-long") + "/fixture/logits.npy").values<float>();
    const TeacherOutput out = teacher.forward(text);
    REQUIRE(out.tokens == c.context);
    const std::size_t n0 = fixture.lengths[0];
    auto prefix = [n0](MatrixView<const float> m) { return MatrixView<const float>(m.data, n0, m.cols, m.stride); };
    double worst = 0.0;
    for (std::size_t l = 0; l < c.layers; ++l)
      for (std::size_t h = 0; h < c.heads; ++h) {
        worst = std::max(worst, max_diff(prefix(out.queries_of(l, h)), fixture.queries_of(l, h, 0)));
        worst = std::max(worst, max_diff(prefix(out.keys_of(l, h)), fixture.keys_of(l, h, 0)));
        worst = std::max(worst, max_diff(prefix(out.values_of(l, h)), fixture.values_of(l, h, 0)));
      }
    worst = std::max(worst, max_diff(prefix(out.logits_view()), {logits.data(), n0, c.outputs}));
    MESSAGE("teacher-long at 8192 bytes: max |first 160 rows - torch| = " << worst);
    CHECK(worst <= 1e-4);
    bool finite = true;
    for (float v : out.logits) finite = finite && std::isfinite(v);
    CHECK(finite);
  }

  TEST_CASE("rotary positions rotate q and k by t * base^(-2i/head_dim), with angles in double, up to position 8191") {
    // A one-layer model whose q, k and v projections are the same Linear:
    // v is then q and k before rotation, so every row of Q and K can be
    // checked against the formula applied to V, at every position. (Angles
    // computed in float would be off by about 5e-4 radians at t = 8000.)
    TeacherConfig c;
    c.name = "rotary-check";
    c.context = 8192;
    c.d_model = 8;
    c.heads = 2;
    c.layers = 1;
    c.d_mlp = 4;
    c.positions = PositionScheme::rotary;
    c.rotary_base = 100.0;
    const std::size_t d = c.d_model, hd = c.head_dim(), half = hd / 2;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    SafetensorsFile file;
    auto add = [&](const std::string& name, std::vector<std::size_t> shape, float scale, float offset = 0.0f) {
      std::size_t count = 1;
      for (std::size_t k : shape) count *= k;
      std::vector<float> v(count);
      for (float& x : v) x = offset + scale * normal(rng);
      file.tensors.push_back(make_f32_tensor(name, v.data(), shape));
      return v;
    };
    add("tok_emb.weight", {c.vocab, d}, 1.0f);
    add("layers.0.ln1.weight", {d}, 0.1f, 1.0f);
    add("layers.0.ln1.bias", {d}, 0.1f);
    const std::vector<float> w = add("layers.0.q.weight", {d, d}, 0.5f), b = add("layers.0.q.bias", {d}, 0.5f);
    for (const char* p : {"layers.0.k", "layers.0.v"}) {
      file.tensors.push_back(make_f32_tensor(std::string(p) + ".weight", w.data(), {d, d}));
      file.tensors.push_back(make_f32_tensor(std::string(p) + ".bias", b.data(), {d}));
    }
    for (const char* p : {"layers.0.ln2", "ln_f"}) {
      add(std::string(p) + ".weight", {d}, 0.1f, 1.0f);
      add(std::string(p) + ".bias", {d}, 0.1f);
    }
    add("layers.0.o.weight", {d, d}, 0.3f);
    add("layers.0.o.bias", {d}, 0.1f);
    add("layers.0.fc1.weight", {c.d_mlp, d}, 0.3f);
    add("layers.0.fc1.bias", {c.d_mlp}, 0.1f);
    add("layers.0.fc2.weight", {d, c.d_mlp}, 0.3f);
    add("layers.0.fc2.bias", {d}, 0.1f);
    add("head.weight", {c.outputs, d}, 0.3f);
    add("head.bias", {c.outputs}, 0.1f);
    ScratchDir scratch("rotary");
    const std::string path = (scratch.path / "w.safetensors").string();
    write_safetensors(path, file);
    const Teacher teacher = Teacher::from_parts(c, path);

    std::string text(c.context, ' ');
    for (char& ch : text) ch = static_cast<char>('a' + rng() % 26);
    const TeacherOutput out = teacher.forward(text);
    double worst = 0.0, moved = 0.0;
    for (std::size_t h = 0; h < c.heads; ++h) {
      const MatrixView<const float> q = out.queries_of(0, h), k = out.keys_of(0, h), v = out.values_of(0, h);
      for (std::size_t t = 0; t < c.context; ++t)
        for (std::size_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(t) * std::pow(100.0, -2.0 * static_cast<double>(i) / hd);
          const double cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
          const double a = v(t, i), bb = v(t, i + half);
          const double want_a = a * cs - bb * sn, want_b = a * sn + bb * cs;
          worst = std::max({worst, std::abs(q(t, i) - want_a), std::abs(q(t, i + half) - want_b),
                            std::abs(k(t, i) - want_a), std::abs(k(t, i + half) - want_b)});
          moved = std::max(moved, std::abs(q(t, i) - a));
        }
    }
    MESSAGE("rotary: max |Q, K - rotate(V)| over 8192 positions = " << worst);
    CHECK(worst <= 2e-6);
    CHECK(moved > 0.1);  // the rotation did something
  }

  TEST_CASE("Teacher::capture_to writes, one text at a time, the files write_capture writes for Teacher::capture") {
    const Teacher teacher = Teacher::load(teacher_dir("teacher-causal"));
    const std::vector<std::string> texts = {"In the beginning God created the heaven and the earth.", "x",
                                            std::string(teacher.config().context, 'z')};
    ScratchDir scratch("capture_to");
    for (NpyDtype dtype : {NpyDtype::float32, NpyDtype::float16}) {
      CAPTURE(npy_dtype_name(dtype));
      const std::string want = (scratch.path / "want").string(), got = (scratch.path / "got").string();
      write_capture(want, teacher.capture(texts), dtype);
      std::vector<std::size_t> done;
      teacher.capture_to(got, texts, dtype, [&](std::size_t i, std::size_t total) {
        CHECK(total == texts.size());
        done.push_back(i);
      });
      CHECK(done == std::vector<std::size_t>{1, 2, 3});
      for (const char* name : {"capture.json", "queries.npy", "keys.npy", "values.npy"}) {
        CAPTURE(name);
        std::ifstream a(want + "/" + name, std::ios::binary), b(got + "/" + name, std::ios::binary);
        const std::string bytes_a((std::istreambuf_iterator<char>(a)), {}), bytes_b((std::istreambuf_iterator<char>(b)), {});
        CHECK(bytes_a.size() > 100);
        CHECK(bytes_a == bytes_b);
      }
    }
    const std::string none = (scratch.path / "none").string();
    CHECK_THROWS_WITH_AS(teacher.capture_to(none, {}), doctest::Contains("Teacher::capture_to: texts is empty"), Error);
    CHECK_THROWS_WITH_AS(teacher.capture_to(none, {"ok", std::string(teacher.config().context + 1, 'a')}),
                         doctest::Contains("texts[1] has 257 bytes; each text must have 1 to 256"), Error);
    CHECK_FALSE(fs::exists(none));
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
