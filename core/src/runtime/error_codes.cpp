// The names of entgraph::ErrorCode, as the C API and JavaScript give them.
#include "entgraph/error.hpp"

namespace entgraph {

const char* error_code_name(ErrorCode code) {
  // No default: -Wswitch names a code added without its name.
  switch (code) {
    case ErrorCode::bad_argument: return "bad_argument";
    case ErrorCode::bad_value: return "bad_value";
    case ErrorCode::bad_file: return "bad_file";
    case ErrorCode::limit: return "limit";
    case ErrorCode::io: return "io";
    case ErrorCode::device_unavailable: return "device_unavailable";
    case ErrorCode::unsupported: return "unsupported";
  }
  return "unknown";
}

}  // namespace entgraph
