// Fuzzes the scheduler's validation of submitted specs (ValidateJobSpec).
// The first byte picks how the rest becomes a JobSpec: protobuf's binary
// wire format (what a gRPC client sends) or its text format (readable
// seeds).
// Properties: every error is INVALID_ARGUMENT and names a field; an accepted
// spec has what the scheduler relies on (a program, no NUL in argv or env,
// valid env names, at least one node and rank, an absolute or empty
// working directory, a grace period), and validating it again changes
// nothing.
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/scheduler/job_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  xl::v1::JobSpec spec;
  if (data[0] & 1) {
    google::protobuf::TextFormat::Parser parser;
    parser.AllowPartialMessage(true);
    if (!parser.ParseFromString(rest, &spec)) return 0;
  } else if (!spec.ParseFromString(rest)) {
    return 0;
  }

  absl::Status st = xl::scheduler::ValidateJobSpec(&spec);
  if (!st.ok()) {
    XL_FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument,
                  st.ToString());
    XL_FUZZ_CHECK(st.message().find(": ") != absl::string_view::npos,
                  st.ToString());
    return 0;
  }
  XL_FUZZ_CHECK(spec.command_size() > 0 && !spec.command(0).empty(),
                spec.DebugString());
  for (const std::string& arg : spec.command()) {
    XL_FUZZ_CHECK(arg.find('\0') == std::string::npos, "NUL in argv");
  }
  for (const auto& [key, value] : spec.env()) {
    XL_FUZZ_CHECK(!key.empty() && key.find('=') == std::string::npos &&
                      key.find('\0') == std::string::npos,
                  key);
    XL_FUZZ_CHECK(value.find('\0') == std::string::npos, "NUL in env");
    XL_FUZZ_CHECK(!xl::scheduler::IsReservedEnv(key), key);
  }
  XL_FUZZ_CHECK(spec.resources().nodes() >= 1, spec.DebugString());
  XL_FUZZ_CHECK(spec.resources().ranks_per_node() >= 1, spec.DebugString());
  XL_FUZZ_CHECK(spec.working_dir().empty() || spec.working_dir()[0] == '/',
                spec.working_dir());
  // chdir() would stop at a NUL and run the job somewhere else.
  XL_FUZZ_CHECK(spec.working_dir().find('\0') == std::string::npos,
                "NUL in working_dir");
  XL_FUZZ_CHECK(spec.has_grace_period(), spec.DebugString());
  XL_FUZZ_CHECK(!spec.queue().empty(), spec.DebugString());

  xl::v1::JobSpec again = spec;
  // A train job's command is filled in by the first validation.
  if (!again.has_train()) {
    absl::Status st2 = xl::scheduler::ValidateJobSpec(&again);
    XL_FUZZ_CHECK(st2.ok(), st2.ToString());
    // NaN (a model's comm_share, say) equals itself here: validating twice
    // changes nothing.
    google::protobuf::util::MessageDifferencer differencer;
    google::protobuf::util::DefaultFieldComparator comparator;
    comparator.set_treat_nan_as_equal(true);
    differencer.set_field_comparator(&comparator);
    XL_FUZZ_CHECK(differencer.Compare(spec, again), spec.DebugString());
  }
  return 0;
}
