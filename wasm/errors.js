// entgraph: the package's errors. Every Error it throws carries `code`, the
// kind of failure as the core names it (entgraph/error.hpp's ErrorCode):
// "bad_argument", "bad_value", "bad_file", "limit", "io",
// "device_unavailable", "unsupported"; or "out_of_memory", "internal". The
// package's own checks of its arguments throw "bad_argument"; a file that
// cannot be read or fetched is "io".
export function entgraphError(message, code = "bad_argument") {
  const error = new Error(message);
  error.code = code;
  return error;
}
