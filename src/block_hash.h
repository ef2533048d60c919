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

// The identity of a trace's given block i from the identity of block i - 1 and the given
// hash: a chain, so that two prompts' identities agree up to block i exactly when their given
// hashes agree up to block i (up to a 64-bit collision). Hashes that already identify the
// whole prefix (Mooncake's hash_ids, kvsim's own) keep their equalities; hashes of a block's
// contents alone (the same block after different prefixes gets the same hash) do not make
// blocks after different prefixes look alike.
inline std::uint64_t chain_given_hash(std::uint64_t previous, std::uint64_t given) {
  return splitmix64(previous ^ splitmix64(given));
}

// The identity of a full block the trace does not identify: a generated block, or a prompt
// block past the given hashes (none at all for a trace without identity). vLLM hashes every
// full block of a request from its token ids, the generated ones included, each chained from
// its parent (vllm/v1/request.py append_output_token_ids extends request.block_hashes through
// kv_cache_utils.py's request block hasher, which hashes only full blocks, parent hash plus
// the block's tokens). Nothing says such a block's tokens are another request's, so its
// identity is one that only this request (this sample, for n > 1) can produce: the parent's
// identity (0 for block 0) mixed with the request's key, the sample and the block's index.
inline std::uint64_t own_block_hash(std::uint64_t parent, std::uint64_t request_key, std::uint64_t sample,
                                    std::int64_t block) {
  const std::uint64_t who = splitmix64(splitmix64(request_key ^ 0x6f776e20626c6f63ULL) + sample);
  return splitmix64(parent ^ splitmix64(who + static_cast<std::uint64_t>(block) + 1));
}

// A converted identity's mix of block k's place (rehash_prefix below): it names the given size
// too, since hashes given at 16 and at 32 tokens name different spans, so equal values prove
// nothing shared (k < 2^40, H < 2^24).
inline std::uint64_t place_mix(std::int64_t given_block, std::int64_t k) {
  return splitmix64((static_cast<std::uint64_t>(given_block) << 40) ^ (static_cast<std::uint64_t>(k) + 1));
}

// A prompt's prefix identity at `block` tokens per block, from hashes given at `given_block`
// tokens per block (the trace's), appended to `out`. Block k ([k x block, (k + 1) x block))
// lies within the first i + 1 given blocks for i = floor(((k + 1) x block - 1) / given_block),
// and two prompts whose given hashes agree up to i hold the same tokens up to there; so block
// k has an identity iff it is a full block of the prompt and i < given.size(): the chain of
// the given hashes 0..i (chain_given_hash) when the sizes are equal, else that chain mixed
// with k and given_block (splitmix64(chain ^ place_mix(given_block, k))).
// Never claims sharing the given hashes do not prove; misses what lies past the last given
// hash (a given block size that is a multiple of `block` loses only the prompt's last
// partial given block).
//
// A replay rehashes every prompt, so a PrefixRehasher walks the given hashes once, each
// block taking the chain of the given block it ends in, and keeps each block's place_mix
// from one prompt to the next (it depends on the given block size and k alone, and a trace
// gives every prompt's hashes at one size): a converted identity costs one splitmix64.
// REQUIRES: given_block >= 1, block >= 1.
class PrefixRehasher {
 public:
  void rehash(const std::vector<std::uint64_t>& given, std::int64_t given_block, std::int64_t prompt,
              std::int64_t block, std::vector<std::uint64_t>& out) {
    if (given_block != given_block_) {
      given_block_ = given_block;
      place_mix_.clear();
    }
    const std::int64_t blocks = prompt / block;  // the prompt's full blocks
    const std::int64_t span = blocks * block;    // and their tokens
    // Given block i ends at (i + 1) x given_block: from i + 1 = ceil(span / given_block) on,
    // at or past the full blocks' end; before that, below it (the product does not overflow).
    const std::int64_t past_end = span / given_block + (span % given_block != 0 ? 1 : 0);
    const auto given_count = static_cast<std::int64_t>(given.size());
    std::uint64_t chain = 0;
    std::int64_t k = 0;
    for (std::int64_t i = 0; i < given_count && k < blocks; ++i) {
      chain = chain_given_hash(chain, given[static_cast<std::size_t>(i)]);
      // The blocks that end within given block i, (k + 1) x block <= (i + 1) x given_block
      // (the ones before ended within an earlier one), take the chain up to i.
      const std::int64_t end = i + 1 >= past_end ? blocks : (i + 1) * given_block / block;
      if (given_block == block) {
        for (; k < end; ++k) out.push_back(chain);
        continue;
      }
      while (static_cast<std::int64_t>(place_mix_.size()) < end) {
        place_mix_.push_back(place_mix(given_block, static_cast<std::int64_t>(place_mix_.size())));
      }
      const std::uint64_t* const mix = place_mix_.data();
      for (; k < end; ++k) out.push_back(splitmix64(chain ^ mix[k]));
    }
  }

 private:
  std::int64_t given_block_ = 0;
  std::vector<std::uint64_t> place_mix_;  // by k, for given_block_
};

// One prompt's identities, as PrefixRehasher gives them.
inline void rehash_prefix(const std::vector<std::uint64_t>& given, std::int64_t given_block, std::int64_t prompt,
                          std::int64_t block, std::vector<std::uint64_t>& out) {
  PrefixRehasher().rehash(given, given_block, prompt, block, out);
}

}  // namespace kvsim::detail

#endif  // KVSIM_SRC_BLOCK_HASH_H_
