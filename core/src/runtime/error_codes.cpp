// The names of entgraph::ErrorCode and MessagePart::Role, as the C API and
// JavaScript give them, and Message's parts.
#include "entgraph/error.hpp"

namespace entgraph {

const char* error_code_name(ErrorCode code) {
  // No default: -Wswitch names a code added without its name.
  switch (code) {
    case ErrorCode::bad_argument: return "bad_argument";
    case ErrorCode::bad_value: return "bad_value";
    case ErrorCode::bad_file: return "bad_file";
    case ErrorCode::limit: return "limit";
    case ErrorCode::io: return "io";
    case ErrorCode::device_unavailable: return "device_unavailable";
    case ErrorCode::unsupported: return "unsupported";
  }
  return "unknown";
}

const char* message_role_name(MessagePart::Role role) {
  switch (role) {
    case MessagePart::Role::text: return "text";
    case MessagePart::Role::where: return "where";
    case MessagePart::Role::name: return "name";
    case MessagePart::Role::cpp_detail: return "cpp_detail";
  }
  return "text";
}

Message& Message::append(MessagePart::Role role, std::string text) {
  if (text.empty() && role == MessagePart::Role::text) return *this;
  // Adjacent text parts merge, so a message built piece by piece stays short.
  if (role == MessagePart::Role::text && !parts_.empty() && parts_.back().role == MessagePart::Role::text)
    parts_.back().text += text;
  else
    parts_.push_back({role, std::move(text)});
  return *this;
}

Message& Message::operator+=(const Message& more) {
  for (const MessagePart& part : more.parts_) append(part.role, part.text);
  return *this;
}

std::string Message::text() const {
  std::string all;
  for (const MessagePart& part : parts_) {
    all += part.text;
    if (part.role == MessagePart::Role::where) all += ": ";
  }
  return all;
}

std::string Message::first(MessagePart::Role role) const {
  for (const MessagePart& part : parts_)
    if (part.role == role) return part.text;
  return {};
}

bool Message::starts_with(const Message& prefix) const {
  const std::vector<MessagePart>& head = prefix.parts_;
  if (head.size() > parts_.size()) return false;
  for (std::size_t i = 0; i < head.size(); ++i) {
    const MessagePart& mine = parts_[i];
    if (mine.role != head[i].role) return false;
    const bool last = i + 1 == head.size();
    // The prefix's last text part may end inside one of this message's (text parts merge).
    if (last && mine.role == MessagePart::Role::text ? mine.text.rfind(head[i].text, 0) != 0 : mine.text != head[i].text)
      return false;
  }
  return true;
}

Message Message::without_prefix(const Message& prefix) const {
  if (!starts_with(prefix) || prefix.parts_.empty()) return *this;
  const std::size_t n = prefix.parts_.size();
  Message rest;
  if (parts_[n - 1].role == MessagePart::Role::text)  // what is left of a merged text part
    rest.append(MessagePart::Role::text, parts_[n - 1].text.substr(prefix.parts_.back().text.size()));
  for (std::size_t i = n; i < parts_.size(); ++i) rest.append(parts_[i].role, parts_[i].text);
  return rest;
}

Message Message::replaced(const std::string& from, const std::string& to) const {
  Message out;
  for (MessagePart part : parts_) {
    if (!from.empty())
      for (std::size_t at = part.text.find(from); at != std::string::npos; at = part.text.find(from, at + to.size()))
        part.text.replace(at, from.size(), to);
    out.append(part.role, std::move(part.text));
  }
  return out;
}

}  // namespace entgraph
