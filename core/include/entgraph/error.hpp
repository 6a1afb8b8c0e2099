// entgraph: the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace entgraph {

// Thrown for every misuse of the public API: wrong shapes, NaN or +inf in
// scores, out-of-range hyperparameters, malformed files. The message follows
// "<op>: <what> (got X, expected Y)" and names the offending argument.
// Kernels never throw; validation happens once per call, before any output is
// written, so a call that throws leaves its output buffers untouched.
//
// Its code says what kind of failure it is, for programs (and the C API) that
// act on it without reading the message. Every Error is a bad argument
// unless it says otherwise.
enum class ErrorCode {
  bad_argument,        // the call's arguments: shapes, ranges, values, settings, files
  device_unavailable,  // the device cannot run anything here (no backend, no usable GPU)
  unsupported,         // the device has no kernel for this op or method: run it on cpu
};

class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message, ErrorCode code = ErrorCode::bad_argument)
      : std::invalid_argument(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace entgraph
