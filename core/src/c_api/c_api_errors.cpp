// The C API's status machinery, and its calls that belong to no object:
// version, status names, devices, strings.
#include "c_api/c_api_errors.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "c_api/c_api_types.hpp"
#include "entgraph/device.hpp"
#include "runtime/backends.hpp"

#ifndef ENTGRAPH_VERSION
#error "ENTGRAPH_VERSION must be defined (core/src/c_api/c_api.cmake sets it)"
#endif

namespace entgraph::c_api {
namespace {

// The message and code of the last failing call on this thread. fallback
// stands in for the message when it could not be stored (out of memory).
thread_local std::string last_error;
thread_local const char* last_error_fallback = nullptr;
thread_local eg_error_code last_code = EG_CODE_NONE;
thread_local std::string last_argument;

// The message is a + b + c, built here so that running out of memory while
// building it cannot escape.
void set_last_error(eg_error_code code, const char* a, const char* b = "", const char* c = "",
                    const char* argument = "") noexcept {
  last_code = code;
  try {
    last_argument.clear();
    last_error.assign(a).append(b).append(c);
    last_argument.assign(argument);
    last_error_fallback = nullptr;
  } catch (...) {
    last_error_fallback = "entgraph: out of memory while recording an error message";
  }
}

// The C enum's value of a code (the C ABI must not depend on ErrorCode's order).
eg_error_code c_code(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::bad_argument: return EG_CODE_BAD_ARGUMENT;
    case ErrorCode::bad_value: return EG_CODE_BAD_VALUE;
    case ErrorCode::bad_file: return EG_CODE_BAD_FILE;
    case ErrorCode::limit: return EG_CODE_LIMIT;
    case ErrorCode::io: return EG_CODE_IO;
    case ErrorCode::device_unavailable: return EG_CODE_DEVICE_UNAVAILABLE;
    case ErrorCode::unsupported: return EG_CODE_UNSUPPORTED;
  }
  return EG_CODE_INTERNAL;
}

}  // namespace

eg_status status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::bad_argument:
    case ErrorCode::bad_value:
    case ErrorCode::limit: return EG_ERROR_ARGUMENT;
    case ErrorCode::bad_file:
    case ErrorCode::io: return EG_ERROR_IO;
    case ErrorCode::device_unavailable:
    case ErrorCode::unsupported: return EG_ERROR_DEVICE;
  }
  return EG_ERROR_INTERNAL;
}

eg_status fail_current_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    std::string argument;
    try {
      argument = e.argument();
    } catch (...) {  // out of memory: the message matters more
    }
    set_last_error(c_code(e.code()), e.what(), "", "", argument.c_str());
    return status_of(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error(EG_CODE_OUT_OF_MEMORY, function, ": out of memory");
    return EG_ERROR_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(EG_CODE_INTERNAL, function, ": internal error: ", e.what());
    return EG_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(EG_CODE_INTERNAL, function, ": internal error: unknown exception");
    return EG_ERROR_INTERNAL;
  }
}

void throw_bad_enum(const char* function, const char* name, int value, const char* expected) {
  throw Error(at_op(function) + cpp_name(name) + " is out of range (got " + std::to_string(value) +
              ", expected " + expected + ")");
}

Device to_device(const char* function, const eg_device& device) {
  const int value = enum_value(device);
  switch (value) {
    case EG_DEVICE_CPU: return Device::cpu;
    case EG_DEVICE_CUDA: return Device::cuda;
  }
  throw_bad_enum(function, "device", value, "EG_DEVICE_CPU or EG_DEVICE_CUDA");
}

void require_cpu(const char* function, const eg_device& device) {
  const Device d = to_device(function, device);
  if (d == Device::cpu) return;
  // The C++ API's own words: "not available" first, then "no kernel".
  detail::backend_for(d, function);
  detail::throw_no_kernel(d, function);
}

}  // namespace entgraph::c_api

extern "C" {

const char* eg_status_name(eg_status status) {
  switch (entgraph::c_api::enum_value(status)) {
    case EG_OK: return "EG_OK";
    case EG_ERROR_ARGUMENT: return "EG_ERROR_ARGUMENT";
    case EG_ERROR_DEVICE: return "EG_ERROR_DEVICE";
    case EG_ERROR_IO: return "EG_ERROR_IO";
    case EG_ERROR_MEMORY: return "EG_ERROR_MEMORY";
    case EG_ERROR_INTERNAL: return "EG_ERROR_INTERNAL";
  }
  return "EG_STATUS_UNKNOWN";
}

const char* eg_last_error(void) {
  using namespace entgraph::c_api;
  return last_error_fallback != nullptr ? last_error_fallback : last_error.c_str();
}

eg_error_code eg_last_error_code(void) { return entgraph::c_api::last_code; }

const char* eg_last_error_argument(void) { return entgraph::c_api::last_argument.c_str(); }


const char* eg_version(void) { return ENTGRAPH_VERSION; }

void eg_string_free(char* string) { std::free(string); }

eg_status eg_set_device_stream(eg_device device, void* stream) {
  return entgraph::c_api::guard(__func__, [&](const char* fn) {
    entgraph::set_device_stream(entgraph::c_api::to_device(fn, device), stream);
  });
}

int eg_device_available(eg_device device, char* why, size_t why_size) {
  // Never fails: an unknown device is "not available", with the reason.
  std::string reason;
  bool available = false;
  try {
    available = entgraph::device_available(entgraph::c_api::to_device("eg_device_available", device), &reason);
  } catch (const std::exception& e) {
    try {
      reason = e.what();
    } catch (...) {
      reason.clear();
    }
  } catch (...) {
    reason.clear();
  }
  if (why != nullptr && why_size > 0) {
    const std::size_t n = available ? 0 : std::min(reason.size(), why_size - 1);
    std::memcpy(why, reason.data(), n);
    why[n] = '\0';
  }
  return available ? 1 : 0;
}

}  // extern "C"
