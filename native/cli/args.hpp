// entgraph CLI: argument parsing shared by every subcommand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "entgraph/predictors/predictor.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::cli {

// A mistake on the command line (unknown option, missing or bad value, wrong
// number of files). main() prints "entgraph: <message>" and exits with 2;
// every other error exits with 1.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// One option a subcommand accepts: "--name VALUE" (takes_value) or "--name".
struct OptionSpec {
  const char* name;  // without the leading "--"
  bool takes_value;
};

// The parsed arguments of one subcommand. Options are "--name VALUE" or
// "--name=VALUE"; "-h" and "--help" are always accepted; "--" ends the
// options; anything else is positional. Throws UsageError for an unknown
// option, a missing value, a value given to a flag, or an option repeated.
class Args {
 public:
  Args(const std::string& command, const std::vector<std::string>& argv, const std::vector<OptionSpec>& options);

  const std::string& command() const { return command_; }
  bool help() const { return help_; }
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // Throws UsageError unless there are exactly `count` positional arguments,
  // naming them (e.g. "IN.npy OUT.npy").
  void expect_positional(std::size_t count, const char* names) const;

  // The value of --name as a number, if given. The whole value must be a
  // plain decimal number ([+-]digits[.digits][e[+-]digits]), finite as a
  // double: "<command>: --name: not a finite decimal number (got 'x')"
  // otherwise (hexadecimal, inf, nan, spaces and trailing text included).
  std::optional<double> number(const std::string& name) const;
  // The value of --name as a non-negative integer, if given.
  std::optional<std::uint64_t> integer(const std::string& name) const;

  // A UsageError "<command>: <what>", to throw.
  UsageError error(const std::string& what) const { return UsageError(command_ + ": " + what); }

 private:
  std::string command_;
  bool help_ = false;
  std::vector<std::pair<std::string, std::string>> values_;  // name, value ("" for flags)
  std::vector<std::string> positional_;
};

// Options every compute subcommand accepts.
inline const OptionSpec kIsaOption{"isa", true};
inline const OptionSpec kThreadsOption{"threads", true};
// Help text lines for them.
inline constexpr const char* kRuntimeOptionsHelp =
    "  --isa NAME         CPU kernels: reference, sse2, avx2, avx512 (default: the best\n"
    "                     available, or $ENTGRAPH_CPU_ISA)\n"
    "  --threads N        worker threads; 0 = default ($ENTGRAPH_NUM_THREADS or all cores)\n";
// Applies --isa and --threads if given. An unknown ISA name is a UsageError;
// one this machine lacks is an entgraph::Error. Then reads what they do not
// set from $ENTGRAPH_CPU_ISA and $ENTGRAPH_NUM_THREADS: a bad value there is
// an entgraph::Error naming the variable.
void apply_runtime_options(const Args& args);

// The transform named by --fn (softmax, sparsemax, entmax15, entmax with
// --alpha A, topk with --k K). Throws UsageError naming the option.
Transform parse_transform_option(const Args& args);

// Removes every "--NAME VALUE" and "--NAME=VALUE" before "--" from argv and
// returns the values in order: options that may repeat (Args rejects a
// repeated option). Throws UsageError for a missing value.
std::vector<std::string> take_repeated(std::vector<std::string>& argv, const std::string& name, const char* command);

// Removes every "--set key=value" (repeatable) from argv and returns the
// settings. Throws UsageError for a malformed pair or a key set twice.
std::map<std::string, std::string> take_settings(std::vector<std::string>& argv, const char* command);

// Whether two paths name the same file or folder, existing or not
// ("out.npy", "./out.npy", a link to it).
bool same_path(const std::string& a, const std::string& b);

// Every predictor method's name, comma-separated, for help and errors.
std::string predictor_method_list();

// make_predictor(method, settings), with an unknown method, an unknown
// setting or a bad value (all typed on the command line) as a UsageError
// naming the option they came from.
std::unique_ptr<Predictor> make_predictor_option(const Args& args, const std::string& method,
                                                 const PredictorSettings& settings,
                                                 const char* method_option = "--method",
                                                 const char* settings_option = "--set");

}  // namespace entgraph::cli
