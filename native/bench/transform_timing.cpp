// entgraph_transform_timing: one dependency-free timing program that builds
// both natively and with em++ (native/bench/wasm/CMakeLists.txt), so that the
// WebAssembly build can be compared with the native one on the same inputs
// (tools/bench_wasm.mjs runs both and prints the table; docs/PERFORMANCE.md,
// "WebAssembly vs native").
//
// Cases: the kTiming cases of the one list of transform cases
// (tests/support/cases.hpp: softmax, sparsemax, entmax15, general-alpha
// entmax at alpha = 1.25 and 1.75, top-k softmax with k = 32); forward and
// backward; n = 512 and 4096. Every call transforms a batch of kBatchElements / n rows on one thread.
// Inputs are N(0, 1) from a generator that uses only IEEE-exact arithmetic
// (splitmix64, Marsaglia's polar method with a log made of + - * /), so both
// builds see bit-identical scores; "input_hash" in the first line shows it.
//
// For each case: one warm-up that also sizes the timed loop (at least
// --min-ms milliseconds per repetition), then --reps repetitions; ns_per_row
// is the median. checksum (a weighted sum of the outputs, double) and hash
// (FNV-1a of the output bits) come from the outputs of one call, so the work
// cannot be optimised away and the two builds can be compared.
//
// --clock cpu times with the CPU time used instead of the wall clock (native:
// this thread's; wasm: node's process.cpuUsage()), for comparisons on a busy
// machine, where other processes' time slices land inside a wall-clock loop.
//
// Output: one JSON object per line. Usage:
//   entgraph_transform_timing [--min-ms 50] [--reps 5] [--clock wall|cpu] [--filter SUBSTRING | --case KEY]
//                             [--isa NAME] [--teacher DIR --text FILE --bytes 256] [--list]
// where a case's key is <transform>/<dir>/n:<n>, e.g. entmax15/fwd/n:512; with
// --teacher it times Teacher::forward on the first --bytes bytes of --text;
// --list prints only the header line, whose "transforms" and "sizes" name the
// cases.
// The wasm build runs as `node build/wasm/native/bench/wasm/entgraph_transform_timing.js ...`
// and reads files through NODERAWFS (paths relative to the current folder).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__EMSCRIPTEN__)
#include <emscripten.h>
#else
#include <time.h>
#endif

#include "entgraph/model.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "support/cases.hpp"

namespace {

using entgraph::ConstMatrix;
using entgraph::MatrixView;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBatchElements = std::size_t{1} << 17;  // 512 KiB of float scores per call
constexpr std::size_t kSizes[] = {512, 4096};
constexpr std::uint64_t kSeedScores = 42;
constexpr std::uint64_t kSeedGrad = 43;

// ---------------------------------------------------------------------------
// Portable N(0, 1): the same bits on every IEEE-754 platform (no libm call
// whose last bit may differ between glibc and emscripten's musl).

struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// Natural log of x > 0 from + - * / only: x = m 2^e with m in [sqrt(1/2),
// sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172.
double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double term = s, sum = 0.0;
  for (int k = 1; k <= 41; k += 2) {  // s^41 < 1e-31
    sum += term / k;
    term *= s2;
  }
  return 2.0 * sum + e * 0.69314718055994530942;
}

std::vector<float> gaussian(std::size_t count, std::uint64_t seed) {
  SplitMix64 rng{seed};
  std::vector<float> out;
  out.reserve(count + 1);
  while (out.size() < count) {
    const double u = 2.0 * rng.uniform() - 1.0;
    const double v = 2.0 * rng.uniform() - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    const double f = std::sqrt(-2.0 * portable_log(s) / s);  // sqrt is correctly rounded
    out.push_back(static_cast<float>(u * f));
    out.push_back(static_cast<float>(v * f));
  }
  out.resize(count);
  return out;
}

// FNV-1a over the bits of the floats.
std::uint64_t hash_floats(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (float x : v) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xffu;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

// sum_i out_i * w_i in double: not invariant to where the mass goes (a plain
// sum of probabilities would be the row count whatever the transform did).
double weighted_sum(const std::vector<float>& out, const std::vector<float>& weights) {
  double s = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * weights[i % weights.size()];
  return s;
}

// ---------------------------------------------------------------------------
// Timing.

struct Options {
  double min_ms = 50.0;
  int reps = 5;
  bool cpu_clock = false;  // --clock cpu
  std::string filter;    // substring of "<transform>/<dir>/n:<n>"
  std::string only_case;  // exactly "<transform>/<dir>/n:<n>"
  std::string isa;
  std::string teacher_dir, text_file;
  std::size_t bytes = 256;
  bool list = false;  // the header line only
};

struct Timing {
  double median_ns = 0, min_ns = 0, max_ns = 0;  // per call
  long long iterations = 0;                       // calls per repetition
};

// Now, in ns: the wall clock, or the CPU time this program has used.
double now_ns(bool cpu_clock) {
  if (!cpu_clock) return std::chrono::duration<double, std::nano>(Clock::now().time_since_epoch()).count();
#if defined(__EMSCRIPTEN__)
  // The whole node process (microseconds): after the warm-up, V8's compiler
  // and GC threads are idle and the wasm thread is the only one running.
  return EM_ASM_DOUBLE({
    const u = process.cpuUsage();
    return (u.user + u.system) * 1000;
  });
#else
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
#endif
}

// Warm-up: doubles the call count until one loop lasts min_ms (which also
// warms caches, the branch predictors and, in wasm, the JIT's top tier);
// then reps loops of that many calls.
Timing time_calls(const std::function<void()>& call, const Options& opt) {
  const double target_ns = opt.min_ms * 1e6;
  long long iters = 1;
  for (;;) {
    const double t0 = now_ns(opt.cpu_clock);
    for (long long i = 0; i < iters; ++i) call();
    const double ns = now_ns(opt.cpu_clock) - t0;
    if (ns >= target_ns) break;
    // Grow towards the target, at most 10x per step, at least 2x.
    const double factor = ns > 0 ? std::min(10.0, std::max(2.0, 1.2 * target_ns / ns)) : 10.0;
    iters = static_cast<long long>(std::ceil(static_cast<double>(iters) * factor));
  }
  std::vector<double> per_call;
  for (int r = 0; r < opt.reps; ++r) {
    const double t0 = now_ns(opt.cpu_clock);
    for (long long i = 0; i < iters; ++i) call();
    per_call.push_back((now_ns(opt.cpu_clock) - t0) / static_cast<double>(iters));
  }
  std::sort(per_call.begin(), per_call.end());
  Timing t;
  const std::size_t m = per_call.size();
  t.median_ns = m % 2 ? per_call[m / 2] : 0.5 * (per_call[m / 2 - 1] + per_call[m / 2]);
  t.min_ns = per_call.front();
  t.max_ns = per_call.back();
  t.iterations = iters;
  return t;
}

// ---------------------------------------------------------------------------
// Cases.

using Matrix = MatrixView<float>;
using CMatrix = ConstMatrix<float>;

std::vector<entgraph::cases::TransformCase> cases() {
  return entgraph::cases::transform_cases(entgraph::cases::kTiming);
}

const char* build_name() {
#if defined(__EMSCRIPTEN__)
  return "wasm";
#else
  return "native";
#endif
}

std::string hex(std::uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void print_case(const std::string& name, const std::string& transform, const char* dir, std::size_t n,
                std::size_t rows, const Timing& t, double checksum, std::uint64_t hash) {
  std::printf(
      "{\"case\":\"%s\",\"transform\":\"%s\",\"dir\":\"%s\",\"n\":%zu,\"rows\":%zu,\"ns_per_row\":%.2f,"
      "\"ns_per_element\":%.4f,\"min_ns_per_row\":%.2f,\"max_ns_per_row\":%.2f,\"iterations\":%lld,"
      "\"isa\":\"%s\",\"build\":\"%s\",\"checksum\":%.17g,\"hash\":\"%s\"}\n",
      name.c_str(), transform.c_str(), dir, n, rows, t.median_ns / rows, t.median_ns / (rows * n), t.min_ns / rows,
      t.max_ns / rows, t.iterations, entgraph::cpu_isa_name(entgraph::cpu_isa()), build_name(), checksum,
      hex(hash).c_str());
  std::fflush(stdout);
}

bool selected(const Options& opt, const std::string& key) {
  if (!opt.only_case.empty()) return key == opt.only_case;
  return opt.filter.empty() || key.find(opt.filter) != std::string::npos;
}

void run_transforms(const Options& opt) {
  for (std::size_t n : kSizes) {
    const std::size_t rows = kBatchElements / n;
    const std::vector<float> scores = gaussian(rows * n, kSeedScores);
    const std::vector<float> grad = gaussian(rows * n, kSeedGrad);
    std::vector<float> probs(rows * n), grad_scores(rows * n);
    const CMatrix z(scores.data(), rows, n), dp(grad.data(), rows, n);
    const Matrix p(probs.data(), rows, n), dz(grad_scores.data(), rows, n);
    for (const entgraph::cases::TransformCase& c : cases()) {
      const entgraph::cases::ExtraInputs<float> extra = entgraph::cases::extra_inputs<float>(c, rows, n);
      const auto forward = [&] { entgraph::cases::forward<float>(c, extra, z, p); };
      const std::string fwd_name = c.name + std::string("/fwd"), bwd_name = c.name + std::string("/bwd");
      const bool want_fwd = selected(opt, fwd_name + "/n:" + std::to_string(n));
      const bool want_bwd = selected(opt, bwd_name + "/n:" + std::to_string(n));
      if (!want_fwd && !want_bwd) continue;
      if (want_fwd) {
        const Timing t = time_calls(forward, opt);
        forward();  // the checked output is that of one plain call
        print_case(fwd_name, c.name, "fwd", n, rows, t, weighted_sum(probs, scores), hash_floats(probs));
      }
      if (want_bwd) {
        forward();  // the backward's input: p = forward(scores)
        const CMatrix pc(probs.data(), rows, n);
        const auto backward = [&] { entgraph::cases::backward<float>(c, extra, pc, dp, dz); };
        const Timing t = time_calls(backward, opt);
        backward();
        print_case(bwd_name, c.name, "bwd", n, rows, t, weighted_sum(grad_scores, grad), hash_floats(grad_scores));
      }
    }
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void run_teacher(const Options& opt) {
  const std::string text = read_file(opt.text_file).substr(0, opt.bytes);
  const entgraph::Teacher teacher = entgraph::Teacher::load(opt.teacher_dir);
  std::vector<float> logits;
  const Timing t = time_calls([&] { logits = teacher.forward(text).logits; }, opt);
  // Checksum: the logits weighted by a fixed N(0, 1) vector.
  const std::vector<float> weights = gaussian(4096, kSeedScores);
  std::string kind = teacher.config().causal ? "causal" : "masked";
  std::printf(
      "{\"case\":\"teacher_forward/%s\",\"transform\":\"teacher_forward\",\"dir\":\"fwd\",\"n\":%zu,\"rows\":1,"
      "\"ns_per_row\":%.0f,\"ms\":%.4f,\"min_ms\":%.4f,\"max_ms\":%.4f,\"iterations\":%lld,\"isa\":\"%s\","
      "\"build\":\"%s\",\"checksum\":%.17g,\"hash\":\"%s\"}\n",
      kind.c_str(), text.size(), t.median_ns, t.median_ns * 1e-6, t.min_ns * 1e-6, t.max_ns * 1e-6, t.iterations,
      entgraph::cpu_isa_name(entgraph::cpu_isa()), build_name(), weighted_sum(logits, weights),
      hex(hash_floats(logits)).c_str());
  std::fflush(stdout);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--min-ms")
      o.min_ms = std::atof(value().c_str());
    else if (a == "--reps")
      o.reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--clock") {
      const std::string c = value();
      if (c != "wall" && c != "cpu") throw std::runtime_error("--clock must be wall or cpu, not '" + c + "'");
      o.cpu_clock = c == "cpu";
    } else if (a == "--filter")
      o.filter = value();
    else if (a == "--case")
      o.only_case = value();
    else if (a == "--isa")
      o.isa = value();
    else if (a == "--teacher")
      o.teacher_dir = value();
    else if (a == "--text")
      o.text_file = value();
    else if (a == "--bytes")
      o.bytes = static_cast<std::size_t>(std::atol(value().c_str()));
    else if (a == "--list")
      o.list = true;
    else
      throw std::runtime_error(
          "unknown argument '" + a +
          "' (expected --min-ms MS, --reps N, --clock wall|cpu, --filter S, --case KEY, --isa NAME, --teacher DIR --text FILE "
          "[--bytes N], --list)");
  }
  if (o.teacher_dir.empty() != o.text_file.empty()) throw std::runtime_error("--teacher and --text go together");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    if (!opt.isa.empty()) entgraph::set_cpu_isa(entgraph::parse_cpu_isa(opt.isa));
    entgraph::set_num_threads(1);  // the wasm build has one thread; compare like with like
    std::string available, transforms, sizes;
    for (entgraph::CpuIsa isa : entgraph::available_cpu_isas())
      available += std::string(available.empty() ? "" : ",") + entgraph::cpu_isa_name(isa);
    for (const entgraph::cases::TransformCase& c : cases())
      transforms += std::string(transforms.empty() ? "" : ",") + c.name;
    for (std::size_t n : kSizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
    std::printf(
        "{\"header\":true,\"build\":\"%s\",\"isa\":\"%s\",\"available_isas\":\"%s\",\"threads\":%zu,"
        "\"batch_elements\":%zu,\"transforms\":\"%s\",\"sizes\":\"%s\",\"min_ms\":%g,\"reps\":%d,\"clock\":\"%s\","
        "\"input_hash\":\"%s\",\"compiler\":\"%s\"}\n",
        build_name(), entgraph::cpu_isa_name(entgraph::cpu_isa()), available.c_str(), entgraph::num_threads(),
        kBatchElements, transforms.c_str(), sizes.c_str(), opt.min_ms, opt.reps, opt.cpu_clock ? "cpu" : "wall",
        hex(hash_floats(gaussian(kBatchElements, kSeedScores))).c_str(),
#if defined(__clang__)
        "clang " __clang_version__
#elif defined(__GNUC__)
        "gcc " __VERSION__
#else
        "unknown"
#endif
    );
    std::fflush(stdout);
    if (opt.list) return 0;
    if (opt.teacher_dir.empty())
      run_transforms(opt);
    else
      run_teacher(opt);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "entgraph_transform_timing: %s\n", e.what());
    return 1;
  }
}
