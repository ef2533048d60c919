// Placeholder until the command lands.
#include "cli.h"
#include "kvsim/error.h"

namespace kvsim::cli {

int run_trace(const Invocation& inv) {
  (void)inv;
  throw InputError("'trace' is not built yet");
}

}  // namespace kvsim::cli
