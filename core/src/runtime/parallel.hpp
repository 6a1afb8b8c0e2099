// entgraph internal: the library's own thread pool.
#pragma once

#include <cstddef>
#include <functional>

namespace entgraph::detail {

// Calls fn(begin, end) on disjoint chunks covering [0, count), each of at
// least `grain` items (the last may be shorter), on up to num_threads()
// threads, and returns when all are done. The split into chunks depends on the
// thread count, so fn must make each item's result independent of which chunk
// holds it. Called from inside a pool task, it runs serially. If fn throws, the
// first exception is rethrown here after every chunk has finished.
void parallel_for(std::size_t count, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);

// A grain that gives each task about `work_per_task` elements of `cost` each.
inline std::size_t grain_for(std::size_t cost_per_item, std::size_t work_per_task = 1 << 15) {
  return cost_per_item == 0 ? 1 : (work_per_task + cost_per_item - 1) / cost_per_item;
}

}  // namespace entgraph::detail
