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
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace entgraph
