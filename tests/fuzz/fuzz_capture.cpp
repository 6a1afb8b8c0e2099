// Fuzz target: capture.json (entgraph::read_capture, core/include/entgraph/io/capture.hpp).
//
// read_capture reads a folder, so the target keeps one per process,
// /dev/shm/entgraph-fuzz-capture-<pid> (else under $TMPDIR or /tmp), made
// once: small fixed arrays written by write_capture from a tiny Capture
// (1 layer, 2 heads, head_dim 4, 5 tokens: queries.npy and keys.npy,
// float32), plus half.npy (the keys as float16) and bad.npy (the queries
// with a NaN). Each input is written over capture.json
// in that folder and read. The seed corpus (tests/fuzz/corpus/capture)
// matches these arrays.
//
// Invariants for an input that reads as capture c:
// - c passes validate_capture;
// - write_capture(c) into a second folder succeeds and reads back as the same
//   capture: sizes, lengths, settings (alpha, causal, scale), texts,
//   provenance, and queries, keys and values bit for bit;
// - writing is a fixed point: the capture.json written from the re-read
//   capture is byte-identical to the first one written.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"
#include "fuzz_check.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "entgraph-fuzz-capture-";

struct Scratch {
  std::string root, in, out;
  Scratch() {
    std::string base = "/dev/shm";
    if (access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && tmp[0] ? tmp : "/tmp";
    }
    // One folder per process, named by its id; folders of processes that
    // are gone (a crash skips the destructor) are removed here.
    std::error_code ec;
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind(kPrefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), nullptr, 10);
      if (pid > 0 && (pid == static_cast<long>(getpid()) || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)))
        stale.push_back(it->path());
    }
    for (const fs::path& p : stale) fs::remove_all(p, ec);
    ec.clear();
    root = base + "/" + kPrefix + std::to_string(getpid());
    fs::create_directories(root, ec);
    if (ec) {
      std::fprintf(stderr, "fuzz_capture: cannot create %s: %s\n", root.c_str(), ec.message().c_str());
      std::abort();
    }
    in = root + "/in";
    out = root + "/out";
    FUZZ_MUST("writing the fixed arrays", (make_fixed_arrays(), 0));
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  // The tiny capture whose arrays every seed refers to.
  void make_fixed_arrays() const {
    entgraph::Capture c = entgraph::Capture::make(1, 2, 4, {3, 2});
    for (std::size_t i = 0; i < c.queries.size(); ++i) {
      c.queries[i] = std::sin(0.7f * static_cast<float>(i) + 0.1f);
      c.keys[i] = std::cos(0.3f * static_cast<float>(i) - 0.2f);
    }
    entgraph::write_capture(in, c);
    // The same keys as float16, rounded by write_capture.
    entgraph::write_capture(root + "/half", c, entgraph::NpyDtype::float16);
    fs::rename(root + "/half/keys.npy", in + "/half.npy");
    fs::remove_all(root + "/half");
    const std::vector<std::size_t> shape = {1, 2, 5, 4};
    std::vector<float> bad = c.queries;
    bad[13] = std::nanf("");
    entgraph::write_npy(in + "/bad.npy", bad.data(), shape);
  }
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same(const entgraph::Capture& a, const entgraph::Capture& b) {
  if (a.layers != b.layers || a.heads != b.heads || a.head_dim != b.head_dim || a.lengths != b.lengths) return false;
  if (a.settings.size() != b.settings.size()) return false;
  for (std::size_t i = 0; i < a.settings.size(); ++i) {
    const entgraph::HeadSettings& x = a.settings[i];
    const entgraph::HeadSettings& y = b.settings[i];
    if (std::memcmp(&x.alpha, &y.alpha, sizeof(double)) != 0 || x.causal != y.causal ||
        std::memcmp(&x.scale, &y.scale, sizeof(double)) != 0)
      return false;
  }
  return a.texts == b.texts && a.provenance == b.provenance && same_bits(a.queries, b.queries) &&
         same_bits(a.keys, b.keys) && same_bits(a.values, b.values);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Scratch scratch;
  {
    std::ofstream f(scratch.in + "/capture.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!f) {
      std::fprintf(stderr, "fuzz_capture: cannot write %s/capture.json\n", scratch.in.c_str());
      std::abort();
    }
  }
  entgraph::Capture c;
  try {
    c = entgraph::read_capture(scratch.in);
  } catch (const std::exception& e) {
    FUZZ_REJECTED(e);
    return 0;  // rejected: fine, as long as nothing crashed
  }
  FUZZ_MUST("validate_capture of a capture read", (entgraph::validate_capture(c), 0));

  FUZZ_MUST("write_capture of a capture read", (entgraph::write_capture(scratch.out, c), 0));
  const std::string json1 = read_text(scratch.out + "/capture.json");
  const entgraph::Capture d = FUZZ_MUST("re-reading write_capture's output", entgraph::read_capture(scratch.out));
  FUZZ_CHECK(same(c, d));
  FUZZ_MUST("write_capture of the re-read capture", (entgraph::write_capture(scratch.out, d), 0));
  FUZZ_CHECK(read_text(scratch.out + "/capture.json") == json1);
  return 0;
}
