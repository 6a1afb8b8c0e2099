// entgraph (internal): outputs of several files in one folder, whole or not
// at all (captures, sweep results, saved parameter files).
#pragma once
#include <string>
#include <vector>

namespace entgraph::detail {

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
// Errors are entgraph::Error "<op>: <dir>: ...".
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
// (the nearest existing ancestor of it); the largest size_t if unknown.
unsigned long long free_bytes_at(const std::string& path);

}  // namespace entgraph::detail
