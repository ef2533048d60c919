// The JSON Lines readers: kvsim's native JSONL, Mooncake, and traces with token ids.
//
// One JSON object per line. Records are parsed with nlohmann::json's SAX interface rather
// than into a DOM: it hands over the text of every decimal number, so "arrival": 3217.9951690
// becomes exactly 3,217,995,169,000 ns (a DOM would have rounded it through a double), and
// long arrays (hash ids, token ids) are consumed element by element without being stored.
#include "block_hash.h"
#include "kvsim/units.h"
#include "trace_formats.h"
#include "trace_jsonl.h"
#include "trace_native.h"
#include "trace_read.h"

namespace kvsim::detail {
namespace {

// ---------------------------------------------------------------------------------------
// kvsim's native JSONL: the same names as the native CSV; numbers for times and counts,
// strings (or integers) for id and session, an array of integers for prefix_hashes, and
// null for an absent optional value.

using F = NativeField;

std::vector<JsonlReader::Key> native_keys() {
  std::vector<JsonlReader::Key> keys;
  for (auto name : kNativeFieldNames) keys.push_back({name, name == "prefix_hashes"});
  return keys;
}

class NativeJsonlReader final : public JsonlReader {
 public:
  NativeJsonlReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::native_jsonl, native_keys(), true) {}

 private:
  static int slot(F f) { return static_cast<int>(f); }

  bool on_array_value(int, std::uint64_t value) override {
    current_->prefix_hashes.push_back(value);
    return true;
  }

  bool optional_count(F f, std::optional<std::int64_t>& out) {
    if (!present(slot(f))) return true;
    std::int64_t v = 0;
    if (!get_count(slot(f), v)) return false;
    out = v;
    return true;
  }
  bool optional_time(F f, std::optional<std::int64_t>& out) {
    if (!present(slot(f))) return true;
    std::int64_t v = 0;
    if (!get_time(slot(f), 9, v)) return false;
    out = v;
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    current_ = &out;
    if (!parse_record(line)) return Row::bad;
    for (F required : {F::id, F::arrival, F::prompt_tokens, F::output_tokens}) {
      if (!present(slot(required))) return missing(slot(required));
    }
    if (!get_name(slot(F::id), out.id)) return Row::bad;
    if (out.id.empty()) return fail(label("id"), "expected a request id, got an empty string");
    if (!get_time(slot(F::arrival), 9, out.arrival_ns)) return Row::bad;
    if (!get_count(slot(F::prompt_tokens), out.prompt_tokens)) return Row::bad;
    if (!get_count(slot(F::output_tokens), out.output_tokens)) return Row::bad;
    if (!optional_count(F::max_tokens, out.max_tokens)) return Row::bad;
    if (!optional_time(F::cancel_at, out.cancel_ns)) return Row::bad;
    if (present(slot(F::cancel_after))) {
      if (out.cancel_ns) return fail(label("cancel_after"), "give cancel_at or cancel_after, not both");
      std::int64_t after = 0;
      if (!get_time(slot(F::cancel_after), 9, after)) return Row::bad;
      std::int64_t at = 0;
      if (__builtin_add_overflow(out.arrival_ns, after, &at)) {
        return fail(label("cancel_after"), "arrival + cancel_after does not fit in 64-bit nanoseconds");
      }
      out.cancel_ns = at;
    }
    if (present(slot(F::n))) {
      if (!get_count(slot(F::n), out.n)) return Row::bad;
      if (out.n < 1) return fail(label("n"), "expected at least 1 parallel sample, got 0");
    }
    if (present(slot(F::session)) && !get_name(slot(F::session), out.session)) return Row::bad;
    if (!optional_time(F::start, out.start_ns)) return Row::bad;
    if (!optional_time(F::first_token, out.first_token_ns)) return Row::bad;
    if (!optional_time(F::finish, out.finish_ns)) return Row::bad;
    if (present(slot(F::prefix_block_tokens))) {
      if (!get_count(slot(F::prefix_block_tokens), out.prefix_block_tokens)) return Row::bad;
      if (out.prefix_block_tokens < 1) return fail(label("prefix_block_tokens"), "expected at least 1 token per block, got 0");
    }
    if (present(slot(F::prefix_hashes)) && value(slot(F::prefix_hashes)).kind != JsonValue::Kind::array) {
      return fail(label("prefix_hashes"), "expected an array of non-negative integers, got " +
                                              describe(value(slot(F::prefix_hashes))));
    }
    return Row::ok;
  }

  Request* current_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// Mooncake (FAST'25 release): {"timestamp": ms, "input_length", "output_length",
// "hash_ids": [...]}, hash ids at 512 tokens per block with the last block usually
// partial: ceil(input_length / 512) of them, checked. Records carry no id: a request's id
// is its record number, from 1. Any other key is refused (a misspelt "hash_ids" would
// otherwise drop the identity without a word).

constexpr std::int64_t kMooncakeBlockTokens = 512;

class MooncakeReader final : public JsonlReader {
 public:
  MooncakeReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::mooncake,
                    {{"timestamp"}, {"input_length"}, {"output_length"}, {"hash_ids", true}}, true) {
    message_names_.arrival = "timestamp";
    message_names_.prompt = "input_length";
    message_names_.output = "output_length";
    message_names_.prefix_hashes = "hash_ids";
  }

 private:
  enum Slot { kTimestamp, kInput, kOutput, kHashes };

  bool on_array_value(int, std::uint64_t value) override {
    current_->prefix_hashes.push_back(value);
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    ++record_;
    current_ = &out;
    if (!parse_record(line)) return Row::bad;
    for (int required : {kTimestamp, kInput, kOutput}) {
      if (!present(required)) return missing(required);
    }
    out.id.assign(std::to_string(record_));
    if (!get_time(kTimestamp, 6, out.arrival_ns)) return Row::bad;
    if (!get_count(kInput, out.prompt_tokens)) return Row::bad;
    if (!get_count(kOutput, out.output_tokens)) return Row::bad;
    if (present(kHashes)) {
      if (value(kHashes).kind != JsonValue::Kind::array) {
        return fail(label("hash_ids"), "expected an array of non-negative integers, got " + describe(value(kHashes)));
      }
      out.prefix_block_tokens = kMooncakeBlockTokens;
      // One id per block of the prompt, the last one partial: fewer would silently hide the
      // identity of the blocks left out.
      const std::int64_t blocks = ceil_div(out.prompt_tokens, kMooncakeBlockTokens);
      if (static_cast<std::int64_t>(out.prefix_hashes.size()) != blocks) {
        return fail(label("hash_ids"), std::to_string(out.prefix_hashes.size()) + (out.prefix_hashes.size() == 1 ? " id" : " ids") + ", but an input_length of " +
                                           std::to_string(out.prompt_tokens) + " tokens has " + std::to_string(blocks) +
                                           " blocks of 512 (Mooncake gives one id per block, the last one partial)");
      }
    }
    return Row::ok;
  }

  Request* current_ = nullptr;
  std::int64_t record_ = 0;
};

// ---------------------------------------------------------------------------------------
// Traces that carry token ids (LLMServingSim's workloads): {"input_toks", "output_toks",
// "arrival_time_ns", "input_tok_ids": [...]}, optionally "session_id". Prefix hashes are
// computed from input_tok_ids at TraceOptions::hash_block_tokens (see block_hash.h: full
// blocks only, chained). A request's id is its record number, from 1.

class TokenIdsReader final : public JsonlReader {
 public:
  TokenIdsReader(const std::string& path, const TraceOptions& options)
      : JsonlReader(path, options, TraceFormat::token_ids,
                    {{"input_toks"}, {"output_toks"}, {"arrival_time_ns"}, {"input_tok_ids", true}, {"session_id"}},
                    false) {
    if (options.hash_block_tokens < 1) fail_file(0, "the block size for hashing token ids must be at least 1");
    message_names_.arrival = "arrival_time_ns";
    message_names_.prompt = "input_toks";
    message_names_.output = "output_toks";
    message_names_.prefix_hashes = "input_tok_ids";
  }

 private:
  enum Slot { kInput, kOutput, kArrival, kTokenIds, kSession };

  bool on_array_value(int, std::uint64_t value) override {
    ++token_count_;
    hasher_.add(value);
    return true;
  }

  Row parse_line(std::string_view line, Request& out) override {
    ++record_;
    token_count_ = 0;
    hasher_ = BlockHasher(options_.hash_block_tokens, &out.prefix_hashes);
    if (!parse_record(line)) return Row::bad;
    for (int required : {kOutput, kArrival}) {
      if (!present(required)) return missing(required);
    }
    out.id.assign(std::to_string(record_));
    if (!get_time(kArrival, 0, out.arrival_ns)) return Row::bad;
    if (!get_count(kOutput, out.output_tokens)) return Row::bad;
    const bool have_ids = present(kTokenIds);
    if (have_ids && value(kTokenIds).kind != JsonValue::Kind::array) {
      return fail(label("input_tok_ids"), "expected an array of token ids, got " + describe(value(kTokenIds)));
    }
    if (present(kInput)) {
      if (!get_count(kInput, out.prompt_tokens)) return Row::bad;
      if (have_ids && out.prompt_tokens != token_count_) {
        return fail(label("input_toks"), std::to_string(out.prompt_tokens) + " tokens, but input_tok_ids has " +
                                             std::to_string(token_count_));
      }
    } else if (have_ids) {
      out.prompt_tokens = token_count_;
    } else {
      return missing(kInput);
    }
    if (have_ids) out.prefix_block_tokens = options_.hash_block_tokens;
    if (present(kSession) && !get_name(kSession, out.session)) return Row::bad;
    return Row::ok;
  }

  BlockHasher hasher_{1, nullptr};
  std::int64_t token_count_ = 0;
  std::int64_t record_ = 0;
};

bool token_id_fields(const FirstRecord& first) {
  return record_has(first, "input_tok_ids") || record_has(first, "input_toks") || record_has(first, "arrival_time_ns");
}

}  // namespace

// The fallback of JSONL detection.
extern constinit const TraceFormatInfo kNativeJsonlFormat{
    TraceFormat::native_jsonl, "native-jsonl", TraceSyntax::jsonl, true, "native JSONL (the same fields)",
    [](const FirstRecord& first) { return record_has(first, "arrival") || record_has(first, "prompt_tokens"); },
    make_reader<NativeJsonlReader>};

// A record with token-id fields is a token-id record even when it has Mooncake's too.
extern constinit const TraceFormatInfo kMooncakeFormat{
    TraceFormat::mooncake, "mooncake", TraceSyntax::jsonl, false,
    "Mooncake JSONL (timestamp,input_length,output_length,hash_ids)",
    [](const FirstRecord& first) {
      return (record_has(first, "hash_ids") || record_has(first, "input_length")) && !token_id_fields(first);
    },
    make_reader<MooncakeReader>};

extern constinit const TraceFormatInfo kTokenIdsFormat{
    TraceFormat::token_ids, "token-ids", TraceSyntax::jsonl, false,
    "token-id JSONL (input_toks,output_toks,arrival_time_ns,input_tok_ids)", token_id_fields,
    make_reader<TokenIdsReader>};

}  // namespace kvsim::detail
