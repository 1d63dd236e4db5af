// Fuzzes the files xl-agent and xl-rank-shim share (agent/shim/rank_shim.h):
// the whole input is read as a spec (DecodeSpec, what the shim reads as root
// before it becomes the job's user) and as a status file (DecodeStatus, what
// the agent reads from every shim, of any version).
// Properties: a refused spec says why; an accepted one is well framed up to
// its "end" (checked here on its own), has a command and a working
// directory, no value longer than the input, and encodes to bytes
// that decode to the same spec and encode again to the same bytes; an
// accepted status comes back whole through EncodeStatus, and a rank that
// ran has a pid > 1.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "agent/shim/rank_shim.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using xl::agent::shim::DecodeSpec;
using xl::agent::shim::DecodeStatus;
using xl::agent::shim::EncodeSpec;
using xl::agent::shim::EncodeStatus;
using xl::agent::shim::Spec;
using xl::agent::shim::Status;

// The spec's framing, read independently of DecodeSpec: fields
// "<name> <length>\n<value>\n" up to one named "end".
bool WellFramed(absl::string_view data) {
  while (true) {
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) return false;
    const absl::string_view head = data.substr(0, nl);
    const size_t space = head.rfind(' ');
    uint64_t length = 0;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtoi(head.substr(space + 1), &length)) {
      return false;
    }
    const absl::string_view rest = data.substr(nl + 1);
    if (length >= rest.size() || rest[length] != '\n') return false;
    if (head.substr(0, space) == "end") return true;
    data = rest.substr(length + 1);
  }
}

void CheckSpec(absl::string_view data) {
  Spec spec;
  std::string error;
  if (!DecodeSpec(data, &spec, &error)) {
    XL_FUZZ_CHECK(!error.empty(), "a refusal without words");
    return;
  }
  XL_FUZZ_CHECK(WellFramed(data), "accepted a spec that is not well framed");
  XL_FUZZ_CHECK(
      !spec.argv.empty() && !spec.program.empty() && !spec.dir.empty(),
      "accepted without a command or working directory");
  for (const std::string* value :
       {&spec.job_id, &spec.lease_file, &spec.dir, &spec.program,
        &spec.search_path, &spec.user_name, &spec.cgroup_dir,
        &spec.checkpoint_dir, &spec.record}) {
    XL_FUZZ_CHECK(value->size() <= data.size(), "a value beyond the input");
  }
  for (const auto& dir : spec.dirs) {
    XL_FUZZ_CHECK(dir.mode >= 0 && dir.mode <= 07777, dir.path);
  }
  const std::string encoded = EncodeSpec(spec);
  Spec again;
  XL_FUZZ_CHECK(DecodeSpec(encoded, &again, &error), error);
  XL_FUZZ_CHECK(EncodeSpec(again) == encoded, "the round trip changed it");
}

void CheckStatus(absl::string_view data) {
  Status status;
  if (!DecodeStatus(data, &status)) return;
  if (status.phase == Status::kRunning || status.phase == Status::kExited ||
      status.phase == Status::kDone) {
    XL_FUZZ_CHECK(status.pid > 1, std::to_string(status.pid));
  }
  const std::string encoded = EncodeStatus(status);
  Status again;
  XL_FUZZ_CHECK(DecodeStatus(encoded, &again), encoded);
  XL_FUZZ_CHECK(again.phase == status.phase && again.pid == status.pid &&
                    again.node_fault == status.node_fault &&
                    again.wait_status == status.wait_status &&
                    again.stdout_bytes == status.stdout_bytes &&
                    again.stderr_bytes == status.stderr_bytes &&
                    again.stdout_dropped == status.stdout_dropped &&
                    again.stderr_dropped == status.stderr_dropped &&
                    again.lease_stop == status.lease_stop &&
                    again.message == status.message,
                encoded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  CheckSpec(input);
  CheckStatus(input);
  return 0;
}
