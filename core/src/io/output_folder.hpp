// entgraph internal: OutputFolder and free_bytes_at are public
// (entgraph/io/files.hpp); the library's own code names them detail::.
#pragma once

#include "entgraph/io/files.hpp"

namespace entgraph::detail {

using entgraph::free_bytes_at;
using entgraph::OutputFolder;

}  // namespace entgraph::detail
