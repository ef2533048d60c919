// A run's rows held on disk while the runs are under way, for an output gathered during them
// (--timeline, --per-request): an unnamed temporary file (std::tmpfile(), gone once closed),
// so that what a long trace writes does not stay in memory. Its failures name the output it
// is for, and a write that failed (a full temporary directory) is reported when the rows are
// read back, not turned into a file with rows missing.
#ifndef KVSIM_SRC_CLI_SCRATCH_FILE_H_
#define KVSIM_SRC_CLI_SCRATCH_FILE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "kvsim/output_file.h"

namespace kvsim::cli {

class ScratchFile {
 public:
  // `output`: the path of the output the rows are for; `rows`: what they are, for messages
  // ("the timeline's rows"). Throws InputError naming `output` when no file can be created.
  ScratchFile(std::string output, std::string rows);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Appends `bytes`; returns the offset they start at. Unchecked here: see the read-backs.
  std::int64_t append(std::string_view bytes);
  // Copies everything appended, in order, into `out`.
  void copy_to(OutputFile& out);
  // Reads the `length` bytes appended at `offset` (append()'s answer) into `bytes`.
  void read(std::int64_t offset, std::int64_t length, std::string& bytes);

 private:
  // Throws unless every append reached the file.
  void check_written();
  [[noreturn]] void fail_read() const;

  std::string output_;
  std::string rows_;
  std::FILE* file_ = nullptr;
  std::int64_t bytes_ = 0;
  bool flushed_ = false;
};

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_SCRATCH_FILE_H_
