#include "client/job_file.h"
#include "client/sbatch.h"

#include <cmath>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/exit_code.h"
#include "common/duration.h"
#include "common/proto_text.h"
#include "common/status.h"

namespace xl::client {

absl::StatusOr<xl::v1::JobSpec> LoadJobFile(const std::string& path) {
  xl::v1::JobSpec spec;
  absl::Status status = xl::ReadYamlFileToMessage(path, &spec);
  if (!status.ok()) {
    // A missing or unreadable file is a mistake in the command line, not a
    // missing object at the scheduler: keep the message, use code 2.
    return UsageError(absl::StrCat("bad job file: ", status.message()));
  }
  return spec;
}

bool ParseNodeRange(const std::string& text, int32_t* min, int32_t* max) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos) {
    if (!absl::SimpleAtoi(text, max) || *max < 0) return false;
    *min = *max;
    return true;
  }
  // Digits only on each side ("+2" and " 2" are no counts).
  const std::string lo = text.substr(0, dash), hi = text.substr(dash + 1);
  for (const std::string& side : {lo, hi}) {
    if (side.empty() || side.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
  }
  return absl::SimpleAtoi(lo, min) && absl::SimpleAtoi(hi, max) && *min >= 1 &&
         *min <= *max;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value) {
  absl::Duration d;
  double seconds;
  if (absl::SimpleAtod(value, &seconds) && std::isfinite(seconds)) {
    d = absl::Seconds(seconds);
  } else if (!ParseLifetime(std::string(value), &d) ||
             d == absl::InfiniteDuration()) {
    return UsageError(absl::StrCat(
        flag, ": invalid duration \"", value,
        "\"; write it like 600s, 10m, 1h30m, 3d or a number of seconds"));
  }
  if (d < absl::ZeroDuration()) {
    return UsageError(
        absl::StrCat(flag, ": the duration must not be negative: ", value));
  }
  return d;
}

absl::Status ApplyOverrides(const JobOverrides& overrides,
                            xl::v1::JobSpec* spec) {
  if (overrides.name) spec->set_name(*overrides.name);
  if (overrides.queue) spec->set_queue(*overrides.queue);
  if (overrides.priority) spec->set_priority(*overrides.priority);
  if (overrides.max_retries) spec->set_max_retries(*overrides.max_retries);
  xl::v1::ResourceRequest* resources = spec->mutable_resources();
  if (overrides.nodes) resources->set_nodes(*overrides.nodes);
  if (overrides.min_nodes) resources->set_min_nodes(*overrides.min_nodes);
  if (overrides.ranks_per_node) {
    resources->set_ranks_per_node(*overrides.ranks_per_node);
  }
  if (overrides.gpus_per_node) {
    resources->set_gpus_per_node(*overrides.gpus_per_node);
  }
  if (overrides.time_limit) {
    ASSIGN_OR_RETURN(absl::Duration limit,
                     ParseDurationFlag("--time-limit", *overrides.time_limit));
    *spec->mutable_time_limit() = xl::ToProtoDuration(limit);
  }
  for (const std::string& entry : overrides.env) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageError(
          absl::StrCat("--env: expected KEY=VALUE, got \"", entry, "\""));
    }
    (*spec->mutable_env())[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const std::string& id : overrides.after_ok) spec->add_after_ok(id);
  for (const std::string& node : overrides.exclude_nodes) {
    spec->mutable_resources()->add_exclude_nodes(node);
  }
  if (!overrides.working_dir.empty()) {
    std::error_code ec;
    auto dir = std::filesystem::absolute(overrides.working_dir, ec);
    if (ec) {
      return UsageError(absl::StrCat("--working-dir: ", ec.message()));
    }
    spec->set_working_dir(dir.lexically_normal().string());
  }
  if (!overrides.command.empty()) {
    spec->clear_command();
    for (const std::string& arg : overrides.command) spec->add_command(arg);
  }
  return absl::OkStatus();
}

absl::StatusOr<xl::v1::JobSpec> BuildJobSpec(const std::string& path,
                                             const JobOverrides& overrides) {
  xl::v1::JobSpec spec;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(spec, LoadJobFile(path));
    if (!spec.working_dir().empty() && spec.working_dir()[0] != '/') {
      // Relative to the job file, as paths in a compose file are: the file
      // and its directory travel together.
      std::error_code ec;
      auto dir = std::filesystem::absolute(
          std::filesystem::path(path).parent_path() / spec.working_dir(), ec);
      if (ec) {
        return UsageError(absl::StrCat(path, ": working_dir: ", ec.message()));
      }
      spec.set_working_dir(dir.lexically_normal().string());
    }
  }
  RETURN_IF_ERROR(ApplyOverrides(overrides, &spec));
  if (spec.working_dir().empty()) {
    // As sbatch does: ranks start where the job was submitted from, so
    // relative paths in the command work on a shared or local filesystem.
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (!ec) spec.set_working_dir(cwd.string());
  }
  if (spec.command().empty() && !spec.has_train()) {
    return UsageError(
        path.empty()
            ? "no job file and no command: give a job file (xlctl submit "
              "JOB.yaml) or the command after -- (xlctl submit -- "
              "/usr/bin/python3 train.py)"
            : absl::StrCat(path,
                           ": the job has no command; add command: [...] "
                           "to the file or give it after --"));
  }
  return spec;
}

absl::StatusOr<xl::v1::JobSpec> BuildSbatchJobSpec(
    const std::string& script, const JobOverrides& overrides) {
  std::ifstream in(script);
  if (!in) {
    return UsageError(absl::StrCat("--sbatch: cannot read ", script, ": ",
                                   std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::error_code ec;
  const std::string absolute =
      std::filesystem::absolute(script, ec).lexically_normal().string();
  if (ec) return UsageError(absl::StrCat("--sbatch: ", script, ": ", ec.message()));
  JobOverrides rest = overrides;
  const std::vector<std::string> args = std::move(rest.command);
  rest.command.clear();
  auto spec = JobSpecFromSbatch(absolute, text.str(), args);
  if (!spec.ok()) return UsageError(spec.status().message());
  RETURN_IF_ERROR(ApplyOverrides(rest, &*spec));
  const auto cwd = std::filesystem::current_path(ec);
  if (!ec) {
    (*spec->mutable_env())["SLURM_SUBMIT_DIR"] = cwd.string();
    if (spec->working_dir().empty()) spec->set_working_dir(cwd.string());
  }
  return spec;
}

}  // namespace xl::client
