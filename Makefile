# Thin driver over CMake presets. `make demo` and `make test` install what is
# missing (Debian packages), build, and run; see README.md.
.PHONY: all deps build demo test test-release test-debug test-tsan bench clean

all: build

deps:
	@tools/install_deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release

# The main job: every transform on a sample row, then the shipped causal
# teacher run over held-out text and its gold attention graphs described.
DEMO_DIR := build/demo
demo: build
	./build/release/native/cli/entgraph demo
	./build/release/native/cli/entgraph capture --model data/teacher-causal --text data/heldout.txt \
	  --max-sequences 16 --out $(DEMO_DIR)/capture-causal
	./build/release/native/cli/entgraph info $(DEMO_DIR)/capture-causal

test-release: build
	ctest --preset release

test-debug: deps
	cmake --preset debug
	cmake --build --preset debug
	ctest --preset debug

# ThreadSanitizer build of the core tests (not part of `make test`).
test-tsan: deps
	cmake --preset tsan
	cmake --build --preset tsan
	ctest --preset tsan

# Release suite (with CLI and install tests), then the sanitizer build of the
# core tests; ctest's summary of each is printed, the sanitizer one last.
test: test-release test-debug

bench: build
	./build/release/native/bench/entgraph_bench --benchmark_format=console

clean:
	rm -rf build
