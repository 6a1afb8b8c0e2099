#include "args.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/text.hpp"

namespace entgraph::cli {

Args::Args(const std::string& command, const std::vector<std::string>& argv, const std::vector<OptionSpec>& options)
    : command_(command) {
  bool options_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool looks_like_option = !options_done && arg.size() >= 2 && arg[0] == '-';
    if (!looks_like_option) {
      positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg[1] != '-') {
      // "-3" or "-.5" is a (positional) number, "-x" a mistake.
      if ((arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.') {
        positional_.push_back(arg);
        continue;
      }
      throw UsageError(command_ + ": unknown option '" + arg + "'");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& o : options)
      if (name == o.name) spec = &o;
    if (spec == nullptr) throw UsageError(command_ + ": unknown option '--" + name + "'");
    if (has(name)) throw UsageError(command_ + ": option '--" + name + "' given more than once");
    std::string value;
    if (spec->takes_value) {
      if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= argv.size()) throw UsageError(command_ + ": option '--" + name + "' needs a value");
        value = argv[++i];
      }
    } else if (inline_value) {
      throw UsageError(command_ + ": option '--" + name + "' takes no value");
    }
    values_.emplace_back(name, value);
  }
}

bool Args::has(const std::string& name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return true;
  return false;
}

std::optional<std::string> Args::get(const std::string& name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return v;
  return std::nullopt;
}

void Args::expect_positional(std::size_t count, const char* names) const {
  if (positional_.size() == count) return;
  if (count == 0)
    throw UsageError(command_ + ": unexpected argument '" + positional_[0] + "' (files are given with options; see --help)");
  throw UsageError(command_ + ": expected " + names + " (got " + std::to_string(positional_.size()) + " file argument" +
                   (positional_.size() == 1 ? "" : "s") + ")");
}

std::optional<double> Args::number(const std::string& name) const {
  const auto text = get(name);
  if (!text) return std::nullopt;
  double v = 0;  // a plain decimal: "0x2", "inf", "nan", " 2" and "2x" are mistakes, not numbers
  if (!parse_decimal(*text, v))
    throw error("--" + name + ": not a finite decimal number (got '" + printable(text->data(), text->size()) +
                "')");
  return v;
}

std::optional<std::uint64_t> Args::integer(const std::string& name) const {
  const auto text = get(name);
  if (!text) return std::nullopt;
  const bool digits_only = !text->empty() && text->find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long v = digits_only ? std::strtoull(text->c_str(), nullptr, 10) : 0;
  if (!digits_only || errno == ERANGE || v > std::numeric_limits<std::uint64_t>::max())
    throw error("--" + name + ": not a non-negative integer (got '" + *text + "')");
  return static_cast<std::uint64_t>(v);
}

void apply_runtime_options(const Args& args) {
  if (auto isa = args.get("isa")) {
    const std::vector<CpuIsa> isas = available_cpu_isas();
    std::string available;
    for (CpuIsa a : isas) available += std::string(available.empty() ? "" : ", ") + cpu_isa_name(a);
    CpuIsa parsed;
    try {
      parsed = parse_cpu_isa(*isa);
    } catch (const Error&) {
      throw args.error("--isa: unknown instruction set '" + *isa + "' (available here: " + available + ")");
    }
    if (std::find(isas.begin(), isas.end(), parsed) == isas.end())
      throw Error(args.command() + ": --isa: " + *isa +
                  " is not available on this machine or build (available: " + available + ")");
    set_cpu_isa(parsed);
  }
  if (auto threads = args.integer("threads")) {
    if (*threads > 4096) throw args.error("--threads: at most 4096 (got " + std::to_string(*threads) + ")");
    set_num_threads(static_cast<std::size_t>(*threads));
  }
  // $ENTGRAPH_CPU_ISA and $ENTGRAPH_NUM_THREADS are read at first use: read
  // them now, so that a bad value is reported naming the variable, before
  // any file is read, rather than inside the first computation.
  if (!args.has("isa")) cpu_isa();
  num_threads();
}

Transform parse_transform_option(const Args& args) {
  const std::string names = transform_names(takes_scores_only, ", ", true);
  const auto fn = args.get("fn");
  if (!fn) throw args.error("--fn is required (one of " + names + ")");
  TransformKind kind = TransformKind::softmax;
  try {
    kind = parse_transform_kind(*fn);
  } catch (const Error&) {
    throw args.error("--fn: unknown transform '" + *fn + "' (expected one of " + names + ")");
  }
  const TransformInfo& row = transform_info(kind);
  if (row.extra_inputs())
    throw args.error("--fn: " + *fn + " needs extra inputs and is not available in 'transform' (expected one of " +
                     names + "; 'entgraph demo' shows it)");
  double alpha = 0.0;
  std::size_t k = 0;
  switch (row.parameter) {
    case TransformParameter::none: break;
    case TransformParameter::alpha: {
      const auto value = args.number("alpha");
      if (!value) throw args.error(std::string("--fn ") + row.shown_name() + " needs --alpha A (A in [1, 1000])");
      if (!(*value >= 1.0 && *value <= kMaxEntmaxAlpha))
        throw args.error("--alpha: must be in [1, 1000] (got " + *args.get("alpha") + ")");
      alpha = *value;
      break;
    }
    case TransformParameter::k: {
      const auto value = args.integer("k");
      if (!value) throw args.error(std::string("--fn ") + row.shown_name() + " needs --k K (K >= 1)");
      if (*value == 0) throw args.error("--k: must be at least 1 (got 0)");
      if (*value > std::numeric_limits<std::size_t>::max())
        throw args.error("--k: too large (got " + *args.get("k") + ")");
      k = static_cast<std::size_t>(*value);
      break;
    }
  }
  if (args.has("alpha") && row.parameter != TransformParameter::alpha)
    throw args.error(std::string("--alpha applies only to --fn ") + transform_names(takes_alpha, " or ", true));
  if (args.has("k") && row.parameter != TransformParameter::k)
    throw args.error(std::string("--k applies only to --fn ") + transform_names(takes_k, " or ", true));
  return Transform::of(kind, alpha, k);
}

std::vector<std::string> take_repeated(std::vector<std::string>& argv, const std::string& name, const char* command) {
  const std::string flag = "--" + name, prefix = flag + "=";
  std::vector<std::string> values, rest;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--") {  // the end of the options: the rest is positional
      rest.insert(rest.end(), argv.begin() + static_cast<std::ptrdiff_t>(i), argv.end());
      break;
    }
    if (argv[i] == flag) {
      if (i + 1 >= argv.size()) throw UsageError(std::string(command) + ": " + flag + " needs a value");
      values.push_back(argv[++i]);
    } else if (argv[i].rfind(prefix, 0) == 0) {
      values.push_back(argv[i].substr(prefix.size()));
    } else {
      rest.push_back(argv[i]);
    }
  }
  argv = rest;
  return values;
}

std::map<std::string, std::string> take_settings(std::vector<std::string>& argv, const char* command) {
  std::map<std::string, std::string> settings;
  for (const std::string& kv : take_repeated(argv, "set", command)) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(std::string(command) + ": --set expects key=value (got '" + kv + "')");
    const std::string key = kv.substr(0, eq);
    if (settings.count(key) != 0) throw UsageError(std::string(command) + ": --set " + key + " given twice");
    settings[key] = kv.substr(eq + 1);
  }
  return settings;
}

std::string predictor_method_list() {
  std::string list;
  for (const std::string& m : predictor_methods()) list += (list.empty() ? "" : ", ") + m;
  return list;
}

bool same_path(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec1, ec2;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a), ec1);
  const fs::path pb = fs::weakly_canonical(fs::absolute(b), ec2);
  return !ec1 && !ec2 && (pa / "").lexically_normal() == (pb / "").lexically_normal();
}

std::unique_ptr<Predictor> make_predictor_option(const Args& args, const std::string& method,
                                                 const PredictorSettings& settings, const char* method_option,
                                                 const char* settings_option) {
  const std::vector<std::string> methods = predictor_methods();
  if (std::find(methods.begin(), methods.end(), method) == methods.end())
    throw args.error(std::string(method_option) + ": unknown predictor method '" + method +
                     "' (known: " + predictor_method_list() + ")");
  try {
    return make_predictor(method, settings);
  } catch (const Error& e) {  // a setting typed on the command line: "<method>: setting 'k': ..."
    throw args.error(std::string(settings_option) + ": " + e.what());
  }
}

}  // namespace entgraph::cli
