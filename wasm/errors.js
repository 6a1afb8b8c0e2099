// entgraph: the package's errors. Every Error it throws carries `code`, the
// kind of failure as the core names it (entgraph/error.hpp's ErrorCode):
// "bad_argument", "bad_value", "bad_file", "limit", "io",
// "device_unavailable", "unsupported"; or "out_of_memory", "internal". The
// package's own checks of its arguments throw "bad_argument"; a file that
// cannot be read or fetched is "io".
//
// detail: the message without the call in front (what a call that wraps this
// one puts after its own name); the message itself when not given.
export function entgraphError(message, code = "bad_argument", detail = message) {
  const error = new Error(message);
  error.code = code;
  error.detail = detail;
  return error;
}
