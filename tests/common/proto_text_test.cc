// Tests of YAML/JSON <-> protobuf through the JSON mapping, with
// xl.v1.JobSpec as the message: the descriptor-guided typing of scalars
// (string fields stay strings, bare numbers are seconds for Durations) and
// errors that name the field.
#include "common/proto_text.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "xl/v1/job.pb.h"

namespace xl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ProtoTextTest, ARangeForACountWithAMinTwin) {
  v1::JobSpec spec;
  absl::Status st = ParseYamlToMessage(
      "resources: {nodes: {min: 2, max: 8}, gpus_per_node: 8}\n", "test",
      &spec);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(spec.resources().nodes(), 8);
  EXPECT_EQ(spec.resources().min_nodes(), 2);
  for (const char* bad : {"resources: {nodes: {min: 2}}\n",
                          "resources: {nodes: {min: 2, max: 8, x: 1}}\n",
                          "resources: {nodes: {min: two, max: 8}}\n",
                          "resources: {nodes: {min: 0, max: 8}}\n",
                          "resources: {nodes: {min: +2, max: 8}}\n",
                          "resources: {nodes: {min: 3, max: 2}}\n",
                          "resources: {nodes: {min: 1, max: 2}, min_nodes: 1}\n"}) {
    v1::JobSpec s;
    st = ParseYamlToMessage(bad, "test", &s);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("resources.nodes: give a number, or a range"),
              std::string::npos)
        << st.message();
  }
}

TEST(ProtoTextTest, BatchPerRankAutoIsTheAutoFlag) {
  v1::JobSpec spec;
  absl::Status st = ParseYamlToMessage(
      "train: {batch_per_rank: auto, global_batch: 4096}\n", "test", &spec);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(spec.train().batch_per_rank_auto());
  EXPECT_EQ(spec.train().batch_per_rank(), 0);
  EXPECT_EQ(spec.train().global_batch(), 4096);
  // A number stays a number; auto beside the flag is refused by name; any
  // other word is the JSON parser's error on the field.
  ASSERT_TRUE(ParseYamlToMessage("train: {batch_per_rank: 32}\n", "t", &spec)
                  .ok());
  EXPECT_FALSE(spec.train().batch_per_rank_auto());
  EXPECT_EQ(spec.train().batch_per_rank(), 32);
  st = ParseYamlToMessage(
      "train: {batch_per_rank: auto, batch_per_rank_auto: true}\n", "t",
      &spec);
  EXPECT_THAT(st.message(), HasSubstr("train.batch_per_rank: auto, and "
                                      "batch_per_rank_auto beside it"));
  st = ParseYamlToMessage("train: {batch_per_rank: max}\n", "t", &spec);
  EXPECT_FALSE(st.ok());
  // Only TrainSpec's field: "auto" elsewhere is not rewritten.
  v1::ResourceRequest r;
  EXPECT_FALSE(ParseYamlToMessage("nodes: auto\n", "t", &r).ok());
}

TEST(ProtoTextTest, UnquotedNumbersInRepeatedStringFieldStayStrings) {
  v1::JobSpec spec;
  ASSERT_TRUE(ParseYamlToMessage(
                  "command: [python3, train.py, --steps, 50, 1.50, true]\n",
                  "test", &spec)
                  .ok());
  EXPECT_THAT(spec.command(), ElementsAre("python3", "train.py", "--steps",
                                          "50", "1.50", "true"));
}

TEST(ProtoTextTest, UnquotedScalarsInStringMapValuesStayStrings) {
  v1::JobSpec spec;
  absl::Status status = ParseYamlToMessage(
      "env: {PYTHONUNBUFFERED: 1, DEBUG: true, RATIO: 0.5, EMPTY: ''}\n",
      "test", &spec);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(spec.env().at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(spec.env().at("DEBUG"), "true");
  EXPECT_EQ(spec.env().at("RATIO"), "0.5");
  EXPECT_EQ(spec.env().at("EMPTY"), "");
}

TEST(ProtoTextTest, UnquotedNumberInStringFieldStaysString) {
  v1::JobSpec spec;
  ASSERT_TRUE(
      ParseYamlToMessage("name: 123\nqueue: 007\n", "test", &spec).ok());
  EXPECT_EQ(spec.name(), "123");
  EXPECT_EQ(spec.queue(), "007");  // The text as written, not the number 7.
}

TEST(ProtoTextTest, BareNumberForDurationIsSeconds) {
  v1::JobSpec spec;
  ASSERT_TRUE(
      ParseYamlToMessage("time_limit: 600\ngrace_period: 2.5\n", "test", &spec)
          .ok());
  EXPECT_EQ(spec.time_limit().seconds(), 600);
  EXPECT_EQ(spec.grace_period().seconds(), 2);
  EXPECT_EQ(spec.grace_period().nanos(), 500000000);
}

TEST(ProtoTextTest, DurationsInMinutesHoursAndDays) {
  v1::JobSpec spec;
  ASSERT_TRUE(ParseYamlToMessage("time_limit: 90m\ngrace_period: 1h30m\n",
                                 "test", &spec)
                  .ok());
  EXPECT_EQ(spec.time_limit().seconds(), 5400);
  EXPECT_EQ(spec.grace_period().seconds(), 5400);
  ASSERT_TRUE(ParseYamlToMessage("time_limit: 3d\n", "test", &spec).ok());
  EXPECT_EQ(spec.time_limit().seconds(), 3 * 86400);
  ASSERT_TRUE(ParseYamlToMessage("time_limit: 1.5s\n", "test", &spec).ok());
  EXPECT_EQ(spec.time_limit().nanos(), 500000000);
  EXPECT_FALSE(ParseYamlToMessage("time_limit: never\n", "test", &spec).ok());
  EXPECT_FALSE(ParseYamlToMessage("time_limit: 0d\n", "test", &spec).ok());
}

TEST(ProtoTextTest, NestedMessagesKeepNumbersForNumericFields) {
  v1::JobSpec spec;
  absl::Status status = ParseYamlToMessage(
      "resources:\n  nodes: 2\n  nic_gbps_per_node: 12.5\n"
      "  gpu_models: [H100, 4090]\n  min_gpu_memory_bytes: 85899345920\n",
      "test", &spec);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(spec.resources().nodes(), 2);
  EXPECT_DOUBLE_EQ(spec.resources().nic_gbps_per_node(), 12.5);
  EXPECT_THAT(spec.resources().gpu_models(), ElementsAre("H100", "4090"));
  EXPECT_EQ(spec.resources().min_gpu_memory_bytes(), 85899345920u);
}

TEST(ProtoTextTest, JsonNamesAreAcceptedToo) {
  v1::JobSpec spec;
  ASSERT_TRUE(ParseYamlToMessage("maxRetries: 3\nresources: {ranksPerNode: 4}\n"
                                 "workingDir: 42\n",
                                 "test", &spec)
                  .ok());
  EXPECT_EQ(spec.max_retries(), 3);
  EXPECT_EQ(spec.resources().ranks_per_node(), 4);
  EXPECT_EQ(spec.working_dir(), "42");
}

// What json.dumps writes is read as JSON: escapes YAML does not take
// (surrogate pairs) and keys longer than YAML's 1024-character limit.
TEST(ProtoTextTest, JsonDocumentsAreReadAsJson) {
  v1::JobSpec spec;
  const std::string key(1500, 'K');
  ASSERT_TRUE(ParseYamlToMessage(
                  "  {\"name\": \"smile \\ud83d\\ude00\", \"command\": "
                  "[\"/bin/true\"], \"env\": {\"" + key + "\": \"v\"}}",
                  "test", &spec)
                  .ok());
  EXPECT_EQ(spec.name(), "smile \xf0\x9f\x98\x80");
  EXPECT_EQ(spec.env().at(key), "v");
  // JSON that protobuf's parser refuses still gets YAML's conveniences.
  v1::JobSpec seconds;
  ASSERT_TRUE(ParseYamlToMessage(
                  "{\"command\": [\"/bin/true\", 50], \"time_limit\": 600}",
                  "test", &seconds)
                  .ok());
  EXPECT_EQ(seconds.time_limit().seconds(), 600);
  EXPECT_THAT(seconds.command(), ElementsAre("/bin/true", "50"));
  // A YAML flow mapping is no JSON: unquoted keys and YAML's escapes keep
  // their YAML meaning (protobuf's lenient JSON parser would read "\x01"
  // as "x01").
  v1::JobSpec flow;
  ASSERT_TRUE(ParseYamlToMessage("{name: \"a\\x01b\", command: [/bin/true]}",
                                 "test", &flow)
                  .ok());
  EXPECT_EQ(flow.name(), "a\x01" "b");
  // JSON that YAML reads keeps YAML's checks: a single value where a list
  // belongs is an error, not a one-word argv.
  v1::JobSpec single;
  absl::Status one = ParseYamlToMessage(
      "{\"command\": \"python3 train.py\"}", "test", &single);
  EXPECT_EQ(one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(one.message(), HasSubstr("command"));
  // And an error from either names the field.
  v1::JobSpec bad;
  absl::Status st =
      ParseYamlToMessage("{\"comand\": [\"/bin/true\"]}", "test", &bad);
  EXPECT_THAT(st.message(), HasSubstr("comand"));
}

// What yaml-cpp cannot read back (a key of 1024 characters or more, a NUL)
// is printed as JSON, which is YAML too: -o yaml never fails on another
// user's job (found by fuzz_proto_text: it threw).
TEST(ProtoTextTest, MessageToYamlPrintsAnyMessage) {
  v1::JobSpec spec;
  spec.add_command("/bin/true");
  (*spec.mutable_env())[std::string(1500, 'K')] = std::string("a\0b", 3);
  std::string yaml;
  ASSERT_NO_THROW(yaml = MessageToYaml(spec));
  v1::JobSpec back;
  ASSERT_TRUE(ParseYamlToMessage(yaml, "printed", &back).ok()) << yaml;
  EXPECT_EQ(back.env().at(std::string(1500, 'K')), std::string("a\0b", 3));
}

TEST(ProtoTextTest, UnknownFieldIsAnErrorNamingIt) {
  v1::JobSpec spec;
  absl::Status status = ParseYamlToMessage("nodez: 2\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("nodez"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("job.yaml"));

  status = ParseYamlToMessage("resources: {gpus: 8}\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("gpus"));
}

TEST(ProtoTextTest, WrongTypeIsAnErrorNamingTheField) {
  v1::JobSpec spec;
  absl::Status status =
      ParseYamlToMessage("priority: high\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("priority"));

  status = ParseYamlToMessage("command: python3 train.py\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("command"));

  status = ParseYamlToMessage("time_limit: soon\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("time_limit"));
}

TEST(ProtoTextTest, SyntaxErrorGivesLine) {
  v1::JobSpec spec;
  absl::Status status =
      ParseYamlToMessage("name: a\ncommand: [a, b\n", "job.yaml", &spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("line"));
}

TEST(ProtoTextTest, UntypedYamlToJsonKeepsYamlTypes) {
  auto json = YamlToJson("a: 50\nb: '50'\nc: [x, 1]\n");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(*json, R"({"a":50,"b":"50","c":["x",1]})");
}

TEST(ProtoTextTest, YamlOutputParsesBackToTheSameMessage) {
  v1::JobSpec spec;
  spec.set_name("007");
  spec.add_command("/usr/bin/python3");
  spec.add_command("50");
  (*spec.mutable_env())["PYTHONUNBUFFERED"] = "1";
  (*spec.mutable_env())["FLAG"] = "true";
  spec.mutable_resources()->set_nodes(2);
  spec.mutable_resources()->set_min_gpu_memory_bytes(85899345920u);
  spec.mutable_time_limit()->set_seconds(600);
  v1::JobSpec back;
  absl::Status status = ParseYamlToMessage(MessageToYaml(spec), "yaml", &back);
  ASSERT_TRUE(status.ok()) << status << "\n" << MessageToYaml(spec);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(spec, back))
      << back.DebugString();
}

}  // namespace
}  // namespace xl
