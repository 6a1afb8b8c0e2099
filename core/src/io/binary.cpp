// entgraph internal: byte-level helpers of io/ (see binary.hpp), and the
// public whole-file reading and writing (entgraph/io/files.hpp) and quoting
// (entgraph/text.hpp) built on them.
#include "io/binary.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "entgraph/batched_attention.hpp"
#include "entgraph/error.hpp"

namespace entgraph::detail {

void fail(const char* op, const std::string& name, const std::string& what, ErrorCode code) {
  throw Error(at_op(op) + name + ": " + what, code);
}

// One implementation of the 16-bit formats: the public one (runtime/dtype.cpp).
double half_to_double(std::uint16_t h) { return static_cast<double>(entgraph::float16_to_float(h)); }

std::uint16_t float_to_half(float f) { return entgraph::float_to_float16(f); }

float bfloat16_to_float(std::uint16_t b) { return entgraph::bfloat16_to_float(b); }

std::string strerror_string(int err) {
  return err != 0 ? std::string(std::strerror(err)) : std::string("unknown error");
}

InputFile::InputFile(const char* op, std::string path, const char* a_kind) : op_(op), path_(std::move(path)) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
  errno = 0;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(op_, path_, "cannot open file (" + strerror_string(errno) + ")", ErrorCode::io);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(op_, path_, "cannot open file (" + strerror_string(err) + ")", ErrorCode::io);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) fail(op_, path_, std::string("is a directory, not ") + a_kind, ErrorCode::io);
    const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO (pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    fail(op_, path_, std::string("is ") + kind + ", not a regular file (" + a_kind +
                         " is read from a regular file only)", ErrorCode::io);
  }
  // Reads of a regular file never block: back to ordinary reads all the same.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<unsigned long long>(st.st_size);
  file_.reset(::fdopen(fd, "rb"));
  if (!file_) {
    const int err = errno;
    ::close(fd);
    fail(op_, path_, "cannot open file (" + strerror_string(err) + ")", ErrorCode::io);
  }
}

std::size_t InputFile::size() const {
  if (size_ > std::numeric_limits<std::size_t>::max())
    fail(op_, path_, "file too large (" + std::to_string(size_) + " bytes)", ErrorCode::limit);
  return static_cast<std::size_t>(size_);
}

void InputFile::read_exact(unsigned char* out, std::size_t n, const char* what) {
  if (n != 0 && std::fread(out, 1, n, file_.get()) != n)
    fail(op_, path_,
         std::string("read error in the ") + what + " (file changed or " +
             strerror_string(std::ferror(file_.get()) ? errno : 0) + ")", ErrorCode::io);
}

std::vector<unsigned char> InputFile::read_all(std::size_t max_bytes) {
  std::vector<unsigned char> bytes;
  // The size is known: refuse a large file before reading any of it.
  const std::size_t size = this->size();
  if (size > max_bytes)
    fail(op_, path_, "file too large (" + std::to_string(size) + " bytes, more than the limit of " +
                         std::to_string(max_bytes) + ")", ErrorCode::limit);
  bytes.reserve(size);
  unsigned char chunk[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(chunk, 1, sizeof chunk, file_.get());
    if (got > max_bytes - bytes.size())
      fail(op_, path_, "file too large (more than " + std::to_string(max_bytes) + " bytes)", ErrorCode::limit);
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (got < sizeof chunk) break;
  }
  if (std::ferror(file_.get())) fail(op_, path_, "read error (" + strerror_string(errno) + ")", ErrorCode::io);
  return bytes;
}

namespace {

// Writes the bytes to `file` (opened with `mode`); false with errno set on
// any failure, the file closed either way.
bool write_whole(const std::string& file, const char* mode, const void* data, std::size_t size, bool& opened) {
  errno = 0;
  File f(std::fopen(file.c_str(), mode));
  opened = static_cast<bool>(f);
  if (!f) return false;
  if (std::fwrite(data, 1, size, f.get()) != size || std::fflush(f.get()) != 0) return false;
  return std::fclose(f.release()) == 0;
}

// A name beside `target` that no other writer of this process or another
// one picks (the pid and a counter; created exclusively).
std::string temporary_beside(const std::filesystem::path& target) {
  static std::atomic<unsigned long> counter{0};
  return target.string() + ".tmp-" + std::to_string(static_cast<long>(getpid())) + "-" +
         std::to_string(counter.fetch_add(1));
}

// A file written to its temporary (or, for a device or pipe, in place) and
// not yet renamed over its target.
struct Staged {
  std::string path;               // as the caller named it, for messages
  std::filesystem::path target;   // the file to replace (a link resolved)
  std::string temp;               // empty: written in place
};

Staged stage(const char* op, const std::string& path, const void* data, std::size_t size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Staged st{path, fs::path(path), {}};
  if (fs::is_symlink(st.target, ec)) {  // replace the file the link names, keep the link
    const fs::path resolved = fs::weakly_canonical(st.target, ec);
    if (!ec) st.target = resolved;
  }
  const fs::file_status status = fs::status(st.target, ec);
  if (fs::is_directory(status))
    fail(op, path, "cannot open file for writing (a directory is in the way)", ErrorCode::io);
  bool opened = false;
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device or a pipe (/dev/stdout, /dev/null): written in place, never renamed over.
    if (!write_whole(st.target.string(), "wb", data, size, opened))
      fail(op, path, std::string(opened ? "write failed" : "cannot open file for writing") + " (" +
                         strerror_string(errno) + ")", ErrorCode::io);
    return st;
  }
  st.temp = temporary_beside(st.target);
  if (!write_whole(st.temp, "wbx", data, size, opened)) {
    const std::string why = strerror_string(errno);
    if (opened) std::remove(st.temp.c_str());
    fail(op, path, std::string(opened ? "write failed" : "cannot open file for writing") + " (" + why + ")",
         ErrorCode::io);
  }
  return st;
}

void discard(const Staged& st) {
  if (!st.temp.empty()) std::remove(st.temp.c_str());
}

void commit(const char* op, const Staged& st) {
  if (st.temp.empty()) return;
  std::error_code ec;
  std::filesystem::rename(st.temp, st.target, ec);
  if (ec) {
    discard(st);
    fail(op, st.path, "cannot replace the file (" + ec.message() + ")", ErrorCode::io);
  }
}

}  // namespace

}  // namespace entgraph::detail

namespace entgraph {

std::string printable(const char* s, std::size_t len, std::size_t max_len) {
  std::string out;
  for (std::size_t i = 0; i < len && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (len > max_len) out += "...";
  return out;
}

std::vector<unsigned char> read_file_bytes(const char* op, const std::string& path, std::size_t max_bytes) {
  return detail::InputFile(op, path, "a file").read_all(max_bytes);
}

void write_file_bytes(const char* op, const std::string& path, const void* data, std::size_t size) {
  // Whole or not at all: a temporary file in the same folder, renamed over
  // the target only once every byte is written.
  detail::commit(op, detail::stage(op, path, data, size));
}

void write_files_bytes(const char* op, const std::vector<FileBytes>& files) {
  std::vector<detail::Staged> staged;
  try {
    for (const FileBytes& f : files) staged.push_back(detail::stage(op, f.path, f.bytes.data(), f.bytes.size()));
  } catch (...) {
    for (const detail::Staged& st : staged) detail::discard(st);
    throw;
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    try {
      detail::commit(op, staged[i]);
    } catch (...) {
      for (std::size_t j = i + 1; j < staged.size(); ++j) detail::discard(staged[j]);
      throw;
    }
  }
}

}  // namespace entgraph
