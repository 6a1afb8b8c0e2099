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
#include <unistd.h>

#include "entgraph/io/capture.hpp"
#include "entgraph/io/npy.hpp"
#include "io/binary.hpp"
#include "io/output_folder.hpp"
#include "io/io_test_support.hpp"

namespace entgraph::test {
namespace {

namespace fs = std::filesystem;

// While alive, files of this process may not grow past `bytes` (ulimit -f):
// a write past it fails with EFBIG (SIGXFSZ ignored) as on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved_;
    small.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*handler_)(int) = nullptr;
};

void write_string(const std::string& path, const std::string& text) {
  detail::write_file_bytes("test", path, text.data(), text.size());
}

// A manifest listing its files as committed: "plain=committed;" each.
std::string manifest_of(const detail::OutputFolder::Names& names) {
  std::string text;
  for (const auto& [plain, committed] : names) text += plain + "=" + committed + ";";
  return text;
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

    const std::vector<float> big(100000, 2.0f);
    std::string message;
    {
      FileSizeLimit limit(4096);
      try {
        write_npy(path, big.data(), {big.size()});
      } catch (const Error& e) {
        message = e.what();
      }
    }

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

  TEST_CASE("OutputFolder: a new folder appears whole at commit, or not at all (nor its missing parents)") {
    TempDir dir;
    const detail::OutputFolder::ManifestText manifest = manifest_of;
    const std::string target = dir.file("a/b/out");
    {
      detail::OutputFolder out("test", target);
      write_string(out.path("x.txt"), "x");
      CHECK_FALSE(fs::exists(target));
    }  // dropped before commit
    CHECK(listing(dir.path()).empty());
    {
      detail::OutputFolder out("test", target + "/");
      write_string(out.path("x.txt"), "x");
      out.commit({"x.txt"}, "m.json", manifest);
    }
    CHECK(listing(target) == std::vector<std::string>{"m.json", "x.txt"});
    CHECK(listing(dir.file("a/b")) == std::vector<std::string>{"out"});
    write_string(dir.file("file"), "f");
    CHECK_ERROR_CONTAINS(detail::OutputFolder("test", dir.file("file")), "test: " + dir.file("file") + ": exists and is not a folder");
    CHECK_ERROR_CONTAINS(detail::OutputFolder("test", dir.file("file/sub")), "cannot create a folder to write into");
    CHECK_ERROR_CONTAINS(detail::OutputFolder("test", ""), "the output folder name is empty");
  }

  TEST_CASE("OutputFolder: in an existing folder, the named files are replaced at commit and others left alone") {
    TempDir dir;
    write_string(dir.file("mine.txt"), "the user's");
    write_string(dir.file("m.json"), "old manifest");
    write_string(dir.file("x.txt"), "old x");
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("x.txt"), "new x");
      write_string(out.path("m.json"), "new manifest");
      CHECK(read_text(dir.file("x.txt")) == "old x");
    }  // dropped: nothing changed, no staging folder left
    CHECK(listing(dir.path()) == std::vector<std::string>{"m.json", "mine.txt", "x.txt"});
    CHECK(read_text(dir.file("m.json")) == "old manifest");
    fs::create_directory(dir.file("y.txt"));
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("y.txt"), "y");
      CHECK_ERROR_CONTAINS(out.commit({"y.txt"}, "m.json", manifest_of), "y.txt: cannot replace it (a folder is in the way)");
    }
    CHECK(read_text(dir.file("m.json")) == "old manifest");  // checked before the old manifest goes
    fs::remove(dir.file("y.txt"));
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("x.txt"), "new x");
      out.commit({"x.txt"}, "m.json", manifest_of);
      // Committed under a generation name, then given the plain name back.
      CHECK(out.names().at("x.txt") == "x.txt");
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"m.json", "mine.txt", "x.txt"});
    CHECK(read_text(dir.file("x.txt")) == "new x");
    CHECK(read_text(dir.file("m.json")) == "x.txt=x.txt;");
    CHECK(read_text(dir.file("mine.txt")) == "the user's");
  }

  TEST_CASE("OutputFolder: a commit cleans what a killed writer left, and keeps a manifest naming generations valid") {
    TempDir dir;
    // What a writer killed after its commit point leaves: the manifest names
    // generation 3; plain and generation-2 files, and a staging folder of a
    // process that no longer exists, are left over.
    write_string(dir.file("x.txt"), "old plain x");
    write_string(dir.file("x.g2.txt"), "orphan");
    write_string(dir.file("x.g3.txt"), "current x");
    write_string(dir.file("x.g04.txt"), "not a generation name: the user's");
    write_string(dir.file("m.json"), "x.txt=x.g3.txt;");
    fs::create_directory(dir.file(".entgraph-staging-999999999-0"));
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("x.txt"), "new x");
      out.prepare({"x.txt"}, "m.json", manifest_of);
      CHECK(out.names().at("x.txt") == "x.g4.txt");  // above every generation there
      CHECK(read_text(dir.file("m.json")) == "x.txt=x.g3.txt;");  // nothing a reader sees changed yet
      out.commit();
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"m.json", "x.g04.txt", "x.txt"});
    CHECK(read_text(dir.file("x.txt")) == "new x");
    CHECK(read_text(dir.file("m.json")) == "x.txt=x.txt;");
    // prepare() without commit(): the files it moved in go again.
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("x.txt"), "newer x");
      out.prepare({"x.txt"}, "m.json", manifest_of);
      CHECK(fs::exists(dir.file("x.g1.txt")));
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"m.json", "x.g04.txt", "x.txt"});
    CHECK(read_text(dir.file("x.txt")) == "new x");
  }

  TEST_CASE("OutputFolder: files without a manifest are replaced at commit, and rollback() puts the old ones back") {
    TempDir dir;
    write_string(dir.file("a.json"), "old a");
    write_string(dir.file("mine.txt"), "the user's");
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("a.json"), "new a");
      write_string(out.path("b.json"), "new b");
      out.commit({"a.json", "b.json"});
      CHECK(read_text(dir.file("a.json")) == "new a");
      CHECK(read_text(dir.file("b.json")) == "new b");
      out.rollback();
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"a.json", "mine.txt"});
    CHECK(read_text(dir.file("a.json")) == "old a");
    // A failure part-way (the second file cannot be moved: it was never
    // staged) puts back the first.
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("a.json"), "new a");
      CHECK_ERROR_CONTAINS(out.commit({"a.json", "b.json"}), "b.json: cannot move it into place");
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"a.json", "mine.txt"});
    CHECK(read_text(dir.file("a.json")) == "old a");
    {
      detail::OutputFolder out("test", dir.path());
      write_string(out.path("a.json"), "new a");
      out.commit({"a.json"});
    }
    CHECK(listing(dir.path()) == std::vector<std::string>{"a.json", "mine.txt"});
    CHECK(read_text(dir.file("a.json")) == "new a");
    // A new folder: rollback() removes it again.
    {
      detail::OutputFolder out("test", dir.file("new/sub"));
      write_string(out.path("a.json"), "a");
      out.commit({"a.json"});
      CHECK(fs::exists(dir.file("new/sub/a.json")));
      out.rollback();
    }
    CHECK_FALSE(fs::exists(dir.file("new")));
  }

  TEST_CASE("captures: a capture that fails half-way (file size limit) leaves the old one byte-identical") {
    TempDir dir;
    const std::string cap = dir.file("cap");
    Capture old = Capture::make(2, 2, 4, {8}, true);
    for (float& x : old.queries) x = 0.5f;
    write_capture(cap, old);
    const std::vector<std::string> files = listing(cap);
    std::vector<Bytes> before;
    for (const std::string& f : files) before.push_back(read_bytes(cap + "/" + f));

    const Capture big = Capture::make(2, 2, 4, {4000}, true);  // 512 KB per array
    for (int use_writer = 0; use_writer < 2; ++use_writer) {
      CAPTURE(use_writer);
      std::string message;
      {
        FileSizeLimit limit(100000);
        try {
          if (use_writer) {
            CaptureWriter w(cap, 2, 2, 4, {4000}, true, big.settings);
            w.write_sequence(0, big.queries, big.keys, big.values);
            w.finish();
          } else {
            write_capture(cap, big);
          }
        } catch (const Error& e) {
          message = e.what();
        }
      }
      CHECK(message.find("File too large") != std::string::npos);
      CHECK(listing(cap) == files);  // no staging folder left either
      for (std::size_t i = 0; i < files.size(); ++i) CHECK(read_bytes(cap + "/" + files[i]) == before[i]);
      CHECK(listing(dir.path()) == std::vector<std::string>{"cap"});
    }
    write_capture(cap, big);  // without the limit
    CHECK(read_capture(cap).tokens() == 4000);
    std::uintmax_t total = 0;
    for (const std::string& f : listing(cap)) total += fs::file_size(cap + "/" + f);
    CHECK(total == capture_file_bytes(2, 2, 4, {4000}, true, big.settings));
  }

  TEST_CASE("captures: a read-only folder is an error that changes nothing") {
    if (geteuid() == 0) {
      MESSAGE("skipped: running as root, which can write into read-only folders");
      return;
    }
    TempDir dir;
    const std::string cap = dir.file("cap");
    const Capture old = Capture::make(1, 1, 2, {3}, false);
    write_capture(cap, old);
    const Bytes json = read_bytes(cap + "/capture.json");
    fs::permissions(cap, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_ERROR_CONTAINS(write_capture(cap, Capture::make(1, 1, 2, {5}, false)), "cannot create a folder to write into");
    fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_ERROR_CONTAINS(write_capture(dir.file("new"), old), "cannot create a folder to write into");
    fs::permissions(dir.path(), fs::perms::owner_all);
    fs::permissions(cap, fs::perms::owner_all);
    CHECK(read_bytes(cap + "/capture.json") == json);
    CHECK(listing(cap) == std::vector<std::string>{"capture.json", "keys.npy", "queries.npy"});
    CHECK(listing(dir.path()) == std::vector<std::string>{"cap"});
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
