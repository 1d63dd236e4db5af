// The parts of `xlctl submit --sbatch` (sbatch.h) that JobSpecFromSbatch
// puts together: the #SBATCH options (sbatch_options.cc) that fill a
// Request and a JobSpec line by line, the Slurm values they parse
// (sbatch_values.cc), and the resources made from the Request once every
// line is read (sbatch_resources.cc). Internal to those files. Stateless
// functions; safe from any thread.
#ifndef XL_CLIENT_SBATCH_REQUEST_H_
#define XL_CLIENT_SBATCH_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xl/v1/job.pb.h"

namespace xl::client::sbatch {

// Counts (nodes, tasks, CPUs, GPUs) above this are refused as typos; it
// also keeps every product of two counts within int64.
inline constexpr int64_t kMaxCount = 1'000'000;
// resources.exclude_nodes holds at most this many names.
inline constexpr size_t kMaxExcluded = 1000;

// One #SBATCH line: its number and its text, to name it in a refusal.
struct ScriptLine {
  int number = 0;
  std::string text;
};

// A value and the line that asked for it.
template <typename T>
struct Said {
  T value{};
  ScriptLine line;
};

// What the #SBATCH lines ask for that becomes the ResourceRequest only once
// every line is read: tasks, nodes and GPUs depend on each other.
struct Request {
  std::optional<Said<int>> nodes;  // the most nodes
  int min_nodes = 0;               // below nodes: an elastic job
  std::optional<Said<int>> ntasks;
  std::optional<Said<int>> ntasks_per_node;
  std::optional<Said<int>> cpus_per_task;
  // GPUs per node as --gres=gpu and --gpus-per-node say them; as in
  // Slurm, an option given twice keeps its last value.
  std::optional<Said<int>> gres_gpus;
  std::optional<Said<int>> gpus_per_node;
  std::optional<Said<int>> gpus;  // --gpus: over the whole job
  std::optional<Said<int>> gpus_per_task;
  std::optional<Said<std::string>> gpu_model;
  std::optional<Said<int>> switches;
};

// Returns the refusal of `line` in `path`: "path:4: `#SBATCH ...`: why".
inline absl::Status Refusal(const std::string& path, const ScriptLine& line,
                            absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ":", line.number, ": `", line.text, "`: ", why));
}

// sbatch_options.cc

// The long option a short one stands for (sbatch's letters), or "".
absl::string_view LongName(char letter);
// Whether the option `name` (long) is one xl honours that takes a value.
bool TakesValue(absl::string_view name);
// Applies one option (its long name, and its value where it takes one) to
// `req` and `spec`. Returns the refusal of `line` for an option xl cannot
// honour or a malformed value.
absl::Status ApplyOption(const std::string& path, const ScriptLine& line,
                         const std::string& name, const std::string& value,
                         Request* req, v1::JobSpec* spec);

// sbatch_values.cc: each returns false for a malformed value.

// Parses a count between 1 and kMaxCount.
bool ParseCount(absl::string_view text, int* n);
// Parses "[TYPE:]N" (--gpus, --gpus-per-node, --gpus-per-task): the count
// (0 allowed) and the GPU type, unchanged when none is given.
bool ParseTypedCount(absl::string_view text, int* count, std::string* type);
// Slurm's sizes: a whole number, then K, M (the default), G or T.
bool ParseSlurmMemory(absl::string_view text, uint64_t* bytes);
// Expands a Slurm host list, "n1,gpu[01-03,7]": names joined by commas,
// each with at most one bracketed list of numbers and ranges (leading zeros
// kept). Returns false for anything else or more than kMaxExcluded names.
bool ExpandHostList(absl::string_view text, std::vector<std::string>* names);
// A name the scheduler takes as an environment variable.
bool IsEnvName(absl::string_view name);

// sbatch_resources.cc

// Turns the counts into spec->resources(): nodes, ranks per node, GPUs and
// CPUs per node. Refuses counts that contradict each other, naming the line
// of the later one.
absl::Status ResolveResources(const std::string& path, const Request& req,
                              v1::JobSpec* spec);

}  // namespace xl::client::sbatch

#endif  // XL_CLIENT_SBATCH_REQUEST_H_
