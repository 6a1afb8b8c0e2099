# Thin driver over CMake presets. `make demo` and `make test` install what is
# missing (Debian packages), build, and run; see README.md.
.PHONY: all deps build demo test test-release test-debug test-tsan wasm bench clean

all: build

deps:
	@tools/install_deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release

# The main job: every transform on a sample row; the shipped causal teacher
# over held-out text (first 4 KiB to fit predictors, last 4 KiB to test them),
# its gold graphs described; then every predictor swept into Pareto curves.
DEMO_DIR := build/demo
ENTGRAPH := ./build/release/native/cli/entgraph
demo: build
	$(ENTGRAPH) demo
	mkdir -p $(DEMO_DIR)
	head -c 4096 data/heldout.txt >$(DEMO_DIR)/train.txt
	tail -c 4096 data/heldout.txt >$(DEMO_DIR)/test.txt
	$(ENTGRAPH) capture --model data/teacher-causal --text $(DEMO_DIR)/train.txt --out $(DEMO_DIR)/causal-train
	$(ENTGRAPH) capture --model data/teacher-causal --text $(DEMO_DIR)/test.txt --out $(DEMO_DIR)/causal-test
	$(ENTGRAPH) info $(DEMO_DIR)/causal-test
	$(ENTGRAPH) sweep --train $(DEMO_DIR)/causal-train --test $(DEMO_DIR)/causal-test --out $(DEMO_DIR)/sweep-causal

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

# The core library compiled to WebAssembly with Debian's emscripten (needs
# the emscripten package; not part of `make test` yet).
wasm: deps
	cmake --preset wasm
	cmake --build --preset wasm

bench: build
	./build/release/native/bench/entgraph_bench --benchmark_format=console

clean:
	rm -rf build
