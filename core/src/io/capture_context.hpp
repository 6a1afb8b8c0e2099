// entgraph internal: head_context and in_head, which name the capture, layer
// and head in every error raised while working on one head of a capture, are
// public (entgraph/io/capture.hpp); the library's own code names them
// detail::.
#pragma once

#include "entgraph/io/capture.hpp"

namespace entgraph::detail {

using entgraph::head_context;
using entgraph::in_head;

}  // namespace entgraph::detail
