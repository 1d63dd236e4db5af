// Validation and defaults of a submitted JobSpec. Every error is
// INVALID_ARGUMENT and names the field at fault and the fix. Pure; safe from
// any thread.
#ifndef XL_SERVER_SCHEDULER_JOB_SPEC_H_
#define XL_SERVER_SCHEDULER_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

// Environment variables xl sets for every rank; a job may not set them.
bool IsReservedEnv(const std::string& name);

// 1-64 letters, digits, '-', '_' or '.'.
bool ValidQueueName(const std::string& s);

// A value the caller sent, as an error message shows it: at most 64 bytes,
// bytes outside printable ASCII as \xNN.
std::string Shown(const std::string& value);

// Checks `spec` and fills in defaults (queue "default", nodes 1,
// ranks_per_node = gpus_per_node or 1, grace period 10s). Leaves `spec`
// unspecified on error.
absl::Status ValidateJobSpec(v1::JobSpec* spec);

// A checkpoint directory (JobSpec.checkpoint_dir, a queue's
// default_checkpoint_dir): empty, or an absolute path of at most 1024
// bytes without control characters or '..', whose only braces are {job},
// {attempt} and {user}. The error names `field`.
absl::Status ValidateCheckpointDir(const std::string& field,
                                   const std::string& dir);
// `dir` with {job}, {attempt} and {user} replaced; {user} becomes one path
// component (characters other than letters, digits, '.', '_' and '-' as
// '_'). A {user} level keeps one user from squatting another's directories
// by guessing the next job id.
std::string ExpandCheckpointDir(const std::string& dir,
                                const std::string& job_id, int32_t attempt,
                                const std::string& user);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_JOB_SPEC_H_
