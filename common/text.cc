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

// The length of the UTF-8 sequence that starts at s[i] and its code point,
// or 0 where s[i] starts no well-formed sequence (overlong forms and
// surrogates included).
size_t Utf8Sequence(absl::string_view s, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t lead = byte(i);
  size_t n;
  uint32_t cp;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  *code_point = cp;
  return n;
}

absl::Status Bad(const std::string& path, absl::string_view value, size_t at) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": has a control character (byte ", at, ", \\x",
      absl::StrFormat("%02x", static_cast<unsigned char>(value[at])),
      "); use printable characters"));
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8Sequence(text, i, &cp);
    if (n == 0) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x",
                                            static_cast<uint8_t>(text[i])));
      ++i;
      continue;
    }
    if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == 0x1B) {
      out += "\\e";
    } else if (cp < 0x20 || cp == 0x7F) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", cp));
    } else if ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x200B && cp <= 0x200F) ||
               (cp >= 0x2028 && cp <= 0x202E) ||
               (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF) {
      // C1 controls; and what reorders or hides text (bidi overrides and
      // isolates, zero-width characters, line separators): a name must not
      // make a row read as something else.
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", cp));
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  return out;
}

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
