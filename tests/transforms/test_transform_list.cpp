// The transform list (entgraph/transform_list.hpp) walked through the core
// and the C API: every row parses, names itself, maps to its C enum value
// and back, and runs the kernel its columns promise (an entmax row is α-entmax
// at its α, computed independently here in float64). The CLI's and the
// JavaScript package's walks: tests/cli/cli_test.sh (transform-list) and
// tests/wasm/transforms.test.mjs ("every transform of eg.transforms").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "entgraph/entgraph.h"
#include "support/cases.hpp"
#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

constexpr std::size_t kRows = std::size(kTransformInfos);

// α-entmax of one row in float64 by bisection on τ (the definition, not the
// library's solver): p_j = [(α-1) z_j - τ]_+^(1/(α-1)), softmax at α = 1.
std::vector<double> entmax_by_bisection(const std::vector<double>& z, double alpha) {
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  if (alpha == 1.0) {
    double sum = 0.0;
    for (std::size_t j = 0; j < z.size(); ++j) sum += (p[j] = std::exp(z[j] - zmax));
    for (double& x : p) x /= sum;
    return p;
  }
  const double a = alpha - 1.0;
  auto mass = [&](double tau) {
    double sum = 0.0;
    for (std::size_t j = 0; j < z.size(); ++j) sum += (p[j] = std::pow(std::max(0.0, a * z[j] - tau), 1.0 / a));
    return sum;
  };
  double lo = a * zmax - 1.0, hi = a * zmax;  // mass(lo) >= 1 >= mass(hi)
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (mass(mid) >= 1.0 ? lo : hi) = mid;
  }
  const double sum = mass(lo);
  for (double& x : p) x /= sum;
  return p;
}

// Softmax over the k largest (ties at the k-th kept).
std::vector<double> topk_by_definition(const std::vector<double>& z, std::size_t k) {
  std::vector<double> sorted(z);
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = sorted[std::min(k, z.size()) - 1];
  std::vector<double> p(z.size(), 0.0);
  double sum = 0.0;
  for (std::size_t j = 0; j < z.size(); ++j)
    if (z[j] >= kth) sum += (p[j] = std::exp(z[j] - sorted[0]));
  for (double& x : p) x /= sum;
  return p;
}

const std::vector<double> kScores = {0.3, -1.2, 2.0, 0.9, 1.7, -0.4, 0.0, 1.1};

}  // namespace

TEST_SUITE("transforms") {

TEST_CASE("transform list: rows are in TransformKind order, with unique names and C values 0..N-1") {
  std::set<std::string> names;
  std::set<int> c_values;
  for (std::size_t i = 0; i < kRows; ++i) {
    const TransformInfo& row = kTransformInfos[i];
    CAPTURE(row.name);
    CHECK(static_cast<std::size_t>(row.kind) == i);
    CHECK(&transform_info(row.kind) == &row);
    CHECK(std::string(row.backward_name) == std::string(row.name) + "_backward");
    CHECK(names.insert(row.name).second);
    if (row.alias[0] != '\0') CHECK(names.insert(row.alias).second);
    CHECK(c_values.insert(row.c_value).second);
    CHECK(row.alpha >= 1.0);
    if (row.parameter == TransformParameter::alpha) CHECK(row.family == TransformFamily::entmax);
  }
  CHECK(*c_values.begin() == 0);
  CHECK(*c_values.rbegin() == static_cast<int>(kRows) - 1);
  CHECK(find_transform_info(static_cast<TransformKind>(kRows)) == nullptr);
  CHECK_THROWS_WITH_AS(transform_info(static_cast<TransformKind>(kRows)), doctest::Contains("is not a transform"),
                       Error);
}

TEST_CASE("transform list: every row through the core (parse, name, α, kernel)") {
  for (const TransformInfo& row : kTransformInfos) {
    CAPTURE(row.name);
    CHECK(parse_transform_kind(row.name) == row.kind);
    CHECK(parse_transform_kind(row.shown_name()) == row.kind);
    const Transform t = Transform::of(row.kind, 1.25, 3);
    CHECK(t.kind == row.kind);
    CHECK(t.alpha == (row.parameter == TransformParameter::alpha ? 1.25 : row.alpha));
    CHECK(t.k == (row.parameter == TransformParameter::k ? 3u : 0u));
    CHECK(t.name().rfind(row.name, 0) == 0);
    // The list's parameter names appear in the name exactly when the kind takes one.
    CHECK((t.name().find("alpha=") != std::string::npos) == (row.parameter == TransformParameter::alpha));
    CHECK((t.name().find("k=") != std::string::npos) == (row.parameter == TransformParameter::k));

    const Matrix<double> z = row_matrix<double>(kScores);
    Matrix<double> p(1, kScores.size(), -1.0);
    if (row.extra_inputs()) {
      CHECK_THROWS_WITH_AS(transform_forward<double>(t, z.view(), p.view()), doctest::Contains("needs extra inputs"),
                           Error);
      CHECK_THROWS_AS(t.tsallis_alpha(), Error);
      continue;
    }
    transform_forward<double>(t, z.view(), p.view());
    const std::vector<double> expected = row.family == TransformFamily::entmax
                                             ? entmax_by_bisection(kScores, t.tsallis_alpha())
                                             : topk_by_definition(kScores, t.k);
    for (std::size_t j = 0; j < kScores.size(); ++j) CHECK(p(0, j) == doctest::Approx(expected[j]).epsilon(1e-9));
  }
}

TEST_CASE("transform list: every row through the C API (parse, enum value, forward)") {
  for (const TransformInfo& row : kTransformInfos) {
    CAPTURE(row.name);
    eg_transform c{};
    REQUIRE(eg_transform_parse(row.shown_name(), &c) == EG_OK);
    CHECK(static_cast<int>(c.kind) == row.c_value);
    CHECK(c.alpha == row.alpha);
    CHECK(c.k == 0u);
    if (row.extra_inputs()) continue;
    if (row.parameter == TransformParameter::alpha) c.alpha = 1.25;
    if (row.parameter == TransformParameter::k) c.k = 3;

    std::vector<float> z(kScores.begin(), kScores.end()), p(z.size(), -1.0f), ref(z.size(), -1.0f);
    const eg_const_matrix scores{z.data(), 1, z.size(), z.size()};
    const eg_matrix probs{p.data(), 1, p.size(), p.size()};
    REQUIRE(eg_transform_forward(EG_DEVICE_CPU, &c, scores, probs, nullptr) == EG_OK);
    transform_forward<float>(Transform::of(row.kind, c.alpha, c.k), {z.data(), 1, z.size()},
                             {ref.data(), 1, ref.size()});
    CHECK(p == ref);
  }
  eg_transform bad{static_cast<eg_transform_kind>(kRows), 1.5, 0};
  float z = 0.0f, p = 0.0f;
  CHECK(eg_transform_forward(EG_DEVICE_CPU, &bad, {&z, 1, 1, 1}, {&p, 1, 1, 1}, nullptr) == EG_ERROR_ARGUMENT);
  CHECK(std::string(eg_last_error()).find("0 to " + std::to_string(kRows - 1)) != std::string::npos);
}

TEST_CASE("transform list: the test cases cover every row, with the row's parameter") {
  for (const TransformInfo& row : kTransformInfos) {
    CAPTURE(row.name);
    bool covered = false;
    for (const cases::TransformCase& c : cases::transform_cases()) {
      if (c.kind != row.kind) continue;
      covered = true;
      const Transform t = c.transform(64);
      CHECK(t.kind == row.kind);
      CHECK(c.extra_inputs() == row.extra_inputs());
      if (row.parameter == TransformParameter::none) CHECK(t.alpha == row.alpha);
    }
    CHECK(covered);
  }
}

TEST_CASE("transform list: the names messages list come from the rows") {
  CHECK(transform_names(nullptr, " or ", true) ==
        "softmax, sparsemax, entmax15, entmax, topk, adaptive_span, constrained_softmax or constrained_sparsemax");
  CHECK(transform_names(takes_scores_only, " or ") == "softmax, sparsemax, entmax15, entmax or topk_softmax");
  CHECK(transform_names(is_entmax_family, ", ") == "softmax, sparsemax, entmax15, entmax");
  CHECK_THROWS_WITH_AS(parse_transform_kind("entmax13"),
                       "parse_transform_kind: unknown transform (got 'entmax13', expected softmax, sparsemax, "
                       "entmax15, entmax, topk, adaptive_span, constrained_softmax or constrained_sparsemax)",
                       Error);
}

}  // TEST_SUITE
