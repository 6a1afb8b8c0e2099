// entgraph: the command-line tool. main() finds the subcommand and turns every
// error into "entgraph: <message>" on stderr with exit code 2 (usage) or 1
// (anything else); no exception escapes.
#include <csignal>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/error.hpp"
#ifdef ENTGRAPH_HAVE_CUDA
#include "entgraph/cuda/backend.hpp"
#endif

#ifndef ENTGRAPH_VERSION
#define ENTGRAPH_VERSION "unknown"
#endif

namespace entgraph::cli {
namespace {

const Command kCommands[] = {
    {"transform", "apply an attention transform (and its backward) to each row of a .npy", run_transform},
    {"demo", "show every transform on one row of scores, to see sparsity at a glance", run_demo},
    {"info", "describe .npy files and captures (a capture's gold-graph sparsity per head)", run_info},
    {"capture", "run a teacher model on a text and write its attention as a capture", run_capture},
    {"fit", "fit a graph predictor on a capture and write its parameter file", run_fit},
    {"eval", "compare a predictor's graphs with a capture's gold graphs (JSON report)", run_eval},
    {"sweep", "sweep every predictor over its grid: Pareto curves as JSON, CSV and SVG", run_sweep},
    {"attend", "dense vs predicted-graph attention per head: time, exact rows, error (--exact: bound and repair)",
     run_attend},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "Usage: entgraph <command> [options] [files]\n"
               "       entgraph <command> --help\n"
               "       entgraph --version\n"
               "\n"
               "entgraph " ENTGRAPH_VERSION
               " - sparse attention runtime (softmax, sparsemax, alpha-entmax, ...)\n"
               "\n"
               "Commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-11s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\n"
               "Exit status: 0 on success, 2 for a command-line mistake, 1 for any other error.\n");
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

int dispatch(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    print_usage(stderr);
    return 2;
  }
  const std::string& first = argv[0];
  if (first == "--help" || first == "-h") {
    print_usage(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::printf("entgraph %s\n", ENTGRAPH_VERSION);
    return 0;
  }
  if (first == "help") {
    if (argv.size() == 1) {
      print_usage(stdout);
      return 0;
    }
    const Command* c = find_command(argv[1]);
    if (c == nullptr) throw UsageError("help: unknown command '" + argv[1] + "' (see 'entgraph --help')");
    return c->run({"--help"});
  }
  const Command* c = find_command(first);
  if (c == nullptr) {
    if (first.size() > 1 && first[0] == '-') throw UsageError("unknown option '" + first + "' (see 'entgraph --help')");
    throw UsageError("unknown command '" + first + "' (see 'entgraph --help')");
  }
  return c->run(std::vector<std::string>(argv.begin() + 1, argv.end()));
}

}  // namespace
}  // namespace entgraph::cli

int main(int argc, char** argv) {
  using entgraph::cli::UsageError;
  // A file size limit (ulimit -f) makes a write fail with EFBIG, reported
  // and cleaned up like a full disk, instead of killing the process midway.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
#ifdef ENTGRAPH_HAVE_CUDA
    entgraph::cuda::register_backend();  // Device::cuda, for --device cuda
#endif
    const std::vector<std::string> args(argv + 1, argv + argc);
    const int code = entgraph::cli::dispatch(args);
    if (std::fflush(stdout) != 0) {
      std::fprintf(stderr, "entgraph: cannot write the output\n");
      return 1;
    }
    return code;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "entgraph: %s\n", e.what());
    return 2;
  } catch (const entgraph::Error& e) {
    std::fprintf(stderr, "entgraph: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "entgraph: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "entgraph: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "entgraph: unknown error\n");
    return 1;
  }
}
