// entgraph::Error's codes (entgraph/error.hpp): one representative failure of
// each kind through the C++ API, and the same through the C API, whose status
// and eg_last_error_code follow the code (no message is read). The devices'
// codes (device_unavailable, unsupported): tests/runtime/test_devices.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/entgraph.h"
#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/model.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/transforms.hpp"
#include "io/io_test_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

std::string teacher_dir() { return std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-causal"; }

}  // namespace

TEST_SUITE("runtime") {

TEST_CASE("error codes: each kind of failure carries its code") {
  std::vector<float> z = {0.5f, 1.0f, -2.0f, 0.25f}, p(4);
  // bad_argument: shapes that disagree; bad_value: NaN in the scores.
  CHECK(error_code_of([&] { softmax<float>({z.data(), 1, 4}, {p.data(), 2, 2}); }) == ErrorCode::bad_argument);
  z[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(error_code_of([&] { softmax<float>({z.data(), 1, 4}, {p.data(), 1, 4}); }) == ErrorCode::bad_value);

  TempDir dir;
  // io: nothing to open; bad_file: a .npy cut short, a capture.json that is not JSON.
  CHECK(error_code_of([&] { read_npy(dir.file("missing.npy")); }) == ErrorCode::io);
  CHECK(error_code_of([&] { read_capture(dir.file("no-such-capture")); }) == ErrorCode::io);
  write_bytes(dir.file("short.npy"), Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1});
  CHECK(error_code_of([&] { read_npy(dir.file("short.npy")); }) == ErrorCode::bad_file);
  std::filesystem::create_directories(dir.file("capture"));
  write_text(dir.file("capture/capture.json"), "{ not json");
  CHECK(error_code_of([&] { read_capture(dir.file("capture")); }) == ErrorCode::bad_file);
  // A predictor file whose settings are wrong is the file's fault; the same
  // JSON handed over as text is the caller's argument.
  const std::string bad_predictor = R"({"format": "entgraph-predictor", "version": 1, "method": "window",
                                        "settings": {"window": "-3"}})";
  write_text(dir.file("predictor.json"), bad_predictor);
  CHECK(error_code_of([&] { read_predictor(dir.file("predictor.json")); }) == ErrorCode::bad_file);
  CHECK(error_code_of([&] { load_predictor(bad_predictor); }) == ErrorCode::bad_argument);
  // A teacher folder with a malformed config.json.
  std::filesystem::create_directories(dir.file("teacher"));
  write_text(dir.file("teacher/config.json"), R"({"format": "entgraph-teacher"})");
  CHECK(error_code_of([&] { Teacher::load(dir.file("teacher")); }) == ErrorCode::bad_file);

  // limit: a text longer than the teacher's context.
  const Teacher teacher = Teacher::load(teacher_dir());
  const std::string long_text(teacher.config().context + 1, 'a');
  CHECK(error_code_of([&] { teacher.forward(long_text); }) == ErrorCode::limit);

  // device_unavailable: this binary registers no CUDA backend.
  CHECK(error_code_of([&] { transform_forward(Device::cuda, Transform::softmax(), {z.data(), 1, 4}, {p.data(), 1, 4}); }) ==
        ErrorCode::device_unavailable);
}

TEST_CASE("error codes: names, and reading_file's rule") {
  CHECK(std::string(error_code_name(ErrorCode::bad_argument)) == "bad_argument");
  CHECK(std::string(error_code_name(ErrorCode::bad_value)) == "bad_value");
  CHECK(std::string(error_code_name(ErrorCode::bad_file)) == "bad_file");
  CHECK(std::string(error_code_name(ErrorCode::limit)) == "limit");
  CHECK(std::string(error_code_name(ErrorCode::io)) == "io");
  CHECK(std::string(error_code_name(ErrorCode::device_unavailable)) == "device_unavailable");
  CHECK(std::string(error_code_name(ErrorCode::unsupported)) == "unsupported");
  for (ErrorCode in : {ErrorCode::bad_argument, ErrorCode::bad_value, ErrorCode::bad_file, ErrorCode::limit,
                       ErrorCode::io, ErrorCode::device_unavailable, ErrorCode::unsupported}) {
    CAPTURE(error_code_name(in));
    const bool becomes_file = in == ErrorCode::bad_argument || in == ErrorCode::bad_value;
    try {
      reading_file([&] { throw Error("op: what", in); });
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == "op: what");
      CHECK(e.code() == (becomes_file ? ErrorCode::bad_file : in));
    }
  }
  CHECK(reading_file([] { return 7; }) == 7);
}

TEST_CASE("messages in parts: what() joins them, op and argument are data") {
  const Error e(at_op("split_text") + cpp_name("max_bytes") + " must be >= 1 (got " + std::to_string(0) + ")",
                ErrorCode::limit);
  CHECK(std::string(e.what()) == "split_text: max_bytes must be >= 1 (got 0)");
  CHECK(e.op() == "split_text");
  CHECK(e.argument() == "max_bytes");
  REQUIRE(e.message().parts().size() == 3);
  CHECK(e.message().parts()[0].role == MessagePart::Role::where);
  CHECK(e.message().parts()[2].text == " must be >= 1 (got 0)");  // adjacent text merges
  CHECK(std::string(message_role_name(e.message().parts()[1].role)) == "name");

  // A plain string is one text part: no op, no argument.
  const Error plain("no parts here: none");
  CHECK(plain.op().empty());
  CHECK(plain.argument().empty());
  CHECK(plain.message().parts().size() == 1);

  // Prefixes compare and come off part by part, whatever the text says.
  const Message prefix = at_op("read_npy") + "/tmp/x.npy: ";
  const Message full = prefix + "truncated (" + cpp_name("head_dim") + ")";
  CHECK(full.starts_with(prefix));
  CHECK_FALSE(full.starts_with(Message("read_npy: /tmp/x.npy: ")));  // the same text, but not a where part
  CHECK(full.without_prefix(prefix).text() == "truncated (head_dim)");
  CHECK(full.without_prefix(prefix).first(MessagePart::Role::name) == "head_dim");
  CHECK(full.without_prefix(Message("other")).text() == full.text());
  CHECK(full.replaced("/tmp/x.npy", "files").text() == "read_npy: files: truncated (head_dim)");
  CHECK(full.replaced("/tmp/x.npy", "files").parts().size() == full.parts().size());
}

TEST_CASE("messages in parts: restated errors keep their parts and code") {
  // reading_file turns the code, not the parts.
  try {
    reading_file([]() -> int { throw Error(at_op("f") + cpp_name("alpha") + " bad", ErrorCode::bad_value); });
    FAIL("reading_file did not rethrow");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::bad_file);
    CHECK(e.op() == "f");
    CHECK(e.argument() == "alpha");
  }
  // in_head (entgraph/io/capture.hpp) puts the head in front and keeps the code and parts.
  Capture c;
  c.layers = 2;
  c.heads = 3;
  try {
    in_head(c, 1, 2, []() -> int { throw Error(at_op("g") + cpp_name("q") + " has NaN", ErrorCode::bad_value); });
    FAIL("in_head did not rethrow");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == head_context(c, 1, 2) + ": g: q has NaN");
    CHECK(e.code() == ErrorCode::bad_value);
    CHECK(e.op() == "g");
    CHECK(e.argument() == "q");
  }
}

TEST_CASE("messages in parts: the library's checks name their op and argument") {
  std::vector<float> z = {0.5f, 1.0f}, p(2);
  AttentionOptions<float> o;
  o.scale = std::numeric_limits<double>::infinity();
  std::vector<float> q(2, 1.0f), k(2, 1.0f), v(2, 1.0f), out(2);
  try {
    attention_forward({q.data(), 1, 2, 2}, {k.data(), 1, 2, 2}, {v.data(), 1, 2, 2}, {out.data(), 1, 2, 2}, o);
    FAIL("an infinite scale was accepted");
  } catch (const Error& e) {
    CHECK(e.op() == "attention_forward");
    CHECK(e.argument() == "options.scale");
  }
  try {
    split_text("abc", 0);
    FAIL("max_bytes 0 was accepted");
  } catch (const Error& e) {
    CHECK(e.op() == "split_text");
    CHECK(e.argument() == "max_bytes");
  }
  eg_transform t{EG_TRANSFORM_SOFTMAX, 1.0, 0};
  CHECK(eg_transform_forward(EG_DEVICE_CPU, &t, {z.data(), 1, 2, 2}, {p.data(), 1, 2, 2}, nullptr) == EG_OK);
  CHECK(eg_transform_forward(EG_DEVICE_CPU, nullptr, {z.data(), 1, 2, 2}, {p.data(), 1, 2, 2}, nullptr) ==
        EG_ERROR_ARGUMENT);
  CHECK(std::string(eg_last_error_argument()) == "transform");
}

TEST_CASE("error codes: the C API's status and eg_last_error_code follow the code") {
  std::vector<float> z = {0.5f, std::numeric_limits<float>::quiet_NaN()}, p(2);
  eg_transform t{EG_TRANSFORM_SOFTMAX, 1.0, 0};
  CHECK(eg_transform_forward(EG_DEVICE_CPU, &t, {z.data(), 1, 2, 2}, {p.data(), 1, 2, 2}, nullptr) ==
        EG_ERROR_ARGUMENT);
  CHECK(eg_last_error_code() == EG_CODE_BAD_VALUE);
  CHECK(eg_transform_forward(EG_DEVICE_CPU, nullptr, {z.data(), 1, 2, 2}, {p.data(), 1, 2, 2}, nullptr) ==
        EG_ERROR_ARGUMENT);
  CHECK(eg_last_error_code() == EG_CODE_BAD_ARGUMENT);
  CHECK(eg_transform_forward(EG_DEVICE_CUDA, &t, {z.data(), 1, 2, 2}, {p.data(), 1, 2, 2}, nullptr) ==
        EG_ERROR_DEVICE);
  CHECK(eg_last_error_code() == EG_CODE_DEVICE_UNAVAILABLE);

  TempDir dir;
  eg_capture* capture = nullptr;
  CHECK(eg_capture_load(dir.file("missing").c_str(), &capture) == EG_ERROR_IO);
  CHECK(eg_last_error_code() == EG_CODE_IO);
  std::filesystem::create_directories(dir.file("capture"));
  write_text(dir.file("capture/capture.json"), "[]");
  CHECK(eg_capture_load(dir.file("capture").c_str(), &capture) == EG_ERROR_IO);
  CHECK(eg_last_error_code() == EG_CODE_BAD_FILE);
  CHECK(capture == nullptr);
  // The C layer's own check of a NULL pointer, in a call that reads files.
  CHECK(eg_capture_load(nullptr, &capture) == EG_ERROR_ARGUMENT);
  CHECK(eg_last_error_code() == EG_CODE_BAD_ARGUMENT);

  eg_teacher* teacher = nullptr;
  REQUIRE(eg_teacher_load(teacher_dir().c_str(), &teacher) == EG_OK);
  const std::string long_text(300, 'a');  // teacher-causal's context is 256
  eg_teacher_output* output = nullptr;
  CHECK(eg_teacher_forward(EG_DEVICE_CPU, teacher, long_text.data(), long_text.size(), 0, &output) ==
        EG_ERROR_ARGUMENT);
  CHECK(eg_last_error_code() == EG_CODE_LIMIT);
  eg_teacher_free(teacher);
}

}  // TEST_SUITE
