// Job files: a YAML (or JSON) document that maps onto xl.v1.JobSpec through
// protobuf's JSON mapping, and the `xlctl submit` flags that override its
// fields. Nothing here talks to the scheduler; every error is
// INVALID_ARGUMENT and names the field or flag at fault.
// Stateless; safe from any thread.
#ifndef XL_CLIENT_JOB_FILE_H_
#define XL_CLIENT_JOB_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "xl/v1/job.pb.h"

namespace xl::client {

// "4" (4 and 4) or "2-8" (2 and 8): --nodes. False unless 1 <= min <=
// max in a range (a single number may be 0: the default).
bool ParseNodeRange(const std::string& text, int32_t* min, int32_t* max);

// The fields `xlctl submit` can set from the command line. An unset optional
// leaves the job file's value alone.
struct JobOverrides {
  std::optional<std::string> name;
  std::optional<std::string> queue;
  std::optional<int32_t> priority;
  std::optional<int32_t> nodes;
  // With nodes: an elastic job's minimum (0: not elastic).
  std::optional<int32_t> min_nodes;
  std::optional<int32_t> ranks_per_node;
  std::optional<int32_t> gpus_per_node;
  std::optional<int32_t> max_retries;
  // "600s", "10m", "1h30m", or a plain number of seconds.
  std::optional<std::string> time_limit;
  // "KEY=VALUE" entries, added to (or replacing in) the file's env.
  std::vector<std::string> env;
  // Job ids added to the file's after_ok: start only after they succeed.
  std::vector<std::string> after_ok;
  // Nodes added to resources.exclude_nodes: never run there.
  std::vector<std::string> exclude_nodes;
  // Absolute or relative to the current directory; empty keeps the file's.
  std::string working_dir;
  // The argv given after `--`; replaces the file's command when not empty.
  std::vector<std::string> command;
};

// Reads the job file at `path`. INVALID_ARGUMENT naming the path and the field
// for a malformed file, an unknown field or a value of the wrong type; also
// INVALID_ARGUMENT (not NOT_FOUND) when the file cannot be read, since that is
// an error in the command line.
absl::StatusOr<xl::v1::JobSpec> LoadJobFile(const std::string& path);

// Applies `overrides` to `spec`. INVALID_ARGUMENT naming the flag for a bad
// --env or --time-limit.
absl::Status ApplyOverrides(const JobOverrides& overrides,
                            xl::v1::JobSpec* spec);

// The spec to submit: the job file at `path` (none when empty) with the
// overrides applied; working_dir defaults to the current directory. INVALID_ARGUMENT when the result has no command.
absl::StatusOr<xl::v1::JobSpec> BuildJobSpec(const std::string& path,
                                             const JobOverrides& overrides);

// The spec of `xlctl submit --sbatch SCRIPT [flags] [-- ARGS]`: the
// script's #SBATCH lines (client/sbatch.h), then the flags (which win, as
// sbatch's command line wins over its script), the arguments after -- given
// to the script. INVALID_ARGUMENT naming the script's line for what xl
// cannot honour.
absl::StatusOr<xl::v1::JobSpec> BuildSbatchJobSpec(
    const std::string& script, const JobOverrides& overrides);

// Parses a duration flag: "600s", "10m", "1h30m", "250ms", or a plain number
// of seconds. INVALID_ARGUMENT naming `flag` for anything else or a negative
// duration.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value);

}  // namespace xl::client

#endif  // XL_CLIENT_JOB_FILE_H_
