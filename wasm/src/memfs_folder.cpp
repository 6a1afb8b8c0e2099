#include "memfs_folder.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "entgraph/error.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace fs = std::filesystem;

MemfsFolder::MemfsFolder() {
  static unsigned counter = 0;
  path_ = "/entgraph-scratch-" + std::to_string(++counter);
  fs::remove_all(path_);
  fs::create_directories(path_);
}

MemfsFolder::~MemfsFolder() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

void MemfsFolder::write(const emscripten::val& files, const char* what) const {
  if (files.isNull() || files.isUndefined() || files.typeOf().as<std::string>() != "object")
    throw Error(std::string(what) + ": expected an object of files {name: Uint8Array or string}");
  const emscripten::val names = emscripten::val::global("Object").call<emscripten::val>("keys", files);
  const std::size_t count = names["length"].as<std::size_t>();
  for (std::size_t i = 0; i < count; ++i) {
    const std::string name = names[i].as<std::string>();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos)
      throw Error(std::string(what) + ": '" + name + "' is not a plain file name");
    const emscripten::val content = files[name];
    const std::string field = std::string(what) + "['" + name + "']";
    std::ofstream out(path_ + "/" + name, std::ios::binary);
    if (content.isString()) {
      const std::string text = content.as<std::string>();
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
    } else {
      const std::vector<std::uint8_t> bytes = to_bytes(content, field.c_str());
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    if (!out) throw Error(field + ": cannot be stored in memory");
  }
}

emscripten::val MemfsFolder::read() const {
  emscripten::val files = emscripten::val::object();
  for (const fs::directory_entry& entry : fs::directory_iterator(path_)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    files.set(entry.path().filename().string(), byte_array(bytes.data(), bytes.size()));
  }
  return files;
}

}  // namespace entgraph::js
