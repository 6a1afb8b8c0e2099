// entgraph internal: how the C API (entgraph/entgraph.h) turns C++
// exceptions into status codes and the thread-local last-error message.
//
// Every eg_* function that can fail is
//   return guard(__func__, [&](const char* fn) { ... });
// the body calls the C++ API and may throw anything; guard catches it all.
// The body gets the C function's name as fn for its messages (__func__
// inside a lambda would name the lambda's operator()).
#pragma once

#include <string>

#include "entgraph/entgraph.h"
#include "entgraph/error.hpp"

namespace entgraph::c_api {

// The status of an entgraph::Error is its code's (status_of); the C layer's
// own checks (NULL pointers, enum values out of range) throw plain Errors,
// bad arguments.
eg_status status_of(ErrorCode code) noexcept;

// Records the exception being handled as this thread's last error and
// returns its status. Call only inside a catch block. Never throws.
eg_status fail_current_exception(const char* function) noexcept;

template <class Body>
eg_status guard(const char* function, Body&& body) noexcept {
  try {
    body(function);
    return EG_OK;
  } catch (...) {
    return fail_current_exception(function);
  }
}

// Error "<function>: <name> is NULL" if pointer is null.
inline void require(const char* function, const void* pointer, const char* name) {
  if (pointer == nullptr) throw Error(at_op(function) + cpp_name(name) + " is NULL");
}

}  // namespace entgraph::c_api
