#include "common/text.h"

#include <google/protobuf/descriptor.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xl {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

size_t FindControlCharacter(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return i;
    if (c == 0xC2 && i + 1 < s.size() &&
        static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      return i;
    }
  }
  return absl::string_view::npos;
}

namespace {

absl::Status Bad(const std::string& path, absl::string_view value, size_t at) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": has a control character (byte ", at, ", \\x",
      absl::StrFormat("%02x", static_cast<unsigned char>(value[at])),
      "); use printable characters"));
}

}  // namespace

absl::Status CheckNoControlCharacters(const Message& message,
                                      const std::string& path) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string here = absl::StrCat(path, ".", f->name());
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(message, f); ++i) {
          const std::string v = r->GetRepeatedString(message, f, i);
          if (size_t at = FindControlCharacter(v); at != absl::string_view::npos) {
            return Bad(absl::StrCat(here, "[", i, "]"), v, at);
          }
        }
      } else {
        const std::string v = r->GetString(message, f);
        if (size_t at = FindControlCharacter(v); at != absl::string_view::npos) {
          return Bad(here, v, at);
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(message, f); ++i) {
          // A map entry's key and value are its fields: named key/value.
          absl::Status st = CheckNoControlCharacters(
              r->GetRepeatedMessage(message, f, i), absl::StrCat(here, "[", i, "]"));
          if (!st.ok()) return st;
        }
      } else {
        absl::Status st =
            CheckNoControlCharacters(r->GetMessage(message, f), here);
        if (!st.ok()) return st;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace xl
