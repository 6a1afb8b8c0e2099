// entgraph CLI: reading the .npy inputs of the subcommands.
#pragma once

#include <string>

#include "entgraph/io/npy.hpp"

namespace entgraph::cli {

// Reads path as a 2-D float32 or float64 array with at least one column.
// Throws entgraph::Error "<command>: <path>: ..." naming the dtype or shape
// it got otherwise (and read_npy's own errors for unreadable files).
NpyArray read_score_matrix(const std::string& command, const std::string& path);

}  // namespace entgraph::cli
