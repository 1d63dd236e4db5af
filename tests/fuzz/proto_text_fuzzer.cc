// Fuzzes the YAML/JSON-to-protobuf path (common/proto_text): YamlToJson
// without and with a message's descriptor, ParseYamlToMessage, and the way
// back (MessageToJson, MessageToYaml). The first byte picks the message the
// document is meant for (JobSpec, NodeInventory, TrainSpec, ModelSpec, Job);
// the rest is the document.
// Properties: errors are INVALID_ARGUMENT; a parsed message printed as JSON
// or as YAML parses back to the same message (xl-agent --print-inventory's
// output is a valid --inventory file).
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/proto_text.h"
#include "tests/fuzz/fuzz_util.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"
#include "xl/v1/plan.pb.h"

namespace {

std::unique_ptr<google::protobuf::Message> NewMessage(uint8_t which) {
  switch (which % 5) {
    case 0: return std::make_unique<xl::v1::JobSpec>();
    case 1: return std::make_unique<xl::v1::NodeInventory>();
    case 2: return std::make_unique<xl::v1::TrainSpec>();
    case 3: return std::make_unique<xl::v1::ModelSpec>();
    default: return std::make_unique<xl::v1::Job>();
  }
}

bool Same(const google::protobuf::Message& a,
          const google::protobuf::Message& b) {
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_message_field_comparison(
      google::protobuf::util::MessageDifferencer::EQUIVALENT);
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view doc(reinterpret_cast<const char*>(data + 1),
                              size - 1);
  auto message = NewMessage(data[0]);

  auto untyped = xl::YamlToJson(doc);
  if (!untyped.ok()) {
    XL_FUZZ_CHECK(untyped.status().code() == absl::StatusCode::kInvalidArgument,
                  untyped.status().ToString());
  }
  auto typed = xl::YamlToJson(doc, message->GetDescriptor());
  if (!typed.ok()) {
    XL_FUZZ_CHECK(typed.status().code() == absl::StatusCode::kInvalidArgument,
                  typed.status().ToString());
  }

  absl::Status parsed = xl::ParseYamlToMessage(doc, "fuzz input", message.get());
  if (!parsed.ok()) {
    XL_FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument,
                  parsed.ToString());
    return 0;
  }

  // Printed as JSON (what xlctl -o json shows), it reads back the same.
  const std::string json = xl::MessageToJson(*message);
  auto from_json = NewMessage(data[0]);
  google::protobuf::util::JsonParseOptions options;
  auto st = google::protobuf::util::JsonStringToMessage(json, from_json.get(),
                                                        options);
  XL_FUZZ_CHECK(st.ok(), std::string(st.message()) + "\n" + json);
  XL_FUZZ_CHECK(Same(*message, *from_json), json);

  // Printed as YAML (xl-agent --print-inventory), it reads back the same.
  const std::string yaml = xl::MessageToYaml(*message);
  auto from_yaml = NewMessage(data[0]);
  absl::Status back = xl::ParseYamlToMessage(yaml, "printed", from_yaml.get());
  XL_FUZZ_CHECK(back.ok(), back.ToString() + "\n" + yaml);
  XL_FUZZ_CHECK(Same(*message, *from_yaml),
                yaml + "\nread back as\n" + from_yaml->DebugString());
  return 0;
}
