// `xlctl submit --sbatch script.sh`: a Slurm batch script's #SBATCH lines
// become a JobSpec, so a Slurm user's scripts run unchanged where xl can
// honour them, and are refused, with the line named, where it cannot.
//
// What differs from Slurm, and how the script still runs: xl starts one
// process per task (nodes x ntasks-per-node) itself, so the script runs once
// per rank rather than once on the first node. Each rank gets Slurm's
// variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
// SLURM_JOB_ID, ...) from xl's, and `srun` inside the script runs its
// command in place (this rank is already one of the tasks). Pure: no I/O.
#ifndef XL_CLIENT_SBATCH_H_
#define XL_CLIENT_SBATCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xl/v1/job.pb.h"

namespace xl::client {

// The JobSpec of the script at `path` (absolute) whose contents are `text`,
// run with `args`. Reads the #SBATCH lines before the first command, as
// sbatch does. INVALID_ARGUMENT naming "path:line", the line and what to do
// instead for an option xl cannot honour or a malformed value.
absl::StatusOr<v1::JobSpec> JobSpecFromSbatch(
    const std::string& path, absl::string_view text,
    const std::vector<std::string>& args);

// Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS;
// "UNLIMITED" or "infinite" is none (0). Seconds, or false when malformed.
bool ParseSlurmTime(absl::string_view text, int64_t* seconds);

}  // namespace xl::client

#endif  // XL_CLIENT_SBATCH_H_
