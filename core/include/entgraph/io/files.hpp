// entgraph: files read and written whole, with errors that name them: what
// every file format of the library (npy, safetensors, captures, parameter
// files) uses, for programs that write their own outputs the same way.
//
// Every error is an entgraph::Error "<op>: <path>: <what>", op being the
// caller's name for the operation ("sweep: --out", "write_npy").
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace entgraph {

// The whole content of a regular file, read in chunks rather than trusting
// the size reported up front (the file may change while it is read). A file
// larger than max_bytes is refused before any read. Throws if it does not
// exist, is a directory or any other non-regular file (a FIFO, a socket, a
// device: a read from one may never end; docs/FORMATS.md), cannot be read or
// is too large.
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
// docs/FORMATS.md ("How outputs are committed") is the user's account.
//
// - A destination that does not exist yet is staged as a sibling folder
//   (<dir>.tmp-<pid>-<n>) that commit() renames to <dir>: the folder appears
//   whole. Missing parents are created, and removed again on failure. If
//   another writer creates <dir> meanwhile, the commit goes on as into an
//   existing folder.
// - An existing folder may hold other files the caller must not touch (a
//   user's "--out ."), so it is never replaced as a whole: the files are
//   staged in a hidden subfolder (<dir>/.entgraph-staging-<pid>-<n>, same
//   file system). Its commit holds an exclusive flock(2) on the folder
//   itself, so that commits of two writers (two processes, or two
//   OutputFolders of one) run one after the other, never interleaved: the
//   later one waits, and its output is the one left.
// - An output with a manifest (capture.json, sweep.json: the file that names
//   the others) is whole even if the process is killed at any point of its
//   commit: into an existing folder, its files are moved in under names no
//   manifest there names yet, generation-suffixed (queries.g2.npy), and
//   fsynced; then the manifest, written by the caller's ManifestText with
//   those names, replaces the old one by one rename (the commit point).
//   Then the plain names are made to hold the new files (hard links) and a
//   second manifest naming them replaces the first, and the generation files
//   are removed: the names stay the same however often an output is
//   rewritten. Killed at any step, the manifest names files of the old
//   output or of the new, never a mix. Readers (read_capture) hold a shared
//   lock on the folder while they read, so that no commit runs under them.
// - An output without a manifest (a folder of parameter files) has its files
//   renamed one by one over their plain names; each file is whole, and a
//   failure part-way puts back the ones already replaced.
class OutputFolder {
 public:
  // Plain name (as staged) -> the name it has in the destination.
  using Names = std::map<std::string, std::string>;
  // The manifest's content, given the names its files are committed under.
  using ManifestText = std::function<std::string(const Names&)>;

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

  // An output with a manifest, in two steps so that a caller committing two
  // folders can do everything that may fail before either becomes visible.
  // prepare(): the staged files `names` (the manifest not among them) go
  // into the destination under their new names and the manifest is written
  // (staged); nothing a reader of the manifest sees has changed. commit():
  // the manifest's rename, then the old generations are removed.
  void prepare(const std::vector<std::string>& names, const std::string& manifest, const ManifestText& text);
  void commit();
  // prepare() and commit() at once.
  void commit(const std::vector<std::string>& names, const std::string& manifest, const ManifestText& text);
  // An output without a manifest: every staged file in `names` renamed over
  // its plain name. The replaced files are kept (in the staging folder) until
  // the OutputFolder is destroyed, so that rollback() can put them back.
  void commit(const std::vector<std::string>& names);
  // Undoes commit(names): the replaced files back, the new ones removed (a
  // new folder removed). For a caller whose second output failed. Throws if
  // a file cannot be put back.
  void rollback();
  // The names the files were committed under (after prepare or commit).
  const Names& names() const { return names_; }

 private:
  void discard() noexcept;
  void lock();
  void unlock() noexcept;
  void prepare_inside();
  bool move_staging_into_place();
  void commit_inside_plain(const std::vector<std::string>& names);
  void restore_plain_names(const std::filesystem::path& target);
  const char* op_;
  std::string dir_;      // the destination as the caller named it
  std::string staging_;  // the folder holding the staged files
  bool inside_ = false;  // staging_ is inside an existing dir_
  int lock_fd_ = -1;     // the destination, open and flock'ed during a commit
  enum class Phase { staging, prepared, committed, rolled_back } phase_ = Phase::staging;
  std::vector<std::string> files_;  // the staged files of prepare()
  std::string manifest_;
  ManifestText text_;
  Names names_;
  std::vector<std::string> moved_;  // new files in the destination not yet named by a manifest
  std::vector<std::string> old_;    // earlier generations, removed after the commit
  std::vector<std::pair<std::string, bool>> replaced_;  // commit(names): file, whether an old one was kept
  std::vector<std::string> created_parents_;  // deepest first, removed on failure if still empty
};

// Test-only fault injection for the commit protocol (docs/FORMATS.md): if
// the environment variable ENTGRAPH_TEST_KILL_AT names `step`, the process
// kills itself (SIGKILL) there; if ENTGRAPH_TEST_STOP_AT does, it stops
// (SIGSTOP) until continued. Steps: "locked" (the folder's lock taken),
// "staged" (new files in place under generation names, the old manifest
// still current), "committed" (the new manifest in place, naming the
// generation files), "linked" (the plain names hold the new files, the
// manifest still names the generation files).
void test_point(const char* step);

// Bytes available to an unprivileged writer on the file system holding path
// (the nearest existing ancestor of it); the largest value if unknown.
unsigned long long free_bytes_at(const std::string& path);

}  // namespace entgraph
