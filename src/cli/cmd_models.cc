// Placeholder until the command lands.
#include "cli.h"
#include "kvsim/error.h"

namespace kvsim::cli {

int run_models(const Invocation& inv) {
  (void)inv;
  throw InputError("'models' is not built yet");
}

}  // namespace kvsim::cli
