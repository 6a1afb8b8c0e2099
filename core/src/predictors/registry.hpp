// entgraph internal: how predictor methods are created and reloaded, and the
// settings reader they share.
//
// Each family of methods owns one table of factories (fixed patterns,
// Reformer and routing in pattern_factories(), Sparsefinder in
// sparsefinder.cpp, score estimates in lowrank_threshold.cpp);
// predictor.cpp concatenates them. A static library would drop
// self-registering objects, hence explicit tables.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "io/json_strict.hpp"

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

// window, global, longformer, bigbird (predictors/fixed_patterns.cpp), then
// reformer_factory() and routing_factory().
const std::vector<PredictorFactory>& pattern_factories();
PredictorFactory reformer_factory();  // predictors/reformer.cpp
PredictorFactory routing_factory();   // predictors/routing.cpp
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

// The "seed" setting of a randomised method: an integer in [0, LONG_MAX],
// default 0.
inline std::uint64_t read_seed(SettingsReader& reader) {
  return static_cast<std::uint64_t>(reader.integer("seed", 0, 0, LONG_MAX));
}

// The points a clustering method fits on per head: the queries and the keys
// of every sequence.
inline std::size_t cluster_points(const Capture& capture) { return 2 * capture.tokens(); }

// Throws unless clusters <= cluster_points(capture): more centroids than
// points cannot all hold one, and k-means' cost grows with k^2.
inline void check_clusters(const std::string& method, std::size_t clusters, const Capture& capture) {
  const std::size_t points = cluster_points(capture);
  if (clusters > points)
    throw Error(method + ": fit: setting 'clusters' = " + std::to_string(clusters) + " is more than the " +
                std::to_string(points) + " points (queries and keys, " + std::to_string(capture.tokens()) +
                " tokens) of each head of this capture; use clusters <= " + std::to_string(points));
}

// The tags of the methods' random streams (runtime/random.hpp's keyed_seed),
// one per method so that no two methods share a stream.
enum : std::uint64_t { kStreamBigBird = 1, kStreamReformer = 2, kStreamRouting = 3 };

// Factory functions of a method P constructed from its settings alone.
template <class P>
std::unique_ptr<Predictor> create_method(const PredictorSettings& settings) {
  return std::make_unique<P>(settings);
}

// load for a method that learns nothing: its "parameters" must be {}.
template <class P>
std::unique_ptr<Predictor> load_unlearned(const PredictorSettings& settings, const nlohmann::json& parameters) {
  auto p = std::make_unique<P>(settings);
  if (!parameters.empty())
    throw Error(p->method() + ": parameters: expected an empty object (the method learns nothing), got " +
                json_excerpt(parameters));
  return p;
}

}  // namespace entgraph::detail
