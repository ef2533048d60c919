#include "random.h"

#include <cmath>
#include <limits>

namespace kvsim::detail {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// ln 2 split so that k * kLn2Hi is exact for the exponents a double can have (fdlibm's split).
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;

}  // namespace

Rng::Rng(std::uint64_t seed, std::uint64_t stream) {
  const std::uint64_t base = splitmix64(splitmix64(seed) ^ stream);
  for (int i = 0; i < 4; ++i) s_[i] = splitmix64(base + static_cast<std::uint64_t>(i) * kGolden);
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

std::int64_t Rng::uniform_int(std::int64_t low, std::int64_t high) {
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low) + 1;
  if (range == 0) return static_cast<std::int64_t>(next_u64());  // the whole int64 range
  // Reject the few values that would make `r % range` favour small results.
  const std::uint64_t threshold = (0 - range) % range;
  for (;;) {
    const std::uint64_t r = next_u64();
    if (r >= threshold) return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + r % range);
  }
}

bool Rng::bernoulli_ppb(std::int64_t parts_per_billion) {
  return uniform_int(0, 999'999'999) < parts_per_billion;
}

double Rng::exponential() { return -det_log(1.0 - uniform01()); }  // 1 - U is in (0, 1]

double Rng::normal() {
  for (;;) {
    const double u = 2.0 * uniform01() - 1.0;
    const double v = 2.0 * uniform01() - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    return u * std::sqrt(-2.0 * det_log(s) / s);
  }
}

double Rng::gamma(double shape) {
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia and Tsang's boost for a < 1).
    const double g = gamma(shape + 1.0);
    return g * det_exp(det_log(1.0 - uniform01()) / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0;
    double v = 0;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - uniform01();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v;
    if (det_log(u) < 0.5 * x2 + d * (1.0 - v + det_log(v))) return d * v;
  }
}

double det_log(double x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m + 1),
  // |s| <= 0.1716, so 13 terms of the odd series reach double precision.
  int e = 0;
  double m = std::frexp(x, &e);  // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) p = p * s2 + 1.0 / (2.0 * k + 1.0);
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (2.0 * s * p + de * kLn2Lo);
}

double det_exp(double x) {
  if (x > 709.78) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  // x = k ln 2 + r with |r| <= ln2 / 2; exp(r) by its Taylor series (16 terms suffice).
  const double k = static_cast<double>(round_to_int64(x / (kLn2Hi + kLn2Lo)));
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0;
  for (int n = 16; n >= 1; --n) p = 1.0 + p * r / n;
  return std::ldexp(p, static_cast<int>(k));
}

std::int64_t poisson_gap_ns(Rng& rng, double rate_per_s) {
  return round_to_int64(rng.exponential() * (1e9 / rate_per_s));
}

std::int64_t round_to_int64(double x) {
  constexpr double kLimit = 9.2e18;
  if (x >= kLimit) return std::numeric_limits<std::int64_t>::max();
  if (x <= -kLimit) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(x >= 0 ? x + 0.5 : x - 0.5);
}

}  // namespace kvsim::detail
