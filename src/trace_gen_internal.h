// Pieces of the generator shared by its option parser and its sampler.
#ifndef KVSIM_SRC_TRACE_GEN_INTERNAL_H_
#define KVSIM_SRC_TRACE_GEN_INTERNAL_H_

#include <string>

namespace kvsim::detail {

// The lognormal with this mean and 99th percentile (see kvsim/trace_gen.h for the
// formula). False when there is none: mean <= 0, p99 <= mean, or p99 / mean >= e^(z^2/2).
bool lognormal_from_mean_p99(double mean, double p99, double& mu, double& sigma);

// 1155.5 -> "1155.5", 3.0 -> "3": a double as a short decimal for messages.
std::string plain_number(double v);

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_TRACE_GEN_INTERNAL_H_
