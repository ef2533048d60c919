// A progress bar on stderr for people watching a terminal: `kvsim replay` over its runs,
// `kvsim sweep` over its points. Each run (or point) reports its own fraction done from its
// own thread; the bar shows their mean.
#ifndef KVSIM_SRC_CLI_PROGRESS_H_
#define KVSIM_SRC_CLI_PROGRESS_H_

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kvsim::cli {

class Progress {
 public:
  // `label` is the bar's first word ("replaying"); nothing is drawn unless `enabled`.
  Progress(std::size_t runs, bool enabled, std::string label = "replaying")
      : fractions_(runs), enabled_(enabled), label_(std::move(label)) {
    for (auto& f : fractions_) f.store(0);
  }
  std::function<void(double)> sink(std::size_t run) {
    if (!enabled_) return {};
    return [this, run](double f) { fractions_[run].store(f); };
  }
  void set(std::size_t run, double f) {
    if (enabled_) fractions_[run].store(f);
  }
  bool enabled() const { return enabled_; }
  void draw() const {
    if (!enabled_) return;
    double sum = 0;
    for (const auto& f : fractions_) sum += f.load();
    const double done = fractions_.empty() ? 1.0 : sum / static_cast<double>(fractions_.size());
    const int width = 40;
    const int filled = static_cast<int>(done * width);
    fmt::print(stderr, "\r{} [{}{}] {:3.0f}%", label_, std::string(static_cast<std::size_t>(filled), '#'),
               std::string(static_cast<std::size_t>(width - filled), ' '), done * 100);
    std::fflush(stderr);
  }
  void clear() const {
    if (enabled_) fmt::print(stderr, "\r{}\r", std::string(60, ' '));
  }

 private:
  std::vector<std::atomic<double>> fractions_;
  bool enabled_;
  std::string label_;
};

// Runs task(0) .. task(tasks - 1) on `jobs` threads (each task once, taken in order), drawing
// `progress` meanwhile; then rethrows the first error in task order, whichever thread met
// it first, so that the outcome does not depend on the number of threads.
inline void run_in_parallel(std::size_t tasks, std::size_t jobs, Progress& progress,
                            const std::function<void(std::size_t)>& task) {
  std::vector<std::exception_ptr> errors(tasks);
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> finished{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < tasks; i = next++) {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      ++finished;
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < jobs; ++t) threads.emplace_back(worker);
  // Only a progress bar needs this thread to wake up; otherwise it just waits.
  while (progress.enabled() && finished.load() < tasks) {
    progress.draw();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : threads) t.join();
  progress.clear();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_PROGRESS_H_
