// `kvsim sweep`: a grid of replays, each point "kvsim replay with these options overridden".
// This header holds what does not need a replay: the grid (its axes from --vary and a spec
// file, the order of its points), shards of it, the rows' leading columns, and the merge of
// part files back into the file the unsharded sweep writes.
//
// The grid is the cartesian product of its axes in the order they were given, the last one
// fastest; a point's index is its position in that order. Each output row starts with
// `point` (the index), `points` (the grid's size) and `grid` (a fingerprint of the sweep's
// options and axes), so that part files carry what a merge checks, as plain columns.
#ifndef KVSIM_SRC_CLI_SWEEP_H_
#define KVSIM_SRC_CLI_SWEEP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim::cli {

// One varied option: a replay option's long name and its values, in order.
struct SweepAxis {
  std::string name;                 // "kv-budget", as the option is declared
  std::vector<std::string> values;  // as given: "20GiB", "[paged:block=16,prefix-caching=on]" without brackets
  std::string file;                 // the spec file it came from, "" for --vary
  std::int64_t line = 0;            // its line there
};

// "NAME=V1,V2,...": values separated by commas; a value that holds commas itself goes in
// square brackets ("allocator=[paged,dynamic],paged"). Throws InputError naming --vary.
SweepAxis parse_vary(std::string_view text);

// A spec file: one axis a line, "NAME = V1, V2, ..." (values as --vary takes them, spaces
// around them ignored); '#' starts a comment; blank lines are skipped. Throws InputError
// naming the file and line.
std::vector<SweepAxis> read_sweep_spec(const std::string& path);

// The grid over `axes`: its size and the values of point p (one per axis).
class SweepGrid {
 public:
  // Throws InputError (field --vary) when the product exceeds kMaxPoints.
  explicit SweepGrid(std::vector<SweepAxis> axes);
  static constexpr std::int64_t kMaxPoints = 1'000'000;
  const std::vector<SweepAxis>& axes() const { return axes_; }
  std::int64_t points() const { return points_; }
  // The value of each axis at point `p`: the last axis varies fastest.
  std::vector<std::string> values_at(std::int64_t p) const;

 private:
  std::vector<SweepAxis> axes_;
  std::int64_t points_ = 1;
};

// --shard I/N: 1 <= I <= N; the shard runs the points p with p % N == I - 1.
struct Shard {
  std::int64_t index = 1;  // I, 1-based
  std::int64_t count = 1;  // N
  bool has(std::int64_t point) const { return point % count == index - 1; }
};
// Throws InputError naming --shard.
Shard parse_shard(std::string_view text);

// FNV-1a, 64 bits, over the bytes added: the grid's identity in its rows, and a trace's.
class Fingerprint {
 public:
  Fingerprint& add(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 0x100000001b3ULL;
    }
    return *this;
  }
  std::string hex() const;  // 16 hex digits

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};
// The fingerprint of `text`.
std::string grid_fingerprint(std::string_view text);

// The fields of one CSV line, quotes removed (RFC 4180: "" is a quote inside a quoted field).
std::vector<std::string> split_csv_line(std::string_view line);

// What `kvsim sweep merge` writes.
enum class SweepFileKind { csv, jsonl };

// Merges the part files a sharded sweep wrote (all of `kind`) into exactly the bytes the
// unsharded sweep writes: the header once (CSV), then every row in point order. Refuses,
// with an InputError naming the file (and line): a part of another kind or another grid
// (another header, `points` or `grid`), a point that appears twice (in one part or in two),
// a point no part has, a file that does not end with a newline.
std::string merge_sweep_parts(const std::vector<std::string>& paths, SweepFileKind kind);

// The kind of the parts from the first byte of the first part that has one ('{' is JSONL;
// an empty part can only be JSONL), for a merge to standard output.
SweepFileKind sweep_file_kind(const std::vector<std::string>& paths);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_SWEEP_H_
