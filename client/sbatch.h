// `xlctl submit --sbatch script.sh`: a Slurm batch script's #SBATCH lines
// become a JobSpec, so a Slurm user's scripts run unchanged where xl can
// honour them, and are refused, with the line named, where it cannot.
//
// What differs from Slurm, and how the script still runs: xl starts one
// process per task (nodes x ntasks-per-node) itself, so the script runs once
// per rank rather than once on the first node. Each rank gets Slurm's
// variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
// SLURM_JOB_ID, ...) from xl's, and `srun` inside the script runs its
// command in place (this rank is already one of the tasks).
//
// Stateless and safe from any thread. Reads no file: the caller passes the
// script's text.
#ifndef XL_CLIENT_SBATCH_H_
#define XL_CLIENT_SBATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xl/v1/job.pb.h"

namespace xl::client {

// Returns the JobSpec of the Slurm batch script at `path` whose contents are
// `text`, run with `script_args` after the script's path. Reads the #SBATCH
// lines before the first command, as sbatch does; the command runs the
// script with /bin/bash once per rank (see above). A relative `path`, and a
// relative --chdir, are taken from the current directory (as sbatch does);
// `--export=VAR` without a value reads VAR from this process's environment.
// Returns INVALID_ARGUMENT "path:line: `line`: why; what to do instead" for
// an option xl cannot honour, a malformed value or options that contradict
// each other.
absl::StatusOr<v1::JobSpec> JobSpecFromSbatch(
    const std::string& path, absl::string_view text,
    const std::vector<std::string>& script_args);

// Parses Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or
// D-HH:MM:SS; "0", "-1", "UNLIMITED" and "infinite" mean none (0). Sets
// `*seconds` and returns true, or returns false for anything else,
// including a value over a million days.
bool ParseSlurmTime(absl::string_view text, int64_t* seconds);

}  // namespace xl::client

#endif  // XL_CLIENT_SBATCH_H_
