// entgraph wasm: a scratch folder in emscripten's in-memory file system, so
// that the core's file readers and writers (captures) work on bytes handed
// over by JavaScript. Removed with everything in it when it goes out of scope.
#pragma once

#include <emscripten/val.h>

#include <string>

namespace entgraph::js {

class MemfsFolder {
 public:
  MemfsFolder();
  ~MemfsFolder();
  MemfsFolder(const MemfsFolder&) = delete;
  MemfsFolder& operator=(const MemfsFolder&) = delete;

  const std::string& path() const { return path_; }
  // Writes every property of files ({name: Uint8Array | string}); names must
  // be plain file names.
  void write(const emscripten::val& files, const char* what) const;
  // Every file of the folder as {name: Uint8Array}.
  emscripten::val read() const;

 private:
  std::string path_;
};

}  // namespace entgraph::js
