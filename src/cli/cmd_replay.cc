// Placeholder until the command lands.
#include "cli.h"
#include "kvsim/error.h"

namespace kvsim::cli {

int run_replay(const Invocation& inv) {
  (void)inv;
  throw InputError("'replay' is not built yet");
}

}  // namespace kvsim::cli
