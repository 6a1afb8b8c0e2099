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
// Its code says what kind of failure it is, for programs (the C API, the
// JavaScript package) that act on it without reading the message. Every
// Error is a bad argument unless it says otherwise.
enum class ErrorCode {
  bad_argument,        // the call's arguments: shapes, ranges, settings, names
  bad_value,           // a value in the call's data: NaN or infinity in scores, q, k, v, spans
  bad_file,            // a file's contents: malformed, truncated, inconsistent, NaN inside
  limit,               // a size over a limit of the library or the caller (max_bytes, 2^32 keys, a file too large)
  io,                  // the system refused: a file that cannot be opened, read, written, renamed
  device_unavailable,  // the device cannot run anything here (no backend, no usable GPU)
  unsupported,         // the device has no kernel for this op or method: run it on cpu
};

// "bad_argument", "bad_value", ...: the code as the C API and JavaScript name it.
const char* error_code_name(ErrorCode code);

class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message, ErrorCode code = ErrorCode::bad_argument)
      : std::invalid_argument(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Runs body() for a reader of a file: an Error it throws as a bad argument or
// a bad value is the file's fault, and leaves as ErrorCode::bad_file (the
// same message); other codes (io, limit, device) pass unchanged.
template <class Body>
decltype(auto) reading_file(Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::bad_argument && e.code() != ErrorCode::bad_value) throw;
    throw Error(e.what(), ErrorCode::bad_file);
  }
}

}  // namespace entgraph
