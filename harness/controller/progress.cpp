// Suite progress on stderr. See progress.h.
#include "harness/controller/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace nanchaos::harness {

std::string format_elapsed(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  const auto total = static_cast<long long>(seconds);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m{:02}s", total / 3600, (total / 60) % 60, total % 60);
}

Progress::Progress(size_t total, bool enabled, std::FILE* out, int tty)
    : total_(total), enabled_(enabled), out_(out) {
  tty_ = tty >= 0 ? tty != 0 : (out_ && isatty(fileno(out_)));
  suite_start_ = std::chrono::steady_clock::now();
  if (enabled_ && tty_) {
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, std::chrono::seconds(1));
        if (!stop_ && !running_.empty()) draw_locked();
      }
    });
  }
}

Progress::~Progress() { done(); }

void Progress::done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    running_.clear();
    if (enabled_) erase_locked();
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void Progress::start(size_t index, const std::string& name, int trial, int trials) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, first] = running_.try_emplace(index);
  if (first) it->second.start = std::chrono::steady_clock::now();
  it->second.name = name;
  it->second.trial = trial;
  it->second.trials = trials;
  if (enabled_ && tty_) draw_locked();
}

void Progress::finish(size_t index, const results::ScenarioResult& r) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = running_.find(index);
  const auto start = it == running_.end() ? std::chrono::steady_clock::now() : it->second.start;
  if (it != running_.end()) running_.erase(it);
  if (!enabled_) return;
  erase_locked();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string line = fmt::format("[{}/{}] {:<7} {}  {}", index + 1, total_, to_string(r.verdict),
                                 r.name, format_elapsed(secs));
  if (r.trial_count > 1 && r.stats.is_object()) {
    line += fmt::format("  ({}/{} trials passed)", r.stats.value("passed", 0), r.trial_count);
  }
  std::fprintf(out_, "%s\n", line.c_str());
  if (tty_ && !running_.empty()) draw_locked();  // the others still run
  std::fflush(out_);
}

void Progress::draw_locked() {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - suite_start_).count();
  const auto whole = static_cast<long long>(secs);
  std::string line;
  if (running_.size() == 1) {
    const auto& [index, r] = *running_.begin();
    line = fmt::format("scenario {} of {}", index + 1, total_);
    if (r.trials > 1) line += fmt::format(" · trial {}/{}", r.trial + 1, r.trials);
    line += fmt::format(" · elapsed {}m{:02}s · {}", whole / 60, whole % 60, r.name);
  } else {
    std::string numbers, names;
    for (const auto& [index, r] : running_) {
      numbers += fmt::format("{}{}", numbers.empty() ? "" : ", ", index + 1);
      names += (names.empty() ? "" : ", ") + r.name;
    }
    line = fmt::format("scenarios {} of {} · elapsed {}m{:02}s · {}", numbers, total_, whole / 60,
                       whole % 60, names);
  }
  // \r, then the line, then clear to the end of the terminal line (a shorter redraw).
  std::fprintf(out_, "\r%s\033[K", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void Progress::erase_locked() {
  if (!tty_ || !drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace nanchaos::harness
