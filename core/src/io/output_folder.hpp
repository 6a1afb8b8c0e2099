// entgraph internal: OutputFolder and free_bytes_at are public
// (entgraph/io/files.hpp); the library's own code names them detail::.
#pragma once

#include <string>

#include "entgraph/io/files.hpp"

namespace entgraph::detail {

using entgraph::free_bytes_at;
using entgraph::OutputFolder;

// A shared flock(2) on a folder for as long as it lives: a reader of an
// output with a manifest (read_capture) holds one while it reads, so that no
// OutputFolder commit (an exclusive lock) runs between its reading the
// manifest and the files it names. Best effort: a folder that cannot be
// opened or locked is read without it (the read reports its own errors).
class FolderReadLock {
 public:
  explicit FolderReadLock(const std::string& dir);
  FolderReadLock(const FolderReadLock&) = delete;
  FolderReadLock& operator=(const FolderReadLock&) = delete;
  ~FolderReadLock();

 private:
  int fd_ = -1;
};

}  // namespace entgraph::detail
