#include "scratch_file.h"

#include <unistd.h>

#include <utility>

#include "kvsim/error.h"

namespace kvsim::cli {

ScratchFile::ScratchFile(std::string output, std::string rows)
    : output_(std::move(output)), rows_(std::move(rows)), file_(std::tmpfile()) {
  if (file_ == nullptr) throw InputError(Location{output_, 0, ""}, "cannot create a scratch file for " + rows_);
}

ScratchFile::~ScratchFile() { std::fclose(file_); }

std::int64_t ScratchFile::append(std::string_view bytes) {
  const std::int64_t offset = bytes_;
  std::fwrite(bytes.data(), 1, bytes.size(), file_);
  bytes_ += static_cast<std::int64_t>(bytes.size());
  return offset;
}

void ScratchFile::check_written() {
  if (flushed_) return;
  if (std::fflush(file_) != 0 || std::ferror(file_) != 0) {
    throw InputError(Location{output_, 0, ""},
                     "cannot hold " + rows_ + " in a scratch file (is the temporary directory full?)");
  }
  flushed_ = true;
}

void ScratchFile::fail_read() const {
  throw InputError(Location{output_, 0, ""}, "cannot read back " + rows_ + " from a scratch file");
}

void ScratchFile::copy_to(OutputFile& out) {
  check_written();
  std::rewind(file_);
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) out.write(std::string_view(buffer, n));
  if (std::ferror(file_) != 0) fail_read();
}

void ScratchFile::read(std::int64_t offset, std::int64_t length, std::string& bytes) {
  check_written();
  bytes.resize(static_cast<std::size_t>(length));
  // pread leaves the stream's own position alone.
  if (::pread(::fileno(file_), bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
      static_cast<ssize_t>(bytes.size())) {
    fail_read();
  }
}

}  // namespace kvsim::cli
