// entgraph internal: how the C API (entgraph/entgraph.h) turns C++
// exceptions into status codes and the thread-local last-error message.
//
// Every eg_* function that can fail is
//   return guard(__func__, Failure::argument, [&](const char* fn) { ... });
// the body calls the C++ API and may throw anything; guard catches it all.
// The body gets the C function's name as fn for its messages (__func__
// inside a lambda would name the lambda's operator()).
#pragma once

#include <string>

#include "entgraph/entgraph.h"
#include "entgraph/error.hpp"

namespace entgraph::c_api {

// Thrown by the C layer's own checks (NULL pointers, enum values out of
// range): always EG_ERROR_ARGUMENT, even in a call that reads files.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// What an entgraph::Error from the C++ API means in a call: misuse of its
// arguments, or (calls that read files) a file that is missing, unreadable
// or malformed. Either way an Error whose code is about a device
// (ErrorCode::device_unavailable or unsupported) is EG_ERROR_DEVICE.
enum class Failure { argument, io };

// Records the exception being handled as this thread's last error and
// returns its status. Call only inside a catch block. Never throws.
eg_status fail_current_exception(const char* function, Failure failure) noexcept;

template <class Body>
eg_status guard(const char* function, Failure failure, Body&& body) noexcept {
  try {
    body(function);
    return EG_OK;
  } catch (...) {
    return fail_current_exception(function, failure);
  }
}

// ArgumentError "<function>: <name> is NULL" if pointer is null.
inline void require(const char* function, const void* pointer, const char* name) {
  if (pointer == nullptr) throw ArgumentError(std::string(function) + ": " + name + " is NULL");
}

}  // namespace entgraph::c_api
