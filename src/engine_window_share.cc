// The engine's count of a prefix shared across requests on sliding-window layer groups
// (engine.h; the definition is in docs/replay.md, "Sharing across requests").
//
// On a group of window W, a live request of t tokens keeps the positions from
// s = max(0, t - W) on, so of its prefix block k (positions kB..kB+B-1, held once it has
// t >= (k+1)B) it keeps kept(k) = clamp((k+1)B - s, 0, B): a suffix of the block. The
// requests holding one identity keep nested suffixes, so what they keep alike, counted
// once, is the largest; the positions counted more than once are, per identity, the sum of
// the holders' kept less the largest. That sum over identities is the group's
// counted_once. It is the engine's alone, from the requests' lengths and hashes.
#include <algorithm>

#include "engine.h"
#include "kvsim/units.h"

namespace kvsim::detail {

namespace {

std::int64_t kept(std::int64_t block, std::int64_t window_start, std::int64_t block_tokens) {
  return std::clamp<std::int64_t>((block + 1) * block_tokens - window_start, 0, block_tokens);
}

}  // namespace

void Engine::setup_window_shares() {
  group_window_.assign(groups_, -1);
  for (std::size_t g = 0; g < groups_; ++g) {
    const std::int64_t w = opt_.layout.groups[g].window_tokens;
    if (w <= 0) continue;
    const auto same = std::find_if(window_shares_.begin(), window_shares_.end(),
                                   [w](const WindowShare& ws) { return ws.window == w; });
    group_window_[g] = static_cast<int>(same - window_shares_.begin());
    if (same == window_shares_.end()) window_shares_.push_back(WindowShare{w, {}, {}, 0});
  }
  if (window_shares_.empty()) group_window_.clear();
}

std::int64_t Engine::counted_once_in_window(std::size_t group) const {
  const int w = group_window_[group];
  return w < 0 ? shared_prefix_blocks_ * prefix_block_ : window_shares_[static_cast<std::size_t>(w)].counted_once;
}

void Engine::hold_window_prefix(std::uint32_t slot, std::int64_t tokens) {
  const Flight& f = flights_[slot];
  const auto& hashes = prefix_of_[f.ticket];
  const std::int64_t b = prefix_block_;
  const std::int64_t held_now =
      std::min<std::int64_t>(static_cast<std::int64_t>(hashes.size()), std::min(tokens, f.prompt) / b);
  for (WindowShare& ws : window_shares_) {
    if (ws.at.size() <= slot) ws.at.resize(slot + 1, {0, 0});
    auto& [start, held] = ws.at[slot];
    const std::int64_t start_now = std::max<std::int64_t>(0, tokens - ws.window);
    // One holder's kept positions of block k go from `before` to `after`.
    const auto change = [&](std::int64_t k, std::int64_t before, std::int64_t after) {
      if (before == after) return;
      const std::uint64_t hash = hashes[static_cast<std::size_t>(k)];
      WindowKept& w = ws.by_hash[hash];
      const auto counted_twice = [&w] { return w.kept.empty() ? 0 : w.sum - *w.kept.rbegin(); };
      ws.counted_once -= counted_twice();
      if (before > 0) w.kept.erase(w.kept.find(before));
      if (after > 0) w.kept.insert(after);
      w.sum += after - before;
      ws.counted_once += counted_twice();
      if (w.kept.empty()) ws.by_hash.erase(hash);
    };
    if (start_now < start || held_now < held) {  // not a continuation: start over
      for (std::int64_t k = start / b; k < held; ++k) change(k, kept(k, start, b), 0);
      start = 0;
      held = 0;
    }
    // The blocks the window start moved over, then the blocks newly held.
    for (std::int64_t k = start / b; k < std::min(held, ceil_div(start_now, b)); ++k) {
      change(k, kept(k, start, b), kept(k, start_now, b));
    }
    for (std::int64_t k = std::max(held, start_now / b); k < held_now; ++k) change(k, 0, kept(k, start_now, b));
    start = start_now;
    held = held_now;
  }
}

void Engine::drop_window_prefix(std::uint32_t slot) {
  const Flight& f = flights_[slot];
  const auto& hashes = prefix_of_[f.ticket];
  const std::int64_t b = prefix_block_;
  for (WindowShare& ws : window_shares_) {
    if (ws.at.size() <= slot) continue;
    auto& [start, held] = ws.at[slot];
    for (std::int64_t k = start / b; k < held; ++k) {
      const std::int64_t before = kept(k, start, b);
      if (before == 0) continue;
      const std::uint64_t hash = hashes[static_cast<std::size_t>(k)];
      WindowKept& w = ws.by_hash[hash];
      ws.counted_once -= w.sum - *w.kept.rbegin();
      w.kept.erase(w.kept.find(before));
      w.sum -= before;
      if (w.kept.empty()) ws.by_hash.erase(hash);
      else ws.counted_once += w.sum - *w.kept.rbegin();
    }
    start = 0;
    held = 0;
  }
}

std::int64_t Engine::window_prefix_next(const Flight& f, std::int64_t tokens) const {
  // A decoding request's window start moves one position a step; over its prefix blocks
  // that changes what it keeps of them at every step, so it needs an event at every step
  // from the first (at W + 1 tokens) until the start has passed them (at held x B + W).
  const auto& hashes = prefix_of_[f.ticket];
  const std::int64_t held =
      std::min<std::int64_t>(static_cast<std::int64_t>(hashes.size()), std::min(tokens, f.prompt) / prefix_block_);
  std::int64_t next = Allocator::kNoEvent;
  if (held == 0) return next;
  for (const WindowShare& ws : window_shares_) {
    if (tokens - ws.window >= held * prefix_block_) continue;
    next = std::min(next, std::max(tokens + 1, ws.window + 1));
  }
  return next;
}

}  // namespace kvsim::detail
