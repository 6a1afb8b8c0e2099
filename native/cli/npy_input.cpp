#include "npy_input.hpp"

#include "entgraph/error.hpp"

namespace entgraph::cli {

NpyArray read_score_matrix(const std::string& command, const std::string& path) {
  NpyArray a = read_npy(path);
  const std::string where = command + ": " + path + ": ";
  if (a.dtype != NpyDtype::float32 && a.dtype != NpyDtype::float64)
    throw Error(where + "unsupported dtype " + npy_dtype_name(a.dtype) + " (expected float32 or float64)");
  if (a.ndim() != 2) throw Error(where + "expected a 2-D array (got shape " + npy_shape_string(a.shape) + ")");
  if (a.shape[1] == 0) throw Error(where + "the array has no columns (got shape " + npy_shape_string(a.shape) + ")");
  return a;
}

}  // namespace entgraph::cli
