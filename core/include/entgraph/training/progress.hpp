// entgraph: a small progress bar on stderr for long fits.
//
//   ProgressBar bar("sparsefinder-kmeans: fit", layers * heads, options.quiet);
//   ... bar.advance();   // from any thread
//   bar.finish();        // also done by the destructor
//
// It draws "label [#####     ] 12/16 75.0% 3.2/s ETA 1s" on one line of
// stderr, redrawn at most ten times a second, and prints nothing at all when
// quiet is set or stderr is not a terminal (isatty), so logs and tests stay clean.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace entgraph {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::size_t total, bool quiet);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Marks n more items done (thread-safe).
  void advance(std::size_t n = 1);
  // Draws the final state and ends the line (once; later calls do nothing).
  void finish();
  // Whether it draws anything (not quiet and stderr is a terminal).
  bool enabled() const { return enabled_; }
  std::size_t done() const { return done_.load(); }

  // The line drawn for done of total items after elapsed seconds (no "\r");
  // exposed for tests.
  static std::string format(const std::string& label, std::size_t done, std::size_t total, double elapsed_seconds);

 private:
  void draw(bool final_line);

  std::string label_;
  std::size_t total_;
  bool enabled_;
  bool finished_ = false;
  std::atomic<std::size_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace entgraph
