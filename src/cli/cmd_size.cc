// Placeholder until the command lands.
#include "cli.h"
#include "kvsim/error.h"

namespace kvsim::cli {

int run_size(const Invocation& inv) {
  (void)inv;
  throw InputError("'size' is not built yet");
}

}  // namespace kvsim::cli
