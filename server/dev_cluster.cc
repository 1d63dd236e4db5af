#include "server/dev_cluster.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace xl::server {

absl::StatusOr<DevCluster> DevCluster::Create(bool keep) {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/xl-dev-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", templ, ": ", strerror(errno),
        "; set TMPDIR to a writable directory"));
  }
  DevCluster c;
  c.dir_ = buf.data();
  c.keep_ = keep;
  return c;
}

DevCluster::~DevCluster() {
  if (dir_.empty()) return;
  StopAgents(10);
  if (!keep_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::Status DevCluster::StartAgents(
    const std::string& agent_binary, const std::string& scheduler, int count,
    const std::vector<std::string>& inventories) {
  for (int i = 0; i < count; ++i) {
    std::string name = absl::StrCat("dev-", i);
    std::string work = absl::StrCat(dir_, "/", name);
    mkdir(work.c_str(), 0755);
    // One person's cluster on one machine, often started as root: every
    // job runs as that person, root included.
    std::vector<std::string> args = {agent_binary, "--scheduler", scheduler,
                                     "--work-dir", work, "--name", name,
                                     "--run-as", "agent", "--allow-root-jobs"};
    if (i < static_cast<int>(inventories.size())) {
      args.push_back("--inventory");
      args.push_back(inventories[i]);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawn(&pid, agent_binary.c_str(), nullptr, nullptr,
                         argv.data(), environ);
    if (rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start ", agent_binary, ": ", strerror(rc),
                       "; build it (see README) or pass --agent-binary"));
    }
    agents_.push_back(pid);
  }
  return absl::OkStatus();
}

void DevCluster::StopAgents(int grace_s) {
  for (pid_t pid : agents_) kill(pid, SIGTERM);
  absl::Time deadline = absl::Now() + absl::Seconds(grace_s);
  for (pid_t pid : agents_) {
    while (true) {
      pid_t r = waitpid(pid, nullptr, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) break;
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  agents_.clear();
}

absl::StatusOr<std::string> FindAgentBinary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto dir = self.parent_path();
    for (auto candidate : {dir / "xl-agent", dir / ".." / "agent" / "xl-agent"}) {
      if (access(candidate.c_str(), X_OK) == 0) {
        return std::filesystem::weakly_canonical(candidate).string();
      }
    }
  }
  const char* path = getenv("PATH");
  for (auto dir : absl::StrSplit(path ? path : "", ':')) {
    std::string candidate = absl::StrCat(dir, "/xl-agent");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      "cannot find xl-agent next to xl-scheduler or in PATH; build it or "
      "pass --agent-binary");
}

}  // namespace xl::server
