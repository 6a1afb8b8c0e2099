// entgraph: the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace entgraph {

// Thrown for every misuse of the public API: wrong shapes, NaN or +inf in
// scores, out-of-range hyperparameters, malformed files. The message follows
// "<op>: <what> (got X, expected Y)" and names the offending argument.
// Kernels never throw; validation happens once per call, before any output is
// written, so a call that throws leaves its output buffers untouched.
//
// Its code says what kind of failure it is, for programs (the C API, the
// JavaScript package) that act on it without reading the message. Every
// Error is a bad argument unless it says otherwise.
enum class ErrorCode {
  bad_argument,        // the call's arguments: shapes, ranges, settings, names
  bad_value,           // a value in the call's data: NaN or infinity in scores, q, k, v, spans
  bad_file,            // a file's contents: malformed, truncated, inconsistent, NaN inside
  limit,               // a size over a limit of the library or the caller (max_bytes, 2^32 keys, a file too large)
  io,                  // the system refused: a file that cannot be opened, read, written, renamed
  device_unavailable,  // the device cannot run anything here (no backend, no usable GPU)
  unsupported,         // the device has no kernel for this op or method: run it on cpu
};

// "bad_argument", "bad_value", ...: the code as the C API and JavaScript name it.
const char* error_code_name(ErrorCode code);

// A message as parts, so that a front end with names of its own (the
// JavaScript package) rewords it from data instead of parsing the C++ words:
// the C++ function that failed is a `where` part, a C++ name inside the text
// (an argument, an option, a helper) a `name` part, and the words of a C++
// library about itself (nlohmann::json's "[json.exception...] " tag) a
// `cpp_detail` part. what() is the parts joined, a `where` followed by ": ".
struct MessagePart {
  enum class Role { text, where, name, cpp_detail };
  Role role;
  std::string text;
};
const char* message_role_name(MessagePart::Role role);  // "text", "where", "name", "cpp_detail"

class Message {
 public:
  Message() = default;
  Message(std::string text) { append(MessagePart::Role::text, std::move(text)); }  // NOLINT: text converts
  Message(const char* text) : Message(std::string(text)) {}                        // NOLINT: text converts

  Message& append(MessagePart::Role role, std::string text);
  Message& operator+=(const Message& more);
  Message& operator+=(std::string text) { return append(MessagePart::Role::text, std::move(text)); }
  Message& operator+=(const char* text) { return *this += std::string(text); }

  const std::vector<MessagePart>& parts() const { return parts_; }
  std::string text() const;
  // The first part of the role, or "" (the op that failed, the argument named).
  std::string first(MessagePart::Role role) const;
  // Whether the message begins with `prefix`, part by part; and the message
  // without it (unchanged if it does not begin so).
  bool starts_with(const Message& prefix) const;
  Message without_prefix(const Message& prefix) const;
  // Each part's text with every `from` replaced by `to` (a temporary path by its label).
  Message replaced(const std::string& from, const std::string& to) const;

 private:
  std::vector<MessagePart> parts_;
};

// at_op("split_text") + cpp_name("max_bytes") + " must be >= 1"
inline Message at_op(std::string op) { return Message().append(MessagePart::Role::where, std::move(op)); }
inline Message cpp_name(std::string name) { return Message().append(MessagePart::Role::name, std::move(name)); }
inline Message cpp_detail(std::string words) { return Message().append(MessagePart::Role::cpp_detail, std::move(words)); }

inline Message operator+(Message a, const Message& b) { return a += b; }
inline Message operator+(Message a, std::string b) { return a += std::move(b); }
inline Message operator+(Message a, const char* b) { return a += b; }
inline Message operator+(std::string a, const Message& b) { return Message(std::move(a)) += b; }
inline Message operator+(const char* a, const Message& b) { return Message(a) += b; }

class Error : public std::invalid_argument {
 public:
  Error(const Message& message, ErrorCode code = ErrorCode::bad_argument)  // NOLINT: a string converts
      : std::invalid_argument(message.text()), code_(code), message_(message) {}
  Error(const std::string& message, ErrorCode code = ErrorCode::bad_argument)
      : Error(Message(message), code) {}
  Error(const char* message, ErrorCode code = ErrorCode::bad_argument) : Error(Message(message), code) {}

  ErrorCode code() const noexcept { return code_; }
  // The message in parts (what() is its text); the op that failed and the
  // first argument it names, as C++ spells them ("" where it names none).
  const Message& message() const noexcept { return message_; }
  std::string op() const { return message_.first(MessagePart::Role::where); }
  std::string argument() const { return message_.first(MessagePart::Role::name); }

 private:
  ErrorCode code_;
  Message message_;
};

// Runs body() for a reader of a file: an Error it throws as a bad argument or
// a bad value is the file's fault, and leaves as ErrorCode::bad_file (the
// same message); other codes (io, limit, device) pass unchanged.
template <class Body>
decltype(auto) reading_file(Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::bad_argument && e.code() != ErrorCode::bad_value) throw;
    throw Error(e.message(), ErrorCode::bad_file);
  }
}

}  // namespace entgraph
