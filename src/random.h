// Seeded randomness that gives the same numbers on every platform.
//
// The generator promises byte-identical traces for the same options and seed, on any
// compiler and standard library. std::*_distribution does not (each library picks its own
// algorithm), and std::log / std::exp are not required to round the same way everywhere.
// So everything here is spelled out: xoshiro256** for the bits, and distributions built
// only from +, -, *, /, std::sqrt (all correctly rounded by IEEE 754) and the series in
// det_log / det_exp below. This file is compiled with -ffp-contract=off so that no
// compiler fuses a multiply and an add differently on another machine.
#ifndef KVSIM_SRC_RANDOM_H_
#define KVSIM_SRC_RANDOM_H_

#include <cstdint>

namespace kvsim::detail {

// One step of splitmix64: a bijective 64-bit mixer, used to seed and to hash. Inline: the
// prefix hashes of a trace call it several times per block (block_hash.h).
inline std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna, 2018). Different `stream` values give independent
// sequences for the same seed, so that, e.g., adding a cancellation model to a generator
// does not change the arrival times it draws.
class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream);

  std::uint64_t next_u64();
  // Uniform in [0, 1), 53 random bits.
  double uniform01();
  // Uniform integer in [low, high], unbiased (rejection). REQUIRES: low <= high.
  std::int64_t uniform_int(std::int64_t low, std::int64_t high);
  // True with probability parts_per_billion / 1e9, decided with integers only.
  bool bernoulli_ppb(std::int64_t parts_per_billion);
  // Exponential with mean 1.
  double exponential();
  // Standard normal (Marsaglia's polar method: no trigonometry).
  double normal();
  // Gamma with the given shape and scale 1 (Marsaglia and Tsang, 2000). REQUIRES: shape > 0.
  double gamma(double shape);

 private:
  std::uint64_t s_[4];
};

// Natural logarithm and exponential computed from basic operations only, accurate to a
// few ulps and identical on every IEEE 754 machine. REQUIRES: det_log's x > 0.
double det_log(double x);
double det_exp(double x);

// x rounded to the nearest integer (halves away from zero), clamped to int64's range.
std::int64_t round_to_int64(double x);

// The stream that arrival processes draw from. The length-only importer and the
// generator's Poisson arrivals share it, so `--rate R --seed S` gives the same arrival
// times in both.
inline constexpr std::uint64_t kArrivalStream = 0xA771'7A15;

// Gap to the next arrival of a Poisson process with `rate_per_s`, in whole nanoseconds
// (at least 0). REQUIRES: rate_per_s > 0.
std::int64_t poisson_gap_ns(Rng& rng, double rate_per_s);

// The standard normal quantile at 0.99, to the precision a double holds.
inline constexpr double kNormalZ99 = 2.3263478740408408;

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_RANDOM_H_
