// entgraph internal: how predictor methods are created and reloaded, and the
// settings reader they share.
//
// Each family of methods owns one table of factories (fixed patterns and
// hashing/clustering in patterns.cpp, Sparsefinder in sparsefinder.cpp,
// score estimates in lowrank_threshold.cpp);
// predictor.cpp concatenates them. A static library would drop
// self-registering objects, hence explicit tables.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph::detail {

struct PredictorFactory {
  const char* method;
  std::unique_ptr<Predictor> (*create)(const PredictorSettings& settings);
  // Rebuilds a fitted predictor from its settings and its file's "parameters".
  std::unique_ptr<Predictor> (*load)(const PredictorSettings& settings, const nlohmann::json& parameters);
  // Settings read only by predict(): a fitted predictor takes new values of
  // these without refitting (Predictor::with_settings; sweeps fit once).
  std::vector<std::string> predict_settings = {};
};

const std::vector<PredictorFactory>& pattern_factories();  // predictors/patterns.cpp
const std::vector<PredictorFactory>& learned_factories();  // predictors/sparsefinder.cpp
const std::vector<PredictorFactory>& score_factories();    // predictors/lowrank_threshold.cpp

// What SettingsReader::finish() throws: a key no reader asked for.
class UnknownSettingError : public Error {
 public:
  using Error::Error;
};

// Reads typed values out of PredictorSettings; every key read is marked, and
// finish() throws for keys nobody read (a typo must not be ignored).
// Errors: "<method>: setting '<key>': <what>".
class SettingsReader {
 public:
  SettingsReader(std::string method, const PredictorSettings& settings);
  long integer(const std::string& key, long fallback, long min, long max);
  double number(const std::string& key, double fallback, double min, double max);
  std::string text(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed);
  void finish() const;

 private:
  const std::string* find(const std::string& key);
  std::string method_;
  const PredictorSettings& settings_;
  std::set<std::string> used_;
};

}  // namespace entgraph::detail
