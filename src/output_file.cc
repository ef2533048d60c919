#include "kvsim/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "kvsim/error.h"
#include "trace_read.h"

namespace kvsim {
namespace {

constexpr std::size_t kFlushBytes = std::size_t{1} << 20;

// ---------------------------------------------------------------------------------------
// Temporaries to remove if the program is interrupted. A signal handler may only call
// async-signal-safe functions, so the names live in a fixed table of C strings that the
// handler reads without locking and unlink()s.

constexpr std::size_t kMaxTemporaries = 64;
std::array<std::atomic<char*>, kMaxTemporaries> g_temporaries{};
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (auto& slot : g_temporaries) {
    if (char* name = slot.load()) ::unlink(name);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : kCleanupSignals) {
      struct sigaction old {};
      // A signal the caller chose to ignore stays ignored.
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      struct sigaction action {};
      action.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&action.sa_mask);
      ::sigaction(sig, &action, nullptr);
    }
  });
}

// Returns the slot holding `name`, or kMaxTemporaries when the table is full (the file is
// then still removed on errors, only not on a signal).
std::size_t register_temporary(const std::string& name) {
  install_handlers_once();
  char* copy = ::strdup(name.c_str());
  if (copy == nullptr) throw std::bad_alloc();
  for (std::size_t i = 0; i < kMaxTemporaries; ++i) {
    char* expected = nullptr;
    if (g_temporaries[i].compare_exchange_strong(expected, copy)) return i;
  }
  std::free(copy);
  return kMaxTemporaries;
}

void unregister_temporary(const std::string& name) {
  for (auto& slot : g_temporaries) {
    char* held = slot.load();
    if (held != nullptr && name == held && slot.compare_exchange_strong(held, nullptr)) {
      std::free(held);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& display, const std::string& problem, int error) {
  throw InputError(Location{display, 0, ""}, problem + ": " + std::strerror(error));
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

mode_t current_umask() {
  // umask() can only be read by setting it; done once, before any thread writes files.
  static const mode_t mask = [] {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return mask;
}

}  // namespace

bool names_standard_output(const std::string& path) {
  for (const char* alias : {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    if (path == alias) return true;
  }
  struct stat out {}, given {};
  if (::fstat(STDOUT_FILENO, &out) != 0 || ::stat(path.c_str(), &given) != 0) return false;
  return !S_ISCHR(out.st_mode) && out.st_dev == given.st_dev && out.st_ino == given.st_ino;
}

OutputFile::OutputFile(std::string path, std::span<const std::string> inputs)
    : path_(std::move(path)), display_(path_ == "-" ? "standard output" : path_) {
  buffer_.reserve(std::size_t{64} << 10);
  if (path_ == "-" || names_standard_output(path_)) {
    fd_ = STDOUT_FILENO;
    in_place_ = true;
    return;
  }
  for (const auto& in : inputs) {
    if (same_file(path_, in)) {
      throw InputError(Location{display_, 0, ""},
                       "is the same file as the input " + detail::printable(in) + ": write the output elsewhere");
    }
  }
  struct stat out_stat {};
  const bool exists = ::stat(path_.c_str(), &out_stat) == 0;
  struct stat link_stat {};
  const bool is_link = ::lstat(path_.c_str(), &link_stat) == 0 && S_ISLNK(link_stat.st_mode);
  if (exists ? S_ISREG(out_stat.st_mode) : !is_link) {
    // A regular file, a link to one, or a new name: through a temporary beside the target.
    if (is_link) {
      char* resolved = ::realpath(path_.c_str(), nullptr);
      if (resolved == nullptr) fail(display_, "cannot resolve the symbolic link", errno);
      target_ = resolved;
      std::free(resolved);
    } else {
      target_ = path_;
    }
    // Replacing the file through a temporary needs only the directory's permission; the
    // file's own must not be bypassed (a shell's '>' refuses a read-only file too).
    if (exists && ::access(target_.c_str(), W_OK) != 0) fail(display_, "cannot open for writing", errno);
    std::string pattern = directory_of(target_) + "/." + base_of(target_) + ".kvsim-XXXXXX";
    // mkstemp opens with O_CREAT | O_EXCL: the name is new, never an existing file.
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0) fail(display_, "cannot create a temporary file in " + detail::printable(directory_of(target_)), errno);
    temp_ = pattern;
    owns_fd_ = true;
    register_temporary(temp_);
    // The temporary is 0600; the result gets the old file's mode, or a new file's.
    const mode_t mode = exists ? (out_stat.st_mode & 07777) : (0666 & ~current_umask());
    ::fchmod(fd_, mode);
    return;
  }
  // A device, a FIFO, a dangling link: written in place, never replaced, and opened only when
  // the first bytes go out: opening truncates a device or creates a link's target, and a FIFO
  // blocks until its reader comes, none of which may happen for a run that then fails. What
  // can be told now is: a directory, or a file this user may not write.
  if (exists && S_ISDIR(out_stat.st_mode)) fail(display_, "cannot open for writing", EISDIR);
  if (exists && ::access(path_.c_str(), W_OK) != 0) fail(display_, "cannot open for writing", errno);
  in_place_ = true;
  open_pending_ = true;
}

void OutputFile::open_in_place() {
  open_pending_ = false;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_CLOEXEC, 0666);
  if (fd_ < 0) fail(display_, "cannot open for writing", errno);
  owns_fd_ = true;
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  open_pending_ = false;
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    unregister_temporary(temp_);
    temp_.clear();
  }
}

void OutputFile::write(std::string_view bytes) {
  check(fd_ >= 0 || open_pending_, "OutputFile::write after commit");
  buffer_.append(bytes);
  if (buffer_.size() >= kFlushBytes) flush();
}

void OutputFile::flush() {
  if (open_pending_) open_in_place();
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      discard();
      fail(display_, "write error", error);
    }
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void OutputFile::finish() {
  if (fd_ < 0 && !open_pending_) return;
  flush();
  finished_ = true;
  if (owns_fd_) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int error = errno;
      discard();
      fail(display_, "write error", error);
    }
  } else {
    fd_ = -1;
  }
}

void OutputFile::commit() {
  if (!finished_) {
    if (fd_ < 0 && !open_pending_) return;
    finish();
  }
  if (temp_.empty()) return;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    discard();
    fail(display_, "cannot replace the file with the finished output", error);
  }
  unregister_temporary(temp_);
  temp_.clear();
}

bool same_file(const std::string& a, const std::string& b) {
  if (a == "-" || b == "-") return false;
  struct stat sa {};
  struct stat sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void commit_together(std::span<OutputFile* const> files) {
  // Temporaries first: a write error there shows nowhere, then what goes out in place.
  for (const bool in_place : {false, true}) {
    for (OutputFile* f : files) {
      if (f->in_place() == in_place) f->finish();
    }
  }
  for (OutputFile* f : files) f->commit();
}

void write_each(std::span<const OutputFill> outputs) {
  std::vector<OutputFile*> files;
  for (const OutputFill& o : outputs) {
    if (o.file == nullptr) continue;
    o.fill(*o.file);
    // Out at once, as before the runs' outputs were opened together: a reader taking several
    // FIFOs one after another waits for this one's end before it opens the next.
    if (o.file->in_place()) o.file->finish();
    files.push_back(o.file);
  }
  commit_together(files);
}

void write_output_file(const std::string& path, std::string_view bytes, std::span<const std::string> inputs) {
  OutputFile out(path, inputs);
  out.write(bytes);
  out.commit();
}

void write_stdout(std::string_view bytes) {
  // Whatever stdio holds goes first, so that the order on the terminal stays the same.
  if (std::fflush(stdout) != 0) fail("standard output", "write error", errno);
  write_output_file("-", bytes);
}

}  // namespace kvsim
