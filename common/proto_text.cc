#include "common/proto_text.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration.h"

namespace xl {

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

namespace {


// A plain (unquoted) YAML scalar keeps its YAML 1.2 core-schema type; a quoted
// one is always a string.
std::string ScalarToJson(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return JsonQuote(s);
  if (s == "true" || s == "True" || s == "TRUE") return "true";
  if (s == "false" || s == "False" || s == "FALSE") return "false";
  if (s == "null" || s == "~" || s.empty()) return "null";
  int64_t i;
  uint64_t u;
  double d;
  // Printed back as JSON numbers are written: "007" and "+5" are not JSON.
  if (absl::SimpleAtoi(s, &i)) return absl::StrCat(i);
  if (absl::SimpleAtoi(s, &u)) return absl::StrCat(u);
  if ((absl::SimpleAtod(s, &d)) &&
      s.find_first_not_of("0123456789+-.eE") == std::string::npos) {
    return s;
  }
  return JsonQuote(s);
}

void NodeToJson(const YAML::Node& node, std::string* out) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      *out += "null";
      return;
    case YAML::NodeType::Scalar:
      *out += ScalarToJson(node);
      return;
    case YAML::NodeType::Sequence: {
      *out += "[";
      bool first = true;
      for (const auto& item : node) {
        if (!first) *out += ",";
        first = false;
        NodeToJson(item, out);
      }
      *out += "]";
      return;
    }
    case YAML::NodeType::Map: {
      *out += "{";
      bool first = true;
      for (const auto& kv : node) {
        if (!first) *out += ",";
        first = false;
        *out += JsonQuote(kv.first.Scalar());
        *out += ":";
        NodeToJson(kv.second, out);
      }
      *out += "}";
      return;
    }
  }
}

// The field of `message` that a JSON key names: its proto name or its JSON
// (lowerCamel) name, as protobuf's JSON parser accepts both. Null when none.
const google::protobuf::FieldDescriptor* FindJsonField(
    const google::protobuf::Descriptor* message, const std::string& key) {
  if (const auto* field = message->FindFieldByName(key)) return field;
  for (int i = 0; i < message->field_count(); ++i) {
    if (message->field(i)->json_name() == key) return message->field(i);
  }
  return nullptr;
}

bool IsPlainNumber(const YAML::Node& node) {
  if (node.Tag() == "!") return false;
  const std::string& s = node.Scalar();
  int64_t i;
  uint64_t u;
  double d;
  if (absl::SimpleAtoi(s, &i) || absl::SimpleAtoi(s, &u)) return true;
  return absl::SimpleAtod(s, &d) &&
         s.find_first_not_of("0123456789+-.eE") == std::string::npos;
}

absl::Status TypedNodeToJson(const YAML::Node& node,
                             const google::protobuf::FieldDescriptor* field,
                             const std::string& path, bool element,
                             std::string* out);

// Like NodeToJson, but the scalars of fields whose type is string (or bytes)
// stay JSON strings however they look in YAML ("command: [train.py, 50]",
// "env: {DEBUG: 1}"), and a plain number given for a google.protobuf.Duration
// means seconds ("time_limit: 600" is "600s"). A single value where a list
// belongs is an error here, since protobuf's parser would silently take it as
// a list of one ("command: python3 train.py" is not an argv). Other
// mismatches are left to the JSON parser, whose error names the field.
absl::Status MessageNodeToJson(const YAML::Node& node,
                               const google::protobuf::Descriptor* message,
                               const std::string& path, std::string* out) {
  if (!node.IsMap()) {
    NodeToJson(node, out);
    return absl::OkStatus();
  }
  *out += "{";
  bool first = true;
  for (const auto& kv : node) {
    if (!first) *out += ",";
    first = false;
    const std::string& key = kv.first.Scalar();
    *out += JsonQuote(key);
    *out += ":";
    const auto* field = FindJsonField(message, key);
    if (field == nullptr) {
      NodeToJson(kv.second, out);  // The parser reports the unknown field.
      continue;
    }
    // "batch_per_rank: auto" is "batch_per_rank_auto: true" (TrainSpec
    // only): xl-train sizes the batch at start.
    if (message->full_name() == "xl.v1.TrainSpec" &&
        field->name() == "batch_per_rank" && kv.second.IsScalar() &&
        kv.second.Scalar() == "auto") {
      if (node["batch_per_rank_auto"] || node["batchPerRankAuto"]) {
        return absl::InvalidArgumentError(absl::StrCat(
            path.empty() ? key : path + "." + key,
            ": auto, and batch_per_rank_auto beside it; keep one"));
      }
      *out += "0,";
      *out += JsonQuote(
          message->FindFieldByName("batch_per_rank_auto")->json_name());
      *out += ":true";
      continue;
    }
    // An elastic job's nodes as a range: "nodes: {min: 2, max: 8}" is
    // "nodes: 8, min_nodes: 2" (ResourceRequest only).
    const auto* min_field =
        message->full_name() == "xl.v1.ResourceRequest" && key == "nodes"
            ? message->FindFieldByName("min_nodes")
            : nullptr;
    if (kv.second.IsMap() && min_field != nullptr) {
      const std::string where = path.empty() ? key : path + "." + key;
      const YAML::Node lo = kv.second["min"], hi = kv.second["max"];
      auto count = [](const YAML::Node& n) {
        const std::string& s = n.Scalar();
        return n.IsScalar() && !s.empty() && s.size() <= 9 &&
               s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (kv.second.size() != 2 || !lo || !hi || !count(lo) || !count(hi) ||
          std::stoi(lo.Scalar()) < 1 ||
          std::stoi(lo.Scalar()) > std::stoi(hi.Scalar()) ||
          node["min_nodes"] || node["minNodes"]) {
        return absl::InvalidArgumentError(absl::StrCat(
            where,
            ": give a number, or a range as {min: 2, max: 8} (1 <= min <= "
            "max, and no min_nodes beside it)"));
      }
      *out += hi.Scalar();
      *out += ",";
      *out += JsonQuote(min_field->json_name());
      *out += ":";
      *out += lo.Scalar();
      continue;
    }
    absl::Status status =
        TypedNodeToJson(kv.second, field, path.empty() ? key : path + "." + key,
                        /*element=*/false, out);
    if (!status.ok()) return status;
  }
  *out += "}";
  return absl::OkStatus();
}

// Converts `node`, the value of `field` at `path` (or, when `element` is
// true, one element or map value of it).
absl::Status TypedNodeToJson(const YAML::Node& node,
                             const google::protobuf::FieldDescriptor* field,
                             const std::string& path, bool element,
                             std::string* out) {
  using google::protobuf::Descriptor;
  using google::protobuf::FieldDescriptor;
  if (!element && field->is_map() && node.IsMap()) {
    const FieldDescriptor* value = field->message_type()->map_value();
    *out += "{";
    bool first = true;
    for (const auto& kv : node) {
      if (!first) *out += ",";
      first = false;
      *out += JsonQuote(kv.first.Scalar());
      *out += ":";
      absl::Status status = TypedNodeToJson(
          kv.second, value, path + "." + kv.first.Scalar(), true, out);
      if (!status.ok()) return status;
    }
    *out += "}";
    return absl::OkStatus();
  }
  if (!element && field->is_repeated() && !field->is_map()) {
    if (node.IsSequence()) {
      *out += "[";
      bool first = true;
      for (const auto& item : node) {
        if (!first) *out += ",";
        first = false;
        absl::Status status = TypedNodeToJson(item, field, path, true, out);
        if (!status.ok()) return status;
      }
      *out += "]";
      return absl::OkStatus();
    }
    if (node.IsScalar() || node.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": expected a list, like [a, b, c]; got a single value",
          node.IsScalar() ? absl::StrCat(" \"", node.Scalar(), "\"") : ""));
    }
  }
  if (node.IsScalar() && !node.Scalar().empty()) {
    const std::string& s = node.Scalar();
    bool is_null = node.Tag() != "!" && (s == "null" || s == "~");
    if (!is_null) {
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        *out += JsonQuote(s);
        return absl::OkStatus();
      }
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        switch (field->message_type()->well_known_type()) {
          case Descriptor::WELLKNOWNTYPE_STRINGVALUE:
          case Descriptor::WELLKNOWNTYPE_BYTESVALUE:
          case Descriptor::WELLKNOWNTYPE_TIMESTAMP:
          case Descriptor::WELLKNOWNTYPE_FIELDMASK:
            *out += JsonQuote(s);
            return absl::OkStatus();
          case Descriptor::WELLKNOWNTYPE_DURATION: {
            // Protobuf's JSON takes seconds only ("5400s"); people write
            // "90m", "2h" and "3d" too.
            absl::Duration d;
            if (IsPlainNumber(node)) {
              *out += JsonQuote(absl::StrCat(s, "s"));
            } else if (!absl::EndsWith(s, "s") && ParseLifetime(s, &d) &&
                       d != absl::InfiniteDuration()) {
              *out += JsonQuote(
                  absl::StrFormat("%.9fs", absl::ToDoubleSeconds(d)));
            } else {
              *out += JsonQuote(s);
            }
            return absl::OkStatus();
          }
          default:
            break;
        }
      }
    }
  }
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
      field->message_type()->well_known_type() ==
          Descriptor::WELLKNOWNTYPE_UNSPECIFIED) {
    return MessageNodeToJson(node, field->message_type(), path, out);
  }
  NodeToJson(node, out);
  return absl::OkStatus();
}

void JsonValueToYaml(const YAML::Node& node, YAML::Emitter* out) {
  *out << node;
}

}  // namespace

namespace {

// A strict RFC 8259 syntax check: quoted keys, the standard escapes only,
// no trailing commas or content, nesting at most 100 deep. Protobuf's JSON
// parser is more lenient (unquoted keys, unknown escapes): a YAML flow
// mapping like {name: "a\x01"} would pass it with another meaning, so only
// what this accepts is read as JSON.
class StrictJson {
 public:
  static bool Valid(absl::string_view text) {
    StrictJson p(text);
    return p.Value(0) && (p.Space(), p.i_ == text.size());
  }

 private:
  explicit StrictJson(absl::string_view text) : s_(text) {}

  void Space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool Eat(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Literal(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  bool Digits() {
    const size_t start = i_;
    while (i_ < s_.size() && absl::ascii_isdigit(s_[i_])) ++i_;
    return i_ > start;
  }
  bool Number() {
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (!Digits()) {
      return false;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!Digits()) return false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!Digits()) return false;
    }
    return true;
  }
  bool String() {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (++i_ >= s_.size()) return false;
      const char e = s_[i_];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k) {
          if (++i_ >= s_.size() || !absl::ascii_isxdigit(s_[i_])) return false;
        }
      } else if (absl::string_view("\"\\/bfnrt").find(e) ==
                 absl::string_view::npos) {
        return false;
      }
    }
    return false;
  }
  bool Value(int depth) {
    if (depth >= 100) return false;
    Space();
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{':
        ++i_;
        if (Eat('}')) return true;
        do {
          Space();
          if (!String() || !Eat(':') || !Value(depth + 1)) return false;
        } while (Eat(','));
        return Eat('}');
      case '[':
        ++i_;
        if (Eat(']')) return true;
        do {
          if (!Value(depth + 1)) return false;
        } while (Eat(','));
        return Eat(']');
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  absl::string_view s_;
  size_t i_ = 0;
};

// Whether yaml-cpp can read the document at all (its meaning aside).
bool YamlSyntaxOk(absl::string_view yaml) {
  try {
    (void)YAML::Load(std::string(yaml));
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

absl::StatusOr<YAML::Node> LoadYamlMapping(absl::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("YAML syntax error at line %d, column %d: %s",
                        e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        "expected a mapping of field names to values at the top level");
  }
  return root;
}

}  // namespace

absl::StatusOr<std::string> YamlToJson(absl::string_view yaml) {
  auto root = LoadYamlMapping(yaml);
  if (!root.ok()) return root.status();
  std::string out;
  NodeToJson(*root, &out);
  return out;
}

absl::StatusOr<std::string> YamlToJson(
    absl::string_view yaml, const google::protobuf::Descriptor* message) {
  auto root = LoadYamlMapping(yaml);
  if (!root.ok()) return root.status();
  std::string out;
  absl::Status status = MessageNodeToJson(*root, message, "", &out);
  if (!status.ok()) return status;
  return out;
}

absl::Status ParseYamlToMessage(absl::string_view yaml, absl::string_view what,
                                google::protobuf::Message* message) {
  auto json = YamlToJson(yaml, message->GetDescriptor());
  if (!json.ok() &&
      absl::StartsWith(absl::StripLeadingAsciiWhitespace(yaml), "{") &&
      !YamlSyntaxOk(yaml) && StrictJson::Valid(yaml)) {
    // YAML takes most JSON but not all of it: yaml-cpp cannot read
    // surrogate-pair escapes like \ud83d\ude00 or keys of 1024 characters
    // or more. A strictly valid JSON document it cannot read is read by
    // protobuf's JSON parser; every document YAML reads keeps the YAML
    // path's checks (a list where a list belongs, say) and errors.
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    std::unique_ptr<google::protobuf::Message> parsed(message->New());
    if (google::protobuf::util::JsonStringToMessage(
            google::protobuf::StringPiece(yaml.data(), yaml.size()),
            parsed.get(), options)
            .ok()) {
      message->CopyFrom(*parsed);
      return absl::OkStatus();
    }
  }
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", json.status().message()));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status =
      google::protobuf::util::JsonStringToMessage(*json, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", std::string(status.message()), " (fields and types are those of ",
        message->GetDescriptor()->full_name(),
        "; see the README's file format section)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string msg = absl::StrCat("cannot read ", path, ": ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InvalidArgumentError(msg);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status ReadYamlFileToMessage(const std::string& path,
                                   google::protobuf::Message* message) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseYamlToMessage(*text, path, message);
}

std::string MessageToJson(const google::protobuf::Message& message,
                          bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string MessageToYaml(const google::protobuf::Message& message) {
  const std::string json = MessageToJson(message, false);
  try {
    YAML::Node node = YAML::Load(json);
    YAML::Emitter out;
    out.SetIndent(2);
    JsonValueToYaml(node, &out);
    return std::string(out.c_str()) + "\n";
  } catch (const YAML::Exception&) {
    // yaml-cpp cannot read all JSON (keys of 1024 characters or more, some
    // escapes): a message holding such a value (another user's job, say)
    // is printed as JSON, which is YAML too, and reads back the same.
    std::string pretty = MessageToJson(message, true);
    absl::StripTrailingAsciiWhitespace(&pretty);
    return pretty + "\n";
  }
}

}  // namespace xl
