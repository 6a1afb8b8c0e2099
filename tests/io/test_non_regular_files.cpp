// Every reader of the file formats refuses a FIFO, a socket or a device
// instead of reading it: opening a FIFO blocks until a writer comes (forever,
// if none does), and a read from a device or a pipe may never end (issue 29).
// Before the fix, each FIFO case below hung in open().
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <sys/stat.h>

#include "entgraph/io/capture.hpp"
#include "entgraph/io/files.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/io/safetensors.hpp"
#include "io/io_test_support.hpp"

namespace entgraph::test {
namespace {

namespace fs = std::filesystem;

void make_fifo(const std::string& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }

TEST_SUITE("io") {
  TEST_CASE("readers refuse a FIFO, naming it, without waiting for a writer") {
    TempDir dir;
    const std::string fifo = dir.file("x.npy");
    make_fifo(fifo);
    const std::string is_fifo = fifo + ": is a FIFO (pipe), not a regular file";
    CHECK_ERROR_CONTAINS(read_npy(fifo), "read_npy: " + is_fifo);
    CHECK_ERROR_CONTAINS(read_safetensors(fifo), "read_safetensors: " + is_fifo);
    CHECK_ERROR_CONTAINS(read_file_bytes("test", fifo), "test: " + is_fifo);
    CHECK(fs::is_fifo(fifo));  // left as it was
  }

  TEST_CASE("readers refuse a device") {
    if (!fs::exists("/dev/null")) return;
    CHECK_ERROR_CONTAINS(read_npy("/dev/null"), "read_npy: /dev/null: is a device, not a regular file");
    CHECK_ERROR_CONTAINS(read_file_bytes("test", "/dev/zero"), "test: /dev/zero: is a device, not a regular file");
  }

  TEST_CASE("read_capture refuses a FIFO as capture.json or as an array, naming the file") {
    TempDir dir;
    const std::string cap = dir.file("cap");
    write_capture(cap, Capture::make(1, 1, 2, {3}, true));
    fs::remove(cap + "/values.npy");
    make_fifo(cap + "/values.npy");
    CHECK_ERROR_CONTAINS(read_capture(cap), "values.npy: is a FIFO (pipe), not a regular file");
    fs::remove(cap + "/capture.json");
    make_fifo(cap + "/capture.json");
    CHECK_ERROR_CONTAINS(read_capture(cap), "capture.json: is a FIFO (pipe), not a regular file");
  }
}

}  // namespace
}  // namespace entgraph::test
