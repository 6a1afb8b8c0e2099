// The process's environment for getenv() (emscripten gives a program a fixed
// one of its own): ENTGRAPH_TEST_TARGETS, ENTGRAPH_TEST_KNOWN_FAILURES, ...
Module["preRun"] = Module["preRun"] || [];
Module["preRun"].push(function () {
  Object.assign(ENV, process.env);
});
