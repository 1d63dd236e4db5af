// YAML and JSON files <-> protobuf messages, through protobuf's JSON mapping
// (a YAML document is turned into JSON, then parsed by
// google::protobuf::util::JsonStringToMessage), so no field is parsed by hand.
// Stateless; safe from any thread.
#ifndef XL_COMMON_PROTO_TEXT_H_
#define XL_COMMON_PROTO_TEXT_H_

#include <string>

#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xl {

// Converts a YAML (or JSON, which is YAML) document to a JSON string.
// INVALID_ARGUMENT with the line and column of a syntax error.
absl::StatusOr<std::string> YamlToJson(absl::string_view yaml);

// Converts a YAML document meant for `message` to JSON. Scalars of string
// fields stay strings however they look (an unquoted 50 in a repeated string
// field is "50"), and a plain number for a google.protobuf.Duration field means
// seconds (600 is "600s"); everything else is converted as above.
// INVALID_ARGUMENT naming the field for a single value where a list belongs
// (protobuf's parser would take "command: python3 train.py" as one argument).
absl::StatusOr<std::string> YamlToJson(
    absl::string_view yaml, const google::protobuf::Descriptor* message);

// Parses a YAML or JSON document into `message` (converted to JSON with the
// message's descriptor, as above). Unknown fields and wrong types are
// INVALID_ARGUMENT naming the field. `what` names the input in messages ("job file x.yaml").
absl::Status ParseYamlToMessage(absl::string_view yaml, absl::string_view what,
                                google::protobuf::Message* message);

// Reads the file at `path` and parses it as above.
absl::Status ReadYamlFileToMessage(const std::string& path,
                                   google::protobuf::Message* message);

// The message in protobuf's JSON mapping; pretty-printed, default fields kept
// out.
std::string MessageToJson(const google::protobuf::Message& message,
                          bool pretty = true);

// The message as YAML (the JSON mapping, printed as block YAML).
std::string MessageToYaml(const google::protobuf::Message& message);

// `s` as a JSON string literal, quotes included (RFC 8259 escapes; UTF-8
// passes as is).
std::string JsonQuote(absl::string_view s);

// Reads a whole file. NOT_FOUND or PERMISSION_DENIED name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace xl

#endif  // XL_COMMON_PROTO_TEXT_H_
