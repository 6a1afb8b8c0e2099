// entgraph CLI: the subcommands. Each lives in its own cmd_<name>.cpp; to add
// one, write the file, declare its entry point here, list it in kCommands
// (main.cpp) and in CMakeLists.txt.
#pragma once

#include <string>
#include <vector>

namespace entgraph::cli {

// Entry points: args are what follows the subcommand's name. They return the
// exit code (0) and throw UsageError or entgraph::Error on failure; --help
// prints the subcommand's usage to stdout and returns 0.
int run_transform(const std::vector<std::string>& args);
int run_demo(const std::vector<std::string>& args);
int run_info(const std::vector<std::string>& args);
int run_capture(const std::vector<std::string>& args);
int run_fit(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_sweep(const std::vector<std::string>& args);
int run_attend(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

}  // namespace entgraph::cli
