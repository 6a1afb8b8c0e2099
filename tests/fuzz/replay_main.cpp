// entgraph fuzzing: a main() for the fuzz targets where libFuzzer is not
// used (gcc, or clang without ENTGRAPH_FUZZ). It runs LLVMFuzzerTestOneInput
// once on every file named on the command line and on every file under every
// folder named (recursively, in sorted order), so the seed corpus and saved
// findings replay in the ordinary build (ctest fuzz.corpus.<name>).
// Arguments starting with '-' are libFuzzer flags (e.g. -runs=0) and are
// ignored, so one command line serves both builds. An invariant failure or a
// crash ends the process abnormally; the file being run is printed first.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

namespace {

bool run_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);
  // An exact-size heap copy, so that AddressSanitizer sees a read past the end.
  std::vector<std::uint8_t> input(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(input.empty() ? nullptr : input.data(), input.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t runs = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (fs::recursive_directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec)) files.push_back(it->path());
      if (ec) {
        std::fprintf(stderr, "replay: cannot list %s: %s\n", arg.c_str(), ec.message().c_str());
        ok = false;
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& p : files) ok = run_file(p) && ok, ++runs;
    } else if (fs::exists(arg, ec)) {
      ok = run_file(arg) && ok;
      ++runs;
    } else {
      std::fprintf(stderr, "replay: no such file or folder: %s\n", arg.c_str());
      ok = false;
    }
  }
  std::printf("replay: %zu input(s) run%s\n", runs, ok ? "" : ", with errors");
  return ok ? 0 : 1;
}
