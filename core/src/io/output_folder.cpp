// entgraph: folder outputs staged and moved into place (see
// entgraph/io/files.hpp).
#include "entgraph/io/files.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <system_error>

#include "io/binary.hpp"

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

}  // namespace

OutputFolder::OutputFolder(const char* op, std::string dir) : op_(op), dir_(std::move(dir)) {
  if (dir_.empty()) fail(op_, "\"\"", "the output folder name is empty");
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_directory(status)) fail(op_, dir_, "exists and is not a folder");
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
        fail(op_, dir_, "cannot create the folder " + it->string() + " (" + ec.message() + ")");
      }
      created_parents_.insert(created_parents_.begin(), it->string());
    }
    staging_ = target.string() + ".tmp-" + unique_suffix();
  }
  if (!fs::create_directory(staging_, ec)) {
    const std::string why = ec ? ec.message() : "it exists already";
    staging_.clear();
    discard();
    fail(op_, dir_, "cannot create a folder to write into (" + why + ")");
  }
}

OutputFolder::~OutputFolder() {
  if (!committed_) discard();
}

std::string OutputFolder::path(const std::string& name) const { return (fs::path(staging_) / name).string(); }

void OutputFolder::discard() noexcept {
  std::error_code ec;
  if (!staging_.empty()) fs::remove_all(staging_, ec);
  for (const std::string& p : created_parents_) fs::remove(p, ec);  // only if still empty
}

void OutputFolder::check_targets(const std::vector<std::string>& names) const {
  if (!inside_) return;  // a new folder: nothing in the way
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  for (const std::string& name : names)
    if (fs::is_directory(fs::symlink_status(target / name, ec)))
      fail(op_, dir_, name + ": cannot replace it (a folder is in the way)");
}

void OutputFolder::commit(const std::vector<std::string>& names, const std::string& manifest) {
  if (committed_) fail(op_, dir_, "the output was moved into place already");
  const fs::path target = without_trailing_separator(dir_);
  std::error_code ec;
  check_targets(names);  // before the old manifest goes
  if (!inside_) {
    fs::rename(staging_, target, ec);
    if (ec) fail(op_, dir_, "cannot move the finished output into place (" + ec.message() + ")");
    committed_ = true;
    return;
  }
  if (!manifest.empty()) {
    fs::remove(target / manifest, ec);
    if (ec) fail(op_, dir_, manifest + ": cannot remove the old one (" + ec.message() + ")");
  }
  auto move = [&](const std::string& name) {
    fs::rename(fs::path(staging_) / name, target / name, ec);
    if (ec) fail(op_, dir_, name + ": cannot move it into place (" + ec.message() + ")");
  };
  for (const std::string& name : names)
    if (name != manifest) move(name);
  if (!manifest.empty()) move(manifest);
  committed_ = true;
  fs::remove_all(staging_, ec);  // empty now; a failure to remove it loses nothing
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
