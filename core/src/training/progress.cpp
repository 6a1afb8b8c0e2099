// entgraph: progress bar on stderr (see training/progress.hpp).
#include "entgraph/training/progress.hpp"

#include <cmath>
#include <algorithm>
#include <cstdio>

#if defined(_WIN32)
#include <io.h>
#define ENTGRAPH_ISATTY(fd) _isatty(fd)
#define ENTGRAPH_FILENO(f) _fileno(f)
#else
#include <unistd.h>
#define ENTGRAPH_ISATTY(fd) isatty(fd)
#define ENTGRAPH_FILENO(f) fileno(f)
#endif

namespace entgraph {

ProgressBar::ProgressBar(std::string label, std::size_t total, bool quiet)
    : label_(std::move(label)),
      total_(total),
      enabled_(!quiet && ENTGRAPH_ISATTY(ENTGRAPH_FILENO(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (enabled_) draw(false);
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(std::size_t n) {
  done_.fetch_add(n);
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (finished_ || now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  draw(true);
}

std::string ProgressBar::format(const std::string& label, std::size_t done, std::size_t total,
                                double elapsed_seconds) {
  constexpr int width = 24;
  const double fraction = total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), ' ');
  const double rate = elapsed_seconds > 0 ? static_cast<double>(done) / elapsed_seconds : 0.0;
  char tail[128];
  if (done > 0 && done < total && rate > 0) {
    const double eta = static_cast<double>(total - done) / rate;
    std::snprintf(tail, sizeof tail, " %zu/%zu %5.1f%% %.1f/s ETA %.0fs", done, total, 100.0 * fraction, rate, eta);
  } else {
    std::snprintf(tail, sizeof tail, " %zu/%zu %5.1f%% %.1f/s %.1fs", done, total, 100.0 * fraction, rate,
                  elapsed_seconds);
  }
  return label + " [" + bar + "]" + tail;
}

void ProgressBar::draw(bool final_line) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = format(label_, done_.load(), total_, elapsed);
  std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final_line ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace entgraph
