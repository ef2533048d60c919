// Prefix-block hashes computed from token ids.
//
// Block i's hash covers the hash of block i - 1 and the token ids of block i, so two
// prompts have equal hashes up to block i exactly when (up to a 64-bit collision) their
// first (i + 1) * block_tokens tokens are equal: the property a prefix cache keys on.
// Only full blocks are hashed; a prompt's partial last block gets no hash, as a paged
// prefix cache only shares full blocks. The hash is splitmix64 applied token by token
// (x = splitmix64(x ^ token), starting each block from the previous block's hash and the
// first from 0): fixed, documented, the same on every machine.
#ifndef KVSIM_SRC_BLOCK_HASH_H_
#define KVSIM_SRC_BLOCK_HASH_H_

#include <cstdint>
#include <vector>

#include "random.h"

namespace kvsim::detail {

class BlockHasher {
 public:
  // Appends one hash to `*out` per full block of `block_tokens` tokens. REQUIRES: block_tokens >= 1.
  BlockHasher(std::int64_t block_tokens, std::vector<std::uint64_t>* out) : block_tokens_(block_tokens), out_(out) {}

  void add(std::uint64_t token) {
    state_ = splitmix64(state_ ^ token);
    if (++in_block_ == block_tokens_) {
      out_->push_back(state_);
      in_block_ = 0;  // the next block starts from this block's hash: state_ carries on
    }
  }
  // Redirects the hashes of the following blocks (a copied hasher continues a prefix).
  void set_output(std::vector<std::uint64_t>* out) { out_ = out; }
  std::int64_t tokens_in_partial_block() const { return in_block_; }

 private:
  std::int64_t block_tokens_;
  std::vector<std::uint64_t>* out_;
  std::uint64_t state_ = 0;
  std::int64_t in_block_ = 0;
};

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BLOCK_HASH_H_
