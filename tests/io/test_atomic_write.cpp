// Every file the library writes appears whole or not at all
// (detail::write_file_bytes, behind write_npy, write_safetensors, capture.json
// and parameter files): simulated failures leave an existing file as it was
// and no temporary file behind.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "entgraph/io/npy.hpp"
#include "io/binary.hpp"
#include "io/io_test_support.hpp"

namespace entgraph::test {
namespace {

namespace fs = std::filesystem;

// The names in a folder, sorted.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void write_string(const std::string& path, const std::string& text) {
  detail::write_file_bytes("test", path, text.data(), text.size());
}

TEST_SUITE("io") {
  TEST_CASE("write_file_bytes creates and replaces whole files and leaves no temporary") {
    TempDir dir;
    const std::string path = dir.file("out.txt");
    write_string(path, "first");
    CHECK(read_text(path) == "first");
    write_string(path, "second, longer");
    CHECK(read_text(path) == "second, longer");
    write_string(path, "");
    CHECK(read_text(path).empty());
    CHECK(listing(dir.path()) == std::vector<std::string>{"out.txt"});
  }

  TEST_CASE("write_file_bytes: a directory in the way or a missing folder is an error that writes nothing") {
    TempDir dir;
    fs::create_directory(dir.file("taken"));
    write_text(dir.file("taken/inside.txt"), "kept");
    CHECK_ERROR_CONTAINS(write_string(dir.file("taken"), "x"), "test: " + dir.file("taken") + ": cannot open file for writing");
    CHECK(read_text(dir.file("taken/inside.txt")) == "kept");
    CHECK_ERROR_CONTAINS(write_string(dir.file("missing/out.txt"), "x"), "cannot open file for writing");
    CHECK(listing(dir.path()) == std::vector<std::string>{"taken"});
  }

  TEST_CASE("write_file_bytes: a write that fails half-way (file size limit) keeps the old file") {
    TempDir dir;
    const std::string path = dir.file("data.npy");
    const std::vector<float> old_values(16, 1.5f);
    write_npy(path, old_values.data(), {4, 4});
    const Bytes before = read_bytes(path);

    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    void (*saved_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
    rlimit small = saved;
    small.rlim_cur = 4096;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::vector<float> big(100000, 2.0f);
    std::string message;
    try {
      write_npy(path, big.data(), {big.size()});
    } catch (const Error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);

    CHECK(message.find("write_npy: " + path + ": write failed") != std::string::npos);
    CHECK(read_bytes(path) == before);  // the old file, whole
    CHECK(listing(dir.path()) == std::vector<std::string>{"data.npy"});
  }

  TEST_CASE("write_files_bytes: several files as one output, all or none") {
    TempDir dir;
    write_text(dir.file("a.txt"), "old a");
    const auto bytes = [](const std::string& t) { return std::vector<unsigned char>(t.begin(), t.end()); };
    // The second target's folder is missing: the first keeps its old content.
    CHECK_ERROR_CONTAINS(
        detail::write_files_bytes("test", {{dir.file("a.txt"), bytes("new a")}, {dir.file("no/b.txt"), bytes("b")}}),
        "test: " + dir.file("no/b.txt") + ": cannot open file for writing");
    CHECK(read_text(dir.file("a.txt")) == "old a");
    CHECK(listing(dir.path()) == std::vector<std::string>{"a.txt"});
    detail::write_files_bytes("test", {{dir.file("a.txt"), bytes("new a")}, {dir.file("b.txt"), bytes("b")}});
    CHECK(read_text(dir.file("a.txt")) == "new a");
    CHECK(read_text(dir.file("b.txt")) == "b");
    CHECK(listing(dir.path()) == std::vector<std::string>{"a.txt", "b.txt"});
  }

  TEST_CASE("write_file_bytes: a link keeps pointing at the replaced file; a device is written in place") {
    TempDir dir;
    write_text(dir.file("real.txt"), "old");
    fs::create_symlink(dir.file("real.txt"), dir.file("link.txt"));
    write_string(dir.file("link.txt"), "new");
    CHECK(fs::is_symlink(dir.file("link.txt")));
    CHECK(read_text(dir.file("real.txt")) == "new");
    CHECK(listing(dir.path()) == std::vector<std::string>{"link.txt", "real.txt"});
    if (fs::exists("/dev/null")) {
      write_string("/dev/null", "discarded");
      CHECK(fs::is_character_file("/dev/null"));
    }
    if (fs::exists("/dev/full")) {
      CHECK_ERROR_CONTAINS(write_string("/dev/full", "no room"), "test: /dev/full: write failed");
      CHECK(fs::is_character_file("/dev/full"));
    }
  }
}

}  // namespace
}  // namespace entgraph::test
