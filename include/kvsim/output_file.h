// Every file kvsim writes goes through OutputFile, which writes it the way a careful tool
// does:
//
// - A regular file (or a new name) is written to a temporary created exclusively (O_EXCL,
//   unique name) in the same directory and renamed over the target only once it is complete
//   and closed: a failure or a signal part-way leaves the old file as it was and no partial
//   file. The temporary is removed on error, on destruction without commit(), and on SIGINT,
//   SIGTERM and SIGHUP.
// - A symbolic link to a regular file updates the file it points to (the temporary is made
//   beside the target and renamed over it), so the link stays a link.
// - Anything else (standard output as "-", a device such as /dev/null or /dev/full, a FIFO,
//   a dangling symbolic link) is written directly: it is never replaced by a regular file.
//   Such a path is opened only when its first bytes go out (a FIFO blocks until its reader
//   comes; a device is truncated, a link's target created), so that a run that fails first
//   leaves it alone; a directory, or a file this user may not write, fails at once.
// - OUT that is the same file as an input (same device and inode) is refused before anything
//   is written: an input is never truncated, replaced or removed.
// - Every write and the final close are checked, standard output included; a failure throws
//   InputError naming the file ("standard output" for "-"), which the program reports with
//   exit status 1.
#ifndef KVSIM_OUTPUT_FILE_H_
#define KVSIM_OUTPUT_FILE_H_

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace kvsim {

class OutputFile {
 public:
  // Opens `path` for writing ("-": standard output). `inputs` are the files this run reads:
  // OUT must be none of them. Throws InputError naming `path` when it is an input or cannot
  // be created.
  explicit OutputFile(std::string path, std::span<const std::string> inputs = {});
  // Without commit(): removes the temporary, leaving the target as it was.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends bytes (buffered). Throws InputError naming the file on a write error.
  void write(std::string_view bytes);
  // Flushes, closes and (for a regular file) renames the temporary over the target. Throws
  // InputError naming the file on any failure, after removing the temporary.
  void commit();
  // commit()'s first half: flushes and closes, so that every byte is written (to a device,
  // to standard output) and every write error is known, but replaces nothing yet.
  void finish();
  // Written in place (standard output, a device, a FIFO, a dangling link): its bytes are out
  // once finished, with nothing to replace.
  bool in_place() const { return in_place_; }

  // The name in messages: the path given, or "standard output" for "-".
  const std::string& display_name() const { return display_; }

 private:
  void flush();
  void discard() noexcept;
  void open_in_place();

  std::string path_;
  std::string display_;
  std::string target_;  // what the temporary is renamed over ("" when written directly)
  std::string temp_;    // the temporary's name ("" when written directly)
  int fd_ = -1;
  bool owns_fd_ = false;
  bool finished_ = false;
  bool in_place_ = false;
  bool open_pending_ = false;  // in place, not yet opened (flush() opens it)
  std::string buffer_;
};

// True when both paths name one existing file (the same device and inode): a hard link,
// a symbolic link or another spelling of the path. "-" is never the same as anything.
bool same_file(const std::string& a, const std::string& b);

// True when `path` is standard output under another name: /dev/stdout and its aliases, or the
// very file or pipe standard output is redirected to (a terminal or /dev/null given by its own
// name is a device others share, and is not). An OutputFile writes such a path to standard
// output, as it writes "-", so nothing else a command prints there interleaves with a file
// written beside it and then moved over it.
bool names_standard_output(const std::string& path);

// Commits the outputs of one command together: each is finished (flushed and closed) before
// any replaces its target, so a write error in one leaves every regular file as it was (only
// a rename that fails after another succeeded, or an output written in place before, cannot
// be taken back). Open them all before the work that fills them, so that a path that cannot
// be written fails first.
void commit_together(std::span<OutputFile* const> files);
// One output of a command and what fills it; a null file was not asked for.
struct OutputFill {
  OutputFile* file = nullptr;
  std::function<void(OutputFile&)> fill;
};
// Fills each output in turn, finishing at once each written in place (a reader of several
// FIFOs takes them one after another), then commits them together.
void write_each(std::span<const OutputFill> outputs);

// Writes `bytes` to `path` through an OutputFile and commits it.
void write_output_file(const std::string& path, std::string_view bytes, std::span<const std::string> inputs = {});

// Writes `bytes` to standard output, checked: throws InputError naming "standard output".
void write_stdout(std::string_view bytes);

}  // namespace kvsim

#endif  // KVSIM_OUTPUT_FILE_H_
