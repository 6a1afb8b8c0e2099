// entgraph: files read and written whole, with errors that name them: what
// every file format of the library (npy, safetensors, captures, parameter
// files) uses, for programs that write their own outputs the same way.
//
// Every error is an entgraph::Error "<op>: <path>: <what>", op being the
// caller's name for the operation ("sweep: --out", "write_npy").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace entgraph {

// The whole content of a file, read in chunks rather than trusting a size
// reported up front (the file may be a pipe, or change while it is read). A
// regular file larger than max_bytes is refused before any read. Throws if it
// does not exist, is a directory, cannot be read or is too large.
std::vector<unsigned char> read_file_bytes(const char* op, const std::string& path,
                                           std::size_t max_bytes = static_cast<std::size_t>(-1));

// Writes bytes to path, whole or not at all: into a temporary file beside it
// (path.tmp-<pid>-<n>), renamed over path once complete, so a failure (full
// disk, file size limit, a directory in the way) leaves an existing file as
// it was and no temporary behind. A symbolic link keeps pointing at the
// replaced file; a device or pipe (/dev/stdout) is written in place. The new
// file gets the default permissions, not the old file's.
void write_file_bytes(const char* op, const std::string& path, const void* data, std::size_t size);

// Several files as one output: every file is written to its temporary first,
// and only when all are complete are they renamed into place, so a failure
// while writing any of them (a missing folder, a full disk) leaves every
// target as it was. Only a rename failing after an earlier one succeeded
// (rare: the temporaries sit beside their targets) can leave some replaced.
struct FileBytes {
  std::string path;
  std::vector<unsigned char> bytes;
};
void write_files_bytes(const char* op, const std::vector<FileBytes>& files);

// A folder output staged beside its destination and moved into place by
// commit(). Until then nothing at the destination changes: a failure (an
// exception, a full disk, a file size limit) leaves an existing output as it
// was and, once the OutputFolder is destroyed, no staging folder behind.
//
// - A destination that does not exist yet is staged as a sibling folder
//   (<dir>.tmp-<pid>-<n>) that commit() renames to <dir>: the folder appears
//   whole. Missing parents are created, and removed again on failure.
// - An existing folder may hold other files the caller must not touch (a
//   user's "--out ."), so it is never replaced as a whole: the files are
//   staged in a hidden subfolder (<dir>/.entgraph-staging-<pid>-<n>, same
//   file system) and commit() renames them one by one over their targets.
//   The manifest (capture.json, sweep.json) is removed first and renamed
//   last, so a reader never sees a manifest beside arrays it does not
//   describe; only a crash during those renames (microseconds) can leave the
//   folder without its manifest.
class OutputFolder {
 public:
  OutputFolder(const char* op, std::string dir);
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  ~OutputFolder();

  // Where the caller writes the file `name` (a plain file name) before commit().
  std::string path(const std::string& name) const;
  // The folder being staged (for estimates of its file system's free space).
  const std::string& staging() const { return staging_; }
  // Throws if a file of that name cannot be replaced in the destination (a
  // folder is in the way): callers check before long work, commit() again.
  void check_targets(const std::vector<std::string>& names) const;
  // Moves the staged files into place; `manifest`, if not empty, is one of
  // `names` and goes last (see above). names lists every file written.
  void commit(const std::vector<std::string>& names, const std::string& manifest = "");

 private:
  void discard() noexcept;
  const char* op_;
  std::string dir_;      // the destination as the caller named it
  std::string staging_;  // the folder holding the staged files
  bool inside_ = false;  // staging_ is inside an existing dir_
  bool committed_ = false;
  std::vector<std::string> created_parents_;  // deepest first, removed on failure if still empty
};

// Bytes available to an unprivileged writer on the file system holding path
// (the nearest existing ancestor of it); the largest value if unknown.
unsigned long long free_bytes_at(const std::string& path);

}  // namespace entgraph
