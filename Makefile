# Thin driver over CMake presets. `make demo` and `make test` install what is
# missing (Debian packages), build, and run; see README.md.
.PHONY: all deps build demo test test-release test-debug test-tsan wasm web bench clean

all: build

deps:
	@tools/install_deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release

# The main job: every transform on a sample row; then the demo page is built
# (make web), which captures the shipped teachers over held-out text (first
# 4 KiB to fit predictors, last 4 KiB to test them) and sweeps every predictor
# into Pareto curves; the causal teacher's gold graphs and Pareto table are
# printed from that work; then the page is served on http://localhost:8000
# (Ctrl-C stops; SERVE=0 skips serving).
ENTGRAPH := ./build/release/native/cli/entgraph
WEB_WORK := build/web-work
demo: build
	$(ENTGRAPH) demo
	$(MAKE) --no-print-directory web
	$(ENTGRAPH) info $(WEB_WORK)/causal-test
	cat $(WEB_WORK)/causal-sweep.txt
	@if [ "$(SERVE)" != "0" ]; then node web/serve.mjs build/web 8000; fi

# The release suite includes the JavaScript package's node tests and the demo
# page's browser tests, so it needs the wasm build and the page.
test-release: build wasm web
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

# The JavaScript package (docs/JAVASCRIPT.md): the core compiled to
# WebAssembly with Debian's emscripten, in build/wasm/package.
wasm: deps
	cmake --preset wasm
	cmake --build --preset wasm

# The in-browser demo page as a static folder, build/web/ (tools/build_web.sh):
# the page, the JavaScript package, both teachers, and every predictor fitted
# natively on held-out text. `make demo` serves it on http://localhost:8000
# (SERVE=0 skips); or run `node web/serve.mjs build/web 8000` yourself.
web: build wasm
	tools/build_web.sh build/web

bench: build
	./build/release/native/bench/entgraph_bench --benchmark_format=console

clean:
	rm -rf build

# Exact and fast attention on predicted graphs vs dense attention on the long
# teacher at n = 2048, 4096, 8192 (tools/bench_exact.sh; docs/PERFORMANCE.md).
.PHONY: bench-exact
bench-exact: build
	tools/bench_exact.sh

# WebAssembly vs native: native/bench/transform_timing.cpp built both ways,
# the package's JavaScript API and the teacher, timed in one run on the same
# inputs (tools/bench_wasm.mjs; docs/PERFORMANCE.md, "WebAssembly vs native").
.PHONY: bench-wasm
bench-wasm: build wasm
	node tools/bench_wasm.mjs

# Fuzzing (tests/fuzz, docs/FUZZING.md): clang's libFuzzer with ASan and
# UBSan, every target (.npy, safetensors, capture.json, predictor parameter
# files, teacher config) for FUZZ_SECONDS seconds each (default 60), on a copy
# of its seed corpus in build/fuzz/corpus/; prints the executions per target
# and fails on any finding. Debian's clang and libclang-rt-dev (libFuzzer)
# are installed if missing. Not part of `make test` (whose build replays the
# seed corpus: ctest fuzz.corpus.*).
.PHONY: fuzz
FUZZ_SECONDS ?= 60
fuzz:
	@tools/install_deps.sh clang libclang-rt-dev
	cmake --preset fuzz
	cmake --build --preset fuzz
	tests/fuzz/run_fuzz.sh build/fuzz $(FUZZ_SECONDS)

# entgraph's k-means against scikit-learn's KMeans (lloyd, k-means++, 10
# restarts), one thread, on a generated mixture of 16 Gaussians at k = 4, 8,
# 16, timed in one run (native/bench/kmeans_vs_sklearn.py; docs/PERFORMANCE.md,
# "k-means against scikit-learn"). Debian's python3-sklearn, if missing, is
# installed and run with the system Python it belongs to.
.PHONY: bench-kmeans
bench-kmeans: build
	@tools/install_deps.sh python3-sklearn
	/usr/bin/python3 native/bench/kmeans_vs_sklearn.py \
	    --bin build/release/native/bench/entgraph_bench_kmeans --out build/bench-kmeans

# The demo page in Chromium: keystroke-to-paint for both teachers at three
# settings, and the first load (requests, bytes, time to the first graph);
# timings in build/test-artifacts/browser/ (docs/PERFORMANCE.md, "The demo
# page in workers").
.PHONY: bench-page
bench-page: build wasm web
	ENTGRAPH_PAGE_BENCH=full node --test tests/browser/performance.test.mjs
	node --test --test-name-pattern="first load" tests/browser/worker.test.mjs
