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
