// entgraph: folder outputs staged and moved into place (see
// entgraph/io/files.hpp).
#include "entgraph/io/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "entgraph/error.hpp"
#include "io/binary.hpp"
#include "io/output_folder.hpp"

namespace entgraph {
namespace {

using detail::fail;

namespace fs = std::filesystem;

std::string unique_suffix() {
  static std::atomic<unsigned long> counter{0};
  return std::to_string(static_cast<long>(getpid())) + "-" + std::to_string(counter.fetch_add(1));
}

// "a/b/" and "a/b" name the same folder; the sibling of "a/b/" is "a/b.tmp-…".
fs::path without_trailing_separator(const std::string& dir) {
  fs::path p(dir);
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

// The file `name` of generation g: the plain name for 0, else the
// generation before the extension ("queries.npy", 3 -> "queries.g3.npy").
std::string with_generation(const std::string& name, unsigned long g) {
  if (g == 0) return name;
  const std::size_t dot = name.rfind('.');
  const std::size_t at = dot == std::string::npos || dot == 0 ? name.size() : dot;
  return name.substr(0, at) + ".g" + std::to_string(g) + name.substr(at);
}

// Whether `file` is `name` of some generation, and which.
bool generation_of(const std::string& file, const std::string& name, unsigned long& g) {
  if (file == name) {
    g = 0;
    return true;
  }
  const std::string first = with_generation(name, 1);  // "stem.g1.ext": where the digits go
  const std::size_t at = first.rfind(".g1") + 2;
  const std::string head = first.substr(0, at), tail = first.substr(at + 1);
  if (file.size() <= head.size() + tail.size() || file.compare(0, head.size(), head) != 0 ||
      file.compare(file.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = file.substr(head.size(), file.size() - head.size() - tail.size());
  if (digits.size() > 9 || digits[0] == '0' || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  g = std::stoul(digits);
  return true;
}

// fsync of a file or folder: the data on disk before a rename names it.
// Best effort (a file system without fsync loses nothing on a process kill).
void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Staging folders left in `dir` by writers that died (kill -9): their
// process no longer exists. Called under the folder's lock.
void remove_stale_staging(const fs::path& dir) {
  static const std::string prefix = ".entgraph-staging-";
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

}  // namespace

OutputFolder::OutputFolder(const char* op, std::string dir) : op_(op), dir_(std::move(dir)) {
  if (dir_.empty()) fail(op_, "\"\"", "the output folder name is empty", ErrorCode::bad_argument);
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_directory(status)) fail(op_, dir_, "exists and is not a folder", ErrorCode::io);
  inside_ = fs::is_directory(status);
  if (inside_) {
    staging_ = (target / (".entgraph-staging-" + unique_suffix())).string();
  } else {
    // Create the missing parents, remembering which, so a failure removes them.
    std::vector<fs::path> missing;
    for (fs::path p = target.parent_path(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!fs::create_directory(*it, ec) && ec) {
        discard();
        fail(op_, dir_, "cannot create the folder " + it->string() + " (" + ec.message() + ")", ErrorCode::io);
      }
      created_parents_.insert(created_parents_.begin(), it->string());
    }
    staging_ = target.string() + ".tmp-" + unique_suffix();
  }
  if (!fs::create_directory(staging_, ec)) {
    const std::string why = ec ? ec.message() : "it exists already";
    staging_.clear();
    discard();
    fail(op_, dir_, "cannot create a folder to write into (" + why + ")", ErrorCode::io);
  }
}

OutputFolder::~OutputFolder() {
  if (phase_ != Phase::committed) discard();
  else {
    std::error_code ec;
    fs::remove_all(staging_, ec);  // the replaced files kept for rollback()
  }
  unlock();
}

std::string OutputFolder::path(const std::string& name) const { return (fs::path(staging_) / name).string(); }

void OutputFolder::discard() noexcept {
  std::error_code ec;
  // Files moved in by prepare() that no manifest names yet.
  for (const std::string& name : moved_) fs::remove(without_trailing_separator(dir_) / name, ec);
  moved_.clear();
  if (!staging_.empty()) fs::remove_all(staging_, ec);
  for (const std::string& p : created_parents_) fs::remove(p, ec);  // only if still empty
}

void OutputFolder::lock() {
  if (lock_fd_ >= 0) return;
  const std::string target = without_trailing_separator(dir_).string();
  lock_fd_ = ::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0)
    fail(op_, dir_, "cannot open the folder to lock it (" + detail::strerror_string(errno) + ")", ErrorCode::io);
  // Waits while another writer commits into the same folder.
  while (::flock(lock_fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    unlock();
    fail(op_, dir_, "cannot lock the folder (" + detail::strerror_string(err) + ")", ErrorCode::io);
  }
  test_point("locked");
}

void OutputFolder::unlock() noexcept {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing releases the flock
  lock_fd_ = -1;
}

void OutputFolder::check_targets(const std::vector<std::string>& names) const {
  if (!inside_) return;  // a new folder: nothing in the way
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  for (const std::string& name : names)
    if (fs::is_directory(fs::symlink_status(target / name, ec)))
      fail(op_, dir_, name + ": cannot replace it (a folder is in the way)", ErrorCode::io);
}

void OutputFolder::prepare(const std::vector<std::string>& names, const std::string& manifest,
                           const ManifestText& text) {
  if (phase_ != Phase::staging) fail(op_, dir_, "the output was moved into place already", ErrorCode::bad_argument);
  files_ = names;
  manifest_ = manifest;
  text_ = text;
  if (inside_) return prepare_inside();
  // A new folder keeps the plain names; it appears whole at commit().
  names_.clear();
  for (const std::string& name : files_) names_[name] = name;
  const std::string content = text_(names_);
  write_file_bytes(op_, path(manifest_), content.data(), content.size());
  phase_ = Phase::prepared;
}

void OutputFolder::prepare_inside() {
  const fs::path target = without_trailing_separator(dir_);
  std::vector<std::string> all = files_;
  all.push_back(manifest_);
  check_targets(all);
  lock();
  remove_stale_staging(target);
  // The next generation: above every one of these files in the folder
  // (those of the current manifest, and any left by a writer that died).
  unsigned long generation = 0;
  bool any = false;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(target, ec)) {
    const std::string file = e.path().filename().string();
    for (const std::string& name : files_) {
      unsigned long g = 0;
      if (!generation_of(file, name, g)) continue;
      any = true;
      generation = std::max(generation, g);
      old_.push_back(file);
    }
  }
  if (any) ++generation;
  names_.clear();
  for (const std::string& name : files_) names_[name] = with_generation(name, generation);
  for (const std::string& name : files_) {
    sync_file(path(name));
    fs::rename(path(name), target / names_[name], ec);
    if (ec) fail(op_, dir_, names_[name] + ": cannot move it into place (" + ec.message() + ")", ErrorCode::io);
    moved_.push_back(names_[name]);
  }
  const std::string content = text_(names_);
  write_file_bytes(op_, path(manifest_), content.data(), content.size());
  sync_file(path(manifest_));
  sync_file(target.string());  // the new names, before the manifest names them
  phase_ = Phase::prepared;
  test_point("staged");
}

void OutputFolder::commit() {
  if (phase_ != Phase::prepared) fail(op_, dir_, "commit() without prepare(), or twice", ErrorCode::bad_argument);
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  if (!inside_) {
    if (move_staging_into_place()) {
      created_parents_.clear();
      return;
    }
    prepare_inside();
  }
  fs::rename(path(manifest_), target / manifest_, ec);  // the commit point
  if (ec) fail(op_, dir_, manifest_ + ": cannot move it into place (" + ec.message() + ")", ErrorCode::io);
  moved_.clear();
  phase_ = Phase::committed;
  sync_file(target.string());
  test_point("committed");
  restore_plain_names(target);
  // Every file of another generation than the manifest's. A failure leaves
  // a file that no manifest names: it loses nothing.
  for (const std::string& file : old_) {
    bool current = false;
    for (const auto& [plain, name] : names_) current = current || file == name;
    if (!current) fs::remove(target / file, ec);
  }
  fs::remove_all(staging_, ec);
  unlock();
}

// After the commit, the new files get their plain names back, so that an
// output keeps the same file names however often it is rewritten: each plain
// name is replaced by a hard link to its new generation (what the plain
// names held is no longer named by the manifest), then a second manifest
// naming the plain names replaces the first, and the generation files go.
// Killed anywhere here, the manifest names files that hold the new output.
// Where hard links are not supported, the generation names stay.
void OutputFolder::restore_plain_names(const fs::path& target) {
  std::error_code ec;
  Names plain;
  for (const auto& [name, committed] : names_) {
    if (name == committed) return;  // generation 0: the plain names already
    plain[name] = name;
    fs::create_hard_link(target / committed, path(name + ".link"), ec);
    if (!ec) fs::rename(path(name + ".link"), target / name, ec);
    if (ec) return;
  }
  sync_file(target.string());
  test_point("linked");
  const std::string content = text_(plain);
  try {
    write_file_bytes(op_, path(manifest_), content.data(), content.size());
  } catch (const Error&) {
    return;
  }
  sync_file(path(manifest_));
  fs::rename(path(manifest_), target / manifest_, ec);
  if (ec) return;
  sync_file(target.string());
  for (const auto& [name, committed] : names_) old_.push_back(committed);
  names_ = plain;
}

void OutputFolder::commit(const std::vector<std::string>& names, const std::string& manifest,
                          const ManifestText& text) {
  prepare(names, manifest, text);
  commit();
}

void OutputFolder::commit(const std::vector<std::string>& names) {
  if (phase_ != Phase::staging) fail(op_, dir_, "the output was moved into place already", ErrorCode::bad_argument);
  files_ = names;
  names_.clear();
  for (const std::string& name : names) names_[name] = name;
  if (!inside_ && move_staging_into_place()) return;
  commit_inside_plain(names);
}

// A new folder: the staging folder becomes it in one rename. False if
// another writer made the folder meanwhile: the caller commits into it.
bool OutputFolder::move_staging_into_place() {
  std::error_code ec;
  fs::rename(staging_, without_trailing_separator(dir_), ec);
  if (!ec) {
    phase_ = Phase::committed;
    return true;
  }
  if (ec != std::errc::file_exists && ec != std::errc::directory_not_empty)
    fail(op_, dir_, "cannot move the finished output into place (" + ec.message() + ")", ErrorCode::io);
  inside_ = true;
  return false;
}

void OutputFolder::commit_inside_plain(const std::vector<std::string>& names) {
  const fs::path target = without_trailing_separator(dir_);
  check_targets(names);
  lock();  // held until rollback() or destruction: nobody else commits in between
  std::error_code ec;
  for (const std::string& name : names) {
    // The old file stays reachable from the staging folder (a hard link),
    // so that the rename replaces it atomically and rollback() can restore it.
    const bool had_old = fs::exists(fs::symlink_status(target / name, ec));
    if (had_old) {
      fs::create_hard_link(target / name, path(name + ".replaced"), ec);
      if (ec) {
        const std::string why = ec.message();
        rollback();
        fail(op_, dir_, name + ": cannot keep the old file while replacing it (" + why + ")", ErrorCode::io);
      }
    }
    fs::rename(path(name), target / name, ec);
    if (ec) {
      const std::string why = ec.message();
      if (had_old) fs::remove(path(name + ".replaced"), ec);
      rollback();
      fail(op_, dir_, name + ": cannot move it into place (" + why + ")", ErrorCode::io);
    }
    replaced_.emplace_back(name, had_old);
  }
  phase_ = Phase::committed;
}

void OutputFolder::rollback() {
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  if (!inside_) {  // a new folder: it goes again
    if (phase_ == Phase::committed) {
      fs::rename(target, staging_, ec);
      if (ec) fail(op_, dir_, "cannot remove the output again (" + ec.message() + ")", ErrorCode::io);
    }
    phase_ = Phase::rolled_back;
    return;
  }
  std::string failed;
  for (auto it = replaced_.rbegin(); it != replaced_.rend(); ++it) {
    if (it->second)
      fs::rename(path(it->first + ".replaced"), target / it->first, ec);
    else
      fs::remove(target / it->first, ec);
    if (ec && failed.empty()) failed = it->first + " (" + ec.message() + ")";
  }
  replaced_.clear();
  phase_ = Phase::rolled_back;
  if (!failed.empty()) fail(op_, dir_, "cannot put back the earlier " + failed, ErrorCode::io);
}

}  // namespace entgraph

namespace entgraph::detail {

FolderReadLock::FolderReadLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_SH) != 0 && errno == EINTR) {
  }
}

FolderReadLock::~FolderReadLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace entgraph::detail

namespace entgraph {

void test_point(const char* step) {
  const char* kill_at = std::getenv("ENTGRAPH_TEST_KILL_AT");
  if (kill_at != nullptr && std::strcmp(kill_at, step) == 0) std::raise(SIGKILL);
  const char* stop_at = std::getenv("ENTGRAPH_TEST_STOP_AT");
  if (stop_at != nullptr && std::strcmp(stop_at, step) == 0) std::raise(SIGSTOP);
}

unsigned long long free_bytes_at(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return std::numeric_limits<unsigned long long>::max();
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  const fs::space_info info = fs::space(p, ec);
  if (ec) return std::numeric_limits<unsigned long long>::max();
  return info.available;
}

}  // namespace entgraph
