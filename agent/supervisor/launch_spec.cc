#include "agent/supervisor/launch_spec.h"

#include "absl/strings/str_cat.h"
#include "agent/shim/exec_child.h"
#include "common/duration.h"

namespace xl::agent {

bool SafePathComponent(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos) {
    return false;
  }
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

absl::Status CheckStartRanks(const v1::StartRanks& request) {
  if (!SafePathComponent(request.job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", request.job_id(),
                     "\" cannot name a directory; the scheduler "
                     "must send a plain id"));
  }
  if (request.argv_size() == 0 || request.argv(0).empty()) {
    return absl::InvalidArgumentError(
        "empty command; set command in the job spec");
  }
  return absl::OkStatus();
}

std::string AttemptName(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "-", attempt);
}

std::string AttemptTmpDir(const std::string& work_dir,
                          const v1::StartRanks& request) {
  return absl::StrCat(work_dir, "/tmp/",
                      AttemptName(request.job_id(), request.attempt()));
}

absl::Duration RankGrace(const v1::StartRanks& request,
                         absl::Duration default_grace) {
  absl::Duration grace = FromProto(request.grace_period());
  return grace <= absl::ZeroDuration() ? default_grace : grace;
}

v1::ResourceLimits AttemptLimits(const v1::StartRanks& request,
                                 const LaunchSettings& settings) {
  v1::ResourceLimits limits = request.limits();
  if (limits.memory_bytes() == 0) {
    limits.set_memory_bytes(settings.default_memory_bytes);
  }
  if (limits.max_processes() == 0) {
    limits.set_max_processes(settings.default_max_processes);
  }
  return limits;
}

namespace {

// The rank's environment, by name (BuildRankSpec says what goes in it).
// Directories the default checkpoint directory needs go to `dirs`.
std::map<std::string, std::string> RankEnv(
    const v1::StartRanks& request, const v1::RankLaunch& launch,
    const LaunchSettings& settings, const AttemptPlace& attempt,
    const std::map<std::string, std::string>& agent_env,
    std::vector<shim::DirStep>* dirs) {
  // The job's shared part first; the rank's own entries win.
  std::map<std::string, std::string> env(request.env().begin(),
                                         request.env().end());
  for (const auto& [name, value] : launch.env()) env[name] = value;
  if (env.find("XL_CHECKPOINT_DIR") == env.end()) {
    const std::string all = absl::StrCat(settings.scratch_dir, "/checkpoints");
    std::string checkpoints = absl::StrCat(all, "/", request.job_id());
    const std::string fix = "; fix the scratch path in the node's inventory";
    dirs->push_back({all, 0711, false, "checkpoint directory", fix});
    dirs->push_back({checkpoints, 0700, true, "checkpoint directory", fix});
    env["XL_CHECKPOINT_DIR"] = checkpoints;
  }
  // The shim's pipe is there, whatever the job asked.
  env["XL_METRICS_FD"] = absl::StrCat(kMetricsFd);
  env.emplace("TMPDIR", attempt.tmp_dir);
  if (settings.run_as == RunAs::kSubmitter) {
    env.emplace("HOME", attempt.user.home);
    env.emplace("USER", attempt.user.name);
    env.emplace("LOGNAME", attempt.user.name);
  }
  for (const char* name : kInheritedEnv) {
    auto inherited = agent_env.find(name);
    if (inherited != agent_env.end()) env.emplace(name, inherited->second);
  }
  return env;
}

// What a later agent needs to adopt the rank (Supervisor::Adopt).
std::string RankRecord(const v1::StartRanks& request,
                       const v1::RankLaunch& launch,
                       const LaunchSettings& settings,
                       const AttemptPlace& attempt, int64_t grace_ms) {
  return absl::StrCat(
      "job ", request.job_id(), "\nattempt ", request.attempt(), "\nrank ",
      launch.rank(), "\ngrace_ms ", grace_ms, "\nuser ", attempt.user.name,
      "\nuid ", attempt.user.uid, "\ngid ", attempt.user.gid, "\ntmp_dir ",
      attempt.tmp_dir, "\nboot ", settings.boot_id, "\n",
      attempt.has_cgroup
          ? absl::StrCat("cgroup ",
                         AttemptName(request.job_id(), request.attempt()),
                         "\nmemory_limit ", attempt.cgroup.memory_limit, "\n")
          : "");
}

}  // namespace

shim::Spec BuildRankSpec(const v1::StartRanks& request,
                         const v1::RankLaunch& launch,
                         const LaunchSettings& settings,
                         const AttemptPlace& attempt,
                         const std::map<std::string, std::string>& agent_env) {
  const std::string& job_id = request.job_id();
  shim::Spec spec;
  spec.job_id = job_id;
  spec.attempt = request.attempt();
  spec.rank = launch.rank();
  spec.lease_file = settings.state_dir + "/lease";
  spec.grace_ms =
      absl::ToInt64Milliseconds(RankGrace(request, settings.default_grace));
  spec.dir = request.working_dir();
  if (spec.dir.empty()) {
    // jobs/ lets every user through to their own job's directory only.
    const std::string job_dir =
        absl::StrCat(settings.work_dir, "/jobs/", job_id);
    spec.dir = absl::StrCat(job_dir, "/", request.attempt());
    const std::string fix = "; check the agent's --work-dir";
    spec.dirs.push_back(
        {settings.work_dir + "/jobs", 0711, false, "jobs directory", fix});
    spec.dirs.push_back({job_dir, 0700, true, "job directory", fix});
    spec.dirs.push_back({spec.dir, 0700, true, "working directory", fix});
  }
  const std::map<std::string, std::string> env =
      RankEnv(request, launch, settings, attempt, agent_env, &spec.dirs);
  spec.program = request.argv(0);
  if (spec.program == "xl-train" && !settings.train_binary.empty()) {
    spec.program = settings.train_binary;
  }
  auto path = env.find("PATH");
  spec.search_path = path == env.end() ? "/usr/bin:/bin" : path->second;
  for (const auto& [name, value] : env) {
    spec.env.push_back(absl::StrCat(name, "=", value));
  }
  spec.argv.assign(request.argv().begin(), request.argv().end());
  spec.change_user = settings.run_as == RunAs::kSubmitter;
  spec.uid = attempt.user.uid;
  spec.gid = attempt.user.gid;
  spec.groups.assign(attempt.user.groups.begin(), attempt.user.groups.end());
  spec.user_name = attempt.user.name;
  if (attempt.has_cgroup) {
    spec.cgroup_procs = attempt.cgroup.procs_files;
    spec.cgroup_dir = attempt.cgroup.dir;
  }
  spec.checkpoint_dir = request.checkpoint_dir();
  spec.open_files = settings.rank_open_files;
  spec.record = RankRecord(request, launch, settings, attempt, spec.grace_ms);
  return spec;
}

}  // namespace xl::agent
