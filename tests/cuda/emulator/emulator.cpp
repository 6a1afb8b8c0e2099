// The CUDA emulator (include/entgraph_emulator/threads.hpp): fibers on one
// host thread for the threads of a block, warp collectives and barriers that
// complete when every live thread reaches them, the sm_80 instructions of
// mma_ptx.cuh, and the runtime API over host memory.
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "entgraph_emulator/instructions.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ENTGRAPH_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENTGRAPH_EMULATOR_ASAN 1
#endif
#endif
#if defined(ENTGRAPH_EMULATOR_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define ENTGRAPH_EMULATOR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ENTGRAPH_EMULATOR_TSAN 1
#endif
#endif
#if defined(ENTGRAPH_EMULATOR_TSAN)
#include <sanitizer/tsan_interface.h>
// ThreadSanitizer's dynamic annotations (its runtime defines them).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace entgraph_emulator {
namespace {

constexpr int kWarpSize = 32;
constexpr std::size_t kStackBytes = std::size_t{1} << 20;
constexpr std::size_t kDefaultSharedBytes = 48 * 1024;       // without the kernel's attribute
constexpr std::size_t kMaxSharedBytes = 227 * 1024;          // sm_90's opt-in limit per block
constexpr std::size_t kDeviceBytes = std::size_t{16} << 30;  // the emulated device's memory
constexpr unsigned long long kMaxPauses = 1ull << 22;        // a spin-wait that never ends

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class State { ready, waiting, done };

// A fiber's saved registers. On x86-64 a switch saves the callee-saved
// registers on the old stack and swaps stack pointers (a few nanoseconds);
// elsewhere it is ucontext's swapcontext, which also saves the signal mask
// with a system call and made the suite several times slower.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
}  // namespace
}  // namespace entgraph_emulator
extern "C" void entgraph_emulator_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl entgraph_emulator_switch
  .type entgraph_emulator_switch, @function
entgraph_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size entgraph_emulator_switch, .-entgraph_emulator_switch
)");
namespace entgraph_emulator {
namespace {
void switch_context(Context& save, Context& load) { entgraph_emulator_switch(&save.sp, load.sp); }
// A stack whose first switch "returns" into entry with the stack aligned as
// after a call: six zero registers, entry's address, a null return address.
void start_context(Context& c, void* stack, std::size_t bytes, void (*entry)()) {
  auto top = (reinterpret_cast<std::uintptr_t>(stack) + bytes) & ~std::uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top) - 8;
  for (int i = 0; i < 6; ++i) slots[i] = nullptr;
  slots[6] = reinterpret_cast<void*>(entry);
  slots[7] = nullptr;
  c.sp = slots;
}
#else
struct Context {
  ucontext_t uc;
};
void switch_context(Context& save, Context& load) { swapcontext(&save.uc, &load.uc); }
void start_context(Context& c, void* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct PendingCopy {
  void* dst;
  unsigned char bytes[16];
};

struct Fiber {
  Context context{};
  void* stack = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's, while switched out
  void* tsan_fiber = nullptr;  // ThreadSanitizer's thread state for this fiber
  State state = State::ready;
  ThreadIds ids;
  int warp = 0, lane = 0;
  const char* waiting_at = "";
  std::vector<PendingCopy> copies;
};

struct Warp {
  int live = 0;
  int arrived = 0;
  unsigned generation = 0;
  const char* what = nullptr;
  Collective compute = nullptr;
  Record in[2][kWarpSize];
  Record out[2][kWarpSize];
};

struct Block {
  std::vector<Warp> warps;
  int live = 0;
  int arrived = 0;
  unsigned generation = 0;
  const char* what = nullptr;
  int count = 0;
  int result[2] = {0, 0};
  unsigned long long pauses = 0;
  std::string error;
};

// The launch in progress.
std::vector<Fiber> g_fibers;
std::size_t g_threads = 0;
Fiber* g_current = nullptr;
Block g_block;
const std::function<void()>* g_body = nullptr;
unsigned char* g_shared = nullptr;
Context g_scheduler;
#if defined(ENTGRAPH_EMULATOR_ASAN)
const void* g_scheduler_stack = nullptr;
std::size_t g_scheduler_stack_bytes = 0;
void* g_scheduler_fake_stack = nullptr;
#endif

// The runtime's state.
cudaError_t g_last_error = cudaSuccess;
// The last failure's own words, kept after cudaGetLastError clears it so
// that cudaGetErrorString(code) can still say them.
cudaError_t g_message_code = cudaSuccess;
std::string g_last_message;
std::map<const unsigned char*, std::size_t> g_allocations;
std::map<const void*, std::size_t> g_max_shared;

// The block's ready fibers, in the order they became ready (each at most
// once: a fiber is queued when it becomes ready and leaves when it runs).
std::vector<int> g_ready_ring;
std::size_t g_ready_head = 0, g_ready_count = 0;

void make_ready(std::size_t t) {
  g_fibers[t].state = State::ready;
  g_ready_ring[(g_ready_head + g_ready_count++) % g_threads] = static_cast<int>(t);
}
// After a barrier or collective completes: every waiting thread of [first, last) was at it.
void wake(std::size_t first, std::size_t last) {
  for (std::size_t t = first; t < last; ++t)
    if (g_fibers[t].state == State::waiting) make_ready(t);
}
// The same instruction: mostly the same literal, so the pointers match.
bool same(const char* a, const char* b) { return a == b || std::strcmp(a, b) == 0; }

void set_error(cudaError_t error, std::string message) {
  if (g_last_error != cudaSuccess) return;  // the first failure is the one reported
  g_last_error = error;
  g_message_code = error;
  g_last_message = std::move(message);
}

std::string block_name(const ThreadIds& ids) {
  return "block (" + std::to_string(ids.block.x) + ", " + std::to_string(ids.block.y) + ", " +
         std::to_string(ids.block.z) + ")";
}

std::string where(const Fiber& f) {
  return block_name(f.ids) + ", thread " + std::to_string(f.ids.thread.x) + " (warp " + std::to_string(f.warp) +
         ", lane " + std::to_string(f.lane) + ")";
}

// ---- ThreadSanitizer: racecheck. Each emulated thread is a fiber of its
// own, switched to without synchronisation; the happens-before edges are the
// GPU's: a barrier or warp collective (every participant releases on
// arrival and acquires on leaving), a block's start (after the host's
// launch) and its end (before the host's next call), and the atomics (the
// compiler's, which ThreadSanitizer sees). Two threads of a block that touch
// the same shared or global memory without one of those between them, one
// of them writing, are reported as a data race. The emulator's own
// bookkeeping (which fibers wait where, the collectives' records) is hidden
// from it. ----
#if defined(ENTGRAPH_EMULATOR_TSAN)
struct Hidden {  // the emulator's bookkeeping, in this scope, is not the kernel's
  Hidden() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~Hidden() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
  Hidden(const Hidden&) = delete;
  Hidden& operator=(const Hidden&) = delete;
};
void release(const void* sync) { __tsan_release(const_cast<void*>(sync)); }
void acquire(const void* sync) { __tsan_acquire(const_cast<void*>(sync)); }
void tsan_switch(void* fiber) { __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync); }
void* g_tsan_scheduler = nullptr;
#else
struct Hidden {
  Hidden() {}  // not = default: an unused local of it would warn
};
void release(const void*) {}
void acquire(const void*) {}
#endif
// What a block's start and end synchronise on.
const char g_block_start = 0, g_block_end = 0;

// ---- Fiber switches (annotated for AddressSanitizer, which must know whose
// stack is live, and for ThreadSanitizer, which keeps a state per fiber) ----
void to_fiber(Fiber& f) {
  g_current = &f;
#if defined(ENTGRAPH_EMULATOR_TSAN)
  tsan_switch(f.tsan_fiber);
#endif
#if defined(ENTGRAPH_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(&g_scheduler_fake_stack, f.stack, kStackBytes);
#endif
  switch_context(g_scheduler, f.context);
#if defined(ENTGRAPH_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(g_scheduler_fake_stack, nullptr, nullptr);
#endif
}

void arrived_in_fiber() {
#if defined(ENTGRAPH_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(g_current->fake_stack, &g_scheduler_stack, &g_scheduler_stack_bytes);
#endif
}

void to_scheduler(bool for_good) {
  Fiber& f = *g_current;
#if defined(ENTGRAPH_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(for_good ? nullptr : &f.fake_stack, g_scheduler_stack, g_scheduler_stack_bytes);
#else
  (void)for_good;
#endif
#if defined(ENTGRAPH_EMULATOR_TSAN)
  tsan_switch(g_tsan_scheduler);
#endif
  switch_context(f.context, g_scheduler);
  arrived_in_fiber();
}

// The block barrier completes: every live thread is at it (or has exited).
void complete_block_barrier() {
  g_block.result[g_block.generation & 1] = g_block.count;
  g_block.arrived = 0;
  ++g_block.generation;
  wake(0, g_threads);
}

void wait_here(const char* what) {
  g_current->state = State::waiting;
  g_current->waiting_at = what;
  to_scheduler(false);
}

void land(Fiber& f) {
  for (const PendingCopy& c : f.copies) std::memcpy(c.dst, c.bytes, sizeof c.bytes);
  f.copies.clear();
}

void thread_exits(Fiber& f) {
  land(f);
  release(&g_block_end);
  Hidden hidden;
  f.state = State::done;
  Warp& w = g_block.warps[f.warp];
  --w.live;
  --g_block.live;
  if (w.arrived > 0 && g_block.error.empty())
    g_block.error = where(f) + " exited while its warp waits at " + w.what + " (a warp collective needs every lane)";
  if (g_block.arrived > 0 && g_block.arrived == g_block.live) complete_block_barrier();  // exited threads leave it
}

void trampoline() {
  arrived_in_fiber();
  Fiber& f = *g_current;
  acquire(&g_block_start);
  try {
    (*g_body)();
  } catch (const std::exception& e) {
    if (g_block.error.empty()) g_block.error = where(f) + ": " + e.what();
  } catch (...) {
    if (g_block.error.empty()) g_block.error = where(f) + ": an exception of unknown type";
  }
  thread_exits(f);
  to_scheduler(true);
  std::abort();  // never resumed
}

// A failed block's threads never resume: for ThreadSanitizer each releases
// the block's end now, as if it had exited (else what it read of the host's
// stack would race with the host's next use of it).
void abandon_block() {
#if defined(ENTGRAPH_EMULATOR_TSAN)
  for (std::size_t t = 0; t < g_threads; ++t) {
    if (g_fibers[t].state == State::done) continue;
    tsan_switch(g_fibers[t].tsan_fiber);  // only ThreadSanitizer's notion of who runs
    release(&g_block_end);
    tsan_switch(g_tsan_scheduler);
  }
#endif
}

void* new_stack() {
  void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

// "threads 0-31 at mma.sync; 32-127 at __syncthreads"
std::string deadlock_summary() {
  std::string out;
  std::size_t t = 0;
  while (t < g_threads) {
    if (g_fibers[t].state != State::waiting) {
      ++t;
      continue;
    }
    std::size_t u = t;
    while (u + 1 < g_threads && g_fibers[u + 1].state == State::waiting &&
           same(g_fibers[u + 1].waiting_at, g_fibers[t].waiting_at))
      ++u;
    if (!out.empty()) out += "; ";
    out += "threads " + std::to_string(t) + "-" + std::to_string(u) + " wait at " + g_fibers[t].waiting_at;
    t = u + 1;
  }
  return out;
}

void run_block(const ThreadIds& block_ids) {
  g_block.warps.assign((g_threads + kWarpSize - 1) / kWarpSize, Warp{});
  g_block.live = static_cast<int>(g_threads);
  g_block.arrived = 0;
  g_block.pauses = 0;
  g_block.error.clear();
  const dim3 bd = block_ids.block_dim;
  for (std::size_t t = 0; t < g_threads; ++t) {
    Fiber& f = g_fibers[t];
    f.ids = block_ids;
    f.ids.thread = dim3(static_cast<unsigned>(t % bd.x), static_cast<unsigned>(t / bd.x % bd.y),
                        static_cast<unsigned>(t / (bd.x * bd.y)));
    f.warp = static_cast<int>(t / kWarpSize);
    f.lane = static_cast<int>(t % kWarpSize);
    f.waiting_at = "";
    f.copies.clear();
    ++g_block.warps[f.warp].live;
    start_context(f.context, f.stack, kStackBytes, trampoline);
  }
  g_ready_ring.resize(g_threads);
  g_ready_head = g_ready_count = 0;
  for (std::size_t t = 0; t < g_threads; ++t) make_ready(t);
  while (g_ready_count > 0) {
    const int t = g_ready_ring[g_ready_head];
    g_ready_head = (g_ready_head + 1) % g_threads;
    --g_ready_count;
    to_fiber(g_fibers[static_cast<std::size_t>(t)]);
    if (!g_block.error.empty()) return;
  }
  if (g_block.live > 0) g_block.error = block_name(block_ids) + ": deadlock: " + deadlock_summary();
}

}  // namespace

const ThreadIds& ids() { return g_current->ids; }

void* dynamic_shared_memory() { return g_shared; }

Record warp_collective(const char* what, const Record& mine, Collective compute) {
  Hidden hidden;
  Fiber& f = *g_current;
  Warp& w = g_block.warps[f.warp];
  if (w.live != kWarpSize)
    throw Failure(std::string(what) + " with a full mask in a warp of " + std::to_string(w.live) +
                  " live lanes (the others exited or the block has none there)");
  if (w.arrived == 0) {
    w.what = what;
    w.compute = compute;
  } else if (!same(w.what, what)) {
    throw Failure(std::string("divergent warp: this lane reached ") + what + " while others wait at " + w.what);
  }
  const int parity = static_cast<int>(w.generation & 1);
  w.in[parity][f.lane] = mine;
  release(&w);
  if (++w.arrived == w.live) {
    acquire(&w);
    w.compute(w.in[parity], w.out[parity]);  // ldmatrix reads shared memory here, for the whole warp
    release(&w);
    w.arrived = 0;
    ++w.generation;
    wake(static_cast<std::size_t>(f.warp) * kWarpSize,
         std::min(g_threads, static_cast<std::size_t>(f.warp + 1) * kWarpSize));
  } else {
    wait_here(what);
    acquire(&w);
  }
  return w.out[parity][f.lane];
}

int block_barrier(const char* what, int predicate) {
  Hidden hidden;
  release(&g_block);
  if (g_block.arrived == 0) {
    g_block.what = what;
    g_block.count = 0;
  } else if (!same(g_block.what, what)) {
    throw Failure(std::string("divergent block: this thread reached ") + what + " while others wait at " +
                  g_block.what);
  }
  const int parity = static_cast<int>(g_block.generation & 1);
  g_block.count += predicate != 0;
  if (++g_block.arrived == g_block.live)
    complete_block_barrier();
  else
    wait_here(what);
  acquire(&g_block);
  return g_block.result[parity];
}

void pause() {
  Hidden hidden;
  if (++g_block.pauses > kMaxPauses)
    throw Failure("a spin-wait never ended (the emulator runs one block at a time: a block cannot wait for another)");
  make_ready(static_cast<std::size_t>(g_current - g_fibers.data()));  // the others run first
  to_scheduler(false);
}

void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body) {
  const std::size_t threads = static_cast<std::size_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration, "invalid configuration argument (grid " + std::to_string(grid.x) + " x " +
                                                 std::to_string(grid.y) + " x " + std::to_string(grid.z) +
                                                 ", block of " + std::to_string(threads) + " threads)");
    return;
  }
  const auto limit = g_max_shared.find(kernel);
  const std::size_t allowed = limit == g_max_shared.end() ? kDefaultSharedBytes : limit->second;
  if (shared_bytes > std::max(allowed, kDefaultSharedBytes)) {
    set_error(cudaErrorInvalidValue, "invalid argument (" + std::to_string(shared_bytes) +
                                         " bytes of dynamic shared memory; the kernel allows " +
                                         std::to_string(allowed) + ")");
    return;
  }
  Hidden hidden;  // the host side of the launch
#if defined(ENTGRAPH_EMULATOR_TSAN)
  g_tsan_scheduler = __tsan_get_current_fiber();
#endif
  while (g_fibers.size() < threads) {
    g_fibers.emplace_back();
    g_fibers.back().stack = new_stack();
#if defined(ENTGRAPH_EMULATOR_TSAN)
    g_fibers.back().tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  g_threads = threads;
  g_body = &body;
  // Shared memory starts as garbage (all ones: NaN as floats), so that a
  // kernel that reads what it never wrote shows it.
  // One exact-size heap block, so that AddressSanitizer sees an overflow.
  const std::unique_ptr<unsigned char[]> shared(new unsigned char[std::max<std::size_t>(shared_bytes, 1)]);
  g_shared = shared.get();
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(shared.get(), 0xff, shared_bytes);
        release(&g_block_start);
        run_block(ThreadIds{dim3(), dim3(x, y, z), block, grid});
        if (!g_block.error.empty()) abandon_block();
        acquire(&g_block_end);
        if (!g_block.error.empty()) {
          set_error(cudaErrorLaunchFailure, "unspecified launch failure (emulator: " + g_block.error + ")");
          return;
        }
      }
}

// ---- Instructions ----
namespace {

// float16 by table (the software conversion was a tenth of the run time).
const std::vector<float>& float16_values() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::size_t b = 0; b < t.size(); ++b) t[b] = __half2float(__ushort_as_half(static_cast<std::uint16_t>(b)));
    return t;
  }();
  return table;
}
float half_to_float(Half type, std::uint16_t bits) {
  return type == Half::bfloat16 ? __bfloat162float(__ushort_as_bfloat16(bits)) : float16_values()[bits];
}
std::uint16_t half_of(std::uint32_t reg, int h) { return static_cast<std::uint16_t>(h == 0 ? reg : reg >> 16); }

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type".
// A (16 x 16, row): a_i, i < 8, in register i / 2; row groupID (+8 for
// a2, a3, a6, a7), column 2 threadID_in_group + (i % 2) (+8 for a4..a7).
int a_row(int lane, int i) { return lane / 4 + (i == 2 || i == 3 || i == 6 || i == 7 ? 8 : 0); }
int a_col(int lane, int i) { return 2 * (lane % 4) + i % 2 + (i >= 4 ? 8 : 0); }
// B (16 x 8, col): b_i, i < 4; row (k) 2 threadID_in_group + (i % 2) (+8 for
// b2, b3), column groupID.
int b_row(int lane, int i) { return 2 * (lane % 4) + i % 2 + (i >= 2 ? 8 : 0); }
int b_col(int lane) { return lane / 4; }
// C, D (16 x 8): c_i, i < 4; row groupID (+8 for c2, c3), column
// 2 threadID_in_group + (i % 2).
int c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

template <Half kType>
void mma_collective(const Record (&in)[kWarpSize], Record (&out)[kWarpSize]) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t reg = in[lane].get<std::uint32_t>(4 * static_cast<std::size_t>(i / 2));
      A[a_row(lane, i)][a_col(lane, i)] = half_to_float(kType, half_of(reg, i % 2));
    }
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t reg = in[lane].get<std::uint32_t>(16 + 4 * static_cast<std::size_t>(i / 2));
      B[b_row(lane, i)][b_col(lane)] = half_to_float(kType, half_of(reg, i % 2));
    }
    for (int i = 0; i < 4; ++i)
      C[c_row(lane, i)][c_col(lane, i)] = in[lane].get<float>(24 + 4 * static_cast<std::size_t>(i));
  }
  for (int lane = 0; lane < kWarpSize; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = c_row(lane, i), c = c_col(lane, i);
      float sum = C[r][c];
      for (int k = 0; k < 16; ++k) sum += A[r][k] * B[k][c];
      out[lane].put(sum, 4 * static_cast<std::size_t>(i));
    }
}

// PTX ISA, "Matrix Fragments for mma.m16n8k32" with .s8 operands: each
// register holds four consecutive bytes of a row of A (a0: row groupID,
// columns 4 threadID_in_group + 0..3; a1: row + 8; a2: columns + 16; a3:
// both) or of a column of B (b0: rows 4 threadID_in_group + 0..3, column
// groupID; b1: rows + 16); C as in the float mma.
void mma_s8_collective(const Record (&in)[kWarpSize], Record (&out)[kWarpSize]) {
  std::int32_t A[16][32], B[32][8];
  std::uint32_t C[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int group = lane / 4, thread = lane % 4;
    for (int reg = 0; reg < 4; ++reg) {
      const std::uint32_t bits = in[lane].get<std::uint32_t>(4 * static_cast<std::size_t>(reg));
      for (int byte = 0; byte < 4; ++byte)
        A[group + (reg % 2) * 8][4 * thread + byte + (reg / 2) * 16] = static_cast<std::int8_t>(bits >> (8 * byte));
    }
    for (int reg = 0; reg < 2; ++reg) {
      const std::uint32_t bits = in[lane].get<std::uint32_t>(16 + 4 * static_cast<std::size_t>(reg));
      for (int byte = 0; byte < 4; ++byte)
        B[4 * thread + byte + reg * 16][group] = static_cast<std::int8_t>(bits >> (8 * byte));
    }
    for (int i = 0; i < 4; ++i)
      C[c_row(lane, i)][c_col(lane, i)] = in[lane].get<std::uint32_t>(24 + 4 * static_cast<std::size_t>(i));
  }
  for (int lane = 0; lane < kWarpSize; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = c_row(lane, i), c = c_col(lane, i);
      std::uint32_t sum = C[r][c];  // unsigned: wraps instead of overflowing
      for (int k = 0; k < 32; ++k) sum += static_cast<std::uint32_t>(A[r][k] * B[k][c]);
      out[lane].put(sum, 4 * static_cast<std::size_t>(i));
    }
}

// PTX ISA, "ldmatrix": lanes 8 j .. 8 j + 7 give the rows of matrix j; with
// .trans, lane l receives in register j the elements (2 (l % 4) + h, l / 4)
// of matrix j as stored, h = 0 in the low half.
void ldmatrix_collective(const Record (&in)[kWarpSize], Record (&out)[kWarpSize]) {
  for (int lane = 0; lane < kWarpSize; ++lane)
    for (int j = 0; j < 4; ++j) {
      std::uint16_t h[2];
      for (int half = 0; half < 2; ++half) {
        const auto* row = in[8 * j + 2 * (lane % 4) + half].get<const unsigned char*>();
        std::memcpy(&h[half], row + 2 * (lane / 4), 2);
      }
      out[lane].put(static_cast<std::uint32_t>(h[0]) | static_cast<std::uint32_t>(h[1]) << 16,
                    4 * static_cast<std::size_t>(j));
    }
}

}  // namespace

void mma_m16n8k16(Half type, float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  Record r;
  for (int i = 0; i < 4; ++i) r.put(a[i], 4 * static_cast<std::size_t>(i));
  r.put(b0, 16);
  r.put(b1, 20);
  for (int i = 0; i < 4; ++i) r.put(d[i], 24 + 4 * static_cast<std::size_t>(i));
  const Record out = type == Half::bfloat16
                         ? warp_collective("mma.sync.m16n8k16.bf16", r, mma_collective<Half::bfloat16>)
                         : warp_collective("mma.sync.m16n8k16.f16", r, mma_collective<Half::float16>);
  for (int i = 0; i < 4; ++i) d[i] = out.get<float>(4 * static_cast<std::size_t>(i));
}

void mma_m16n8k32_s8(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  Record r;
  for (int i = 0; i < 4; ++i) r.put(a[i], 4 * static_cast<std::size_t>(i));
  r.put(b0, 16);
  r.put(b1, 20);
  for (int i = 0; i < 4; ++i) r.put(d[i], 24 + 4 * static_cast<std::size_t>(i));
  const Record out = warp_collective("mma.sync.m16n8k32.s8", r, mma_s8_collective);
  for (int i = 0; i < 4; ++i) d[i] = out.get<int>(4 * static_cast<std::size_t>(i));
}

void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  Record mine;
  mine.put(row);
  const Record out = warp_collective("ldmatrix.x4.trans", mine, ldmatrix_collective);
  for (int j = 0; j < 4; ++j) r[j] = out.get<std::uint32_t>(4 * static_cast<std::size_t>(j));
}

void cp_async_16(void* dst, const void* src, bool valid) {
  PendingCopy c{dst, {}};
  if (valid) std::memcpy(c.bytes, src, sizeof c.bytes);  // the kernel's read of global memory
  Hidden hidden;
  g_current->copies.push_back(c);
}
void cp_async_wait_all() { land(*g_current); }

}  // namespace entgraph_emulator

// ---- Intrinsics ----
namespace {
using entgraph_emulator::Record;
constexpr unsigned kFull = 0xffffffffu;

void require_full(unsigned mask, const char* what) {
  if (mask != kFull)
    throw entgraph_emulator::Failure(std::string(what) + ": the emulator models full-warp masks only (got " +
                                     std::to_string(mask) + ")");
}

// Shuffles: lane l's record holds its value (8 bytes), the lane it reads
// (by index, or by xor) and the segment width.
template <bool kXor>
void shuffle_collective(const Record (&in)[32], Record (&out)[32]) {
  for (int l = 0; l < 32; ++l) {
    const int arg = in[l].get<int>(8), width = in[l].get<int>(12);
    const int base = l - l % width;
    int src = kXor ? l ^ arg : base + (arg % width + width) % width;
    if (src >= base + width || src < base) src = l;  // out of its segment: its own value
    out[l].put(in[src].get<std::uint64_t>(0));
  }
}
void ballot_collective(const Record (&in)[32], Record (&out)[32]) {
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l)
    if (in[l].get<int>() != 0) bits |= 1u << l;
  for (auto& o : out) o.put(bits);
}
void nothing_collective(const Record (&)[32], Record (&)[32]) {}
// __ballot_sync and __any_sync: the same exchange under their own names (a
// warp whose lanes reach different ones is divergent).
unsigned ballot(unsigned mask, int predicate, const char* what) {
  require_full(mask, what);
  Record r;
  r.put(predicate);
  return entgraph_emulator::warp_collective(what, r, ballot_collective).get<unsigned>();
}

}  // namespace

void __syncthreads() { entgraph_emulator::block_barrier("__syncthreads", 0); }
int __syncthreads_or(int predicate) { return entgraph_emulator::block_barrier("__syncthreads", predicate) > 0; }
void __syncwarp(unsigned mask) {
  require_full(mask, "__syncwarp");
  entgraph_emulator::warp_collective("__syncwarp", Record{}, nothing_collective);
}
unsigned __ballot_sync(unsigned mask, int predicate) { return ballot(mask, predicate, "__ballot_sync"); }
int __any_sync(unsigned mask, int predicate) { return ballot(mask, predicate, "__any_sync") != 0; }
std::uint64_t entgraph_emulator::shuffle(unsigned mask, std::uint64_t bits, int arg, int width, bool by_xor,
                                         const char* what) {
  require_full(mask, what);
  Record r;
  r.put(bits);
  r.put(arg, 8);
  r.put(width, 12);
  return warp_collective(what, r, by_xor ? shuffle_collective<true> : shuffle_collective<false>).get<std::uint64_t>();
}

// ---- The runtime API ----
namespace {
using entgraph_emulator::g_allocations;
using entgraph_emulator::g_last_error;
using entgraph_emulator::g_last_message;

// Whether [p, p + bytes) lies in one allocation.
bool device_range(const void* p, std::size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  auto it = g_allocations.upper_bound(c);
  if (it == g_allocations.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst == nullptr || src == nullptr || (dst_device && !device_range(dst, bytes)) ||
      (src_device && !device_range(src, bytes)))
    return cudaErrorInvalidValue;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }
const char* cudaGetErrorString(cudaError_t error) {
  if (error == entgraph_emulator::g_message_code && !g_last_message.empty()) return g_last_message.c_str();
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "entgraph's CUDA emulator (on the CPU)");
  prop->totalGlobalMem = entgraph_emulator::kDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 2;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = 2;
      return cudaSuccess;
    case cudaDevAttrPageableMemoryAccess:
      *value = 0;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
// Launches run to completion when made: a synchronize reports their failure.
cudaError_t cudaDeviceSynchronize() { return g_last_error; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return g_last_error; }
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  static unsigned char names[1];  // distinct from the default stream (nullptr); never dereferenced
  *stream = reinterpret_cast<cudaStream_t>(names);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  // More than the device has fails as on a GPU (and before AddressSanitizer's
  // allocator, which aborts on absurd sizes instead of failing).
  if (bytes > entgraph_emulator::kDeviceBytes) return cudaErrorMemoryAllocation;
  auto* m = static_cast<unsigned char*>(::operator new(bytes, std::align_val_t(256), std::nothrow));
  if (m == nullptr) return cudaErrorMemoryAllocation;
  std::memset(m, 0xff, bytes);  // cudaMalloc's memory is not cleared: neither is this
  g_allocations[m] = bytes;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  const auto it = g_allocations.find(static_cast<unsigned char*>(p));
  if (it == g_allocations.end()) return cudaErrorInvalidValue;
  g_allocations.erase(it);
  ::operator delete(p, std::align_val_t(256));
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  if (device_range(p, 1)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return copy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpy2D(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                         std::size_t height, cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  for (std::size_t r = 0; r < height; ++r) {
    const cudaError_t e = copy(static_cast<unsigned char*>(dst) + r * dpitch,
                               static_cast<const unsigned char*>(src) + r * spitch, width, kind);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!device_range(dst, bytes)) return cudaErrorInvalidValue;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t) {
  return cudaMemset(dst, value, bytes);
}
cudaError_t emulator_set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<std::size_t>(bytes) > entgraph_emulator::kMaxSharedBytes) return cudaErrorInvalidValue;
  entgraph_emulator::g_max_shared[kernel] = static_cast<std::size_t>(bytes);
  return cudaSuccess;
}
