// The scheduler child process of the benchmarks (start, measure, stop; it
// dies with the benchmark) and small helpers they share.
#include "tests/bench/fleet_sim_lib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "xl/v1/agent.grpc.pb.h"

namespace xl::bench {

// --- SchedulerProcess --------------------------------------------------------

namespace {

// Process groups of the schedulers alive; lock-free so that signal handlers
// may read them.
constexpr int kMaxChildren = 16;
std::atomic<pid_t> g_children[kMaxChildren];

// Async-signal-safe: kill and waitpid only.
void KillChildren() {
  for (auto& child : g_children) {
    pid_t pid = child.exchange(0);
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
}

extern "C" void KillChildrenAndExit(int sig) {
  KillChildren();
  _exit(128 + sig);
}

}  // namespace

void InstallSchedulerReaper() {
  static std::once_flag once;
  std::call_once(once, [] {
    atexit(KillChildren);
    struct sigaction sa = {};
    sa.sa_handler = KillChildrenAndExit;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  });
}

absl::StatusOr<std::unique_ptr<SchedulerProcess>> SchedulerProcess::Start(
    const std::string& binary, const std::string& dir,
    const std::vector<std::string>& extra_args, const std::string& listen) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "scheduler binary ", binary,
        " is not an executable file; build it (ninja xl-scheduler) or pass "
        "--scheduler-binary"));
  }
  std::unique_ptr<SchedulerProcess> p(new SchedulerProcess());
  const std::string port_file = dir + "/port";
  p->db_ = dir + "/xl.db";
  p->log_ = dir + "/scheduler.log";
  std::vector<std::string> args = {binary,        "--listen", listen,
                                   "--port-file", port_file,  "--db",
                                   p->db_,
                                   // The benchmarks submit as one user as
                                   // fast as they can: no per-user limits.
                                   "--max-pending-per-user", "0",
                                   "--submit-rate-per-user", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd =
      open(p->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", p->log_));
  }
  int slot = -1;
  for (int i = 0; i < kMaxChildren && slot < 0; ++i) {
    if (g_children[i].load() == 0) slot = i;
  }
  if (slot < 0) {
    close(log_fd);
    return absl::ResourceExhaustedError("too many schedulers started");
  }
  const pid_t parent = getpid();
  // Between fork and exec the child (of a process that may run threads)
  // makes only async-signal-safe calls.
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  if (pid < 0) return absl::InternalError("fork failed");
  setpgid(pid, pid);  // also here, so the group exists before any kill
  p->pid_ = pid;
  g_children[slot].store(pid);
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  while (SteadyClock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g_children[slot].store(0);
      p->pid_ = 0;
      return absl::FailedPreconditionError(
          absl::StrCat("the scheduler exited at start (status ", status,
                       "); its log:\n", p->LogTail(2000)));
    }
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      p->port_ = port;
      return p;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string tail = p->LogTail(2000);
  p->Stop();
  return absl::FailedPreconditionError(absl::StrCat(
      "the scheduler wrote no port within 30 s; its log:\n", tail));
}

SchedulerProcess::~SchedulerProcess() { Stop(); }

bool SchedulerProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
  exit_status_ = status;
  kill(-pid_, SIGKILL);  // anything it left in its group
  for (auto& child : g_children) {
    pid_t expected = pid_;
    child.compare_exchange_strong(expected, 0);
  }
  pid_ = 0;
  return false;
}

std::string SchedulerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

SchedulerProcess::Memory SchedulerProcess::ReadMemory() const {
  Memory m;
  if (pid_ <= 0) return m;
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    uint64_t kb = 0;
    if (sscanf(line.c_str(), "VmHWM: %lu kB", &kb) == 1)
      m.peak_bytes = kb << 10;
    if (sscanf(line.c_str(), "VmRSS: %lu kB", &kb) == 1) m.rss_bytes = kb << 10;
  }
  return m;
}

double SchedulerProcess::CpuSeconds() const {
  if (pid_ <= 0) return -1;
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces): state is the 3rd
  // field, utime the 14th, stime the 15th.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 1));
  std::string f;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = strtoull(f.c_str(), nullptr, 10);
    if (i == 15) stime = strtoull(f.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

uint64_t SchedulerProcess::DatabaseBytes() const {
  uint64_t total = 0;
  for (const std::string& f : {db_, db_ + "-wal"}) {
    std::error_code ec;
    auto size = std::filesystem::file_size(f, ec);
    if (!ec) total += size;
  }
  return total;
}

std::string SchedulerProcess::LogTail(size_t bytes) const {
  std::ifstream in(log_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

void SchedulerProcess::Stop(SteadyClock::duration grace) {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  const auto deadline = SteadyClock::now() + grace;
  bool reaped = false;
  while (SteadyClock::now() < deadline) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      reaped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The whole group, in case the scheduler started anything.
  kill(-pid_, SIGKILL);
  if (!reaped) waitpid(pid_, nullptr, 0);
  for (auto& child : g_children) {
    pid_t expected = pid_;
    child.compare_exchange_strong(expected, 0);
  }
  pid_ = 0;
}

// --- helpers ---------------------------------------------------------------

absl::StatusOr<std::vector<v1::Node>> ListAllNodes(
    v1::NodeService::Stub* stub) {
  std::vector<v1::Node> out;
  std::string token;
  for (int page = 0; page < 10000; ++page) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    v1::ListNodesRequest req;
    req.set_page_size(2000);
    req.set_page_token(token);
    v1::ListNodesResponse resp;
    grpc::Status st = stub->ListNodes(&ctx, req, &resp);
    if (!st.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("ListNodes: ", st.error_message()));
    }
    for (auto& node : *resp.mutable_nodes()) out.push_back(std::move(node));
    if (resp.next_page_token().empty()) return out;
    if (resp.next_page_token() == token) {
      return absl::InternalError(
          "ListNodes returned the same page token twice");
    }
    token = resp.next_page_token();
  }
  return absl::OutOfRangeError("ListNodes: more than 10,000 pages");
}

std::shared_ptr<grpc::Channel> ControlChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<std::string> MakeTempDir(const std::string& tag) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / ("xl-" + tag + "-XXXXXX"))
          .string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a directory like ", pattern));
  }
  return pattern;
}

}  // namespace xl::bench
