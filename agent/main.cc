// xl-agent: reports this node to the scheduler and runs the ranks it assigns.
// main parses flags, builds the inventory, starts the supervisor (which
// adopts the ranks an earlier agent left running) and the session. SIGTERM
// leaves the ranks running for the next agent (an upgrade, a restart);
// SIGINT, or SIGTERM with --drain, stops every rank with its job's grace.
// Either exits 0. Signals are blocked in every thread and taken by sigwait()
// here.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "agent/agent_metrics.h"
#include "agent/inventory/inventory.h"
#include "agent/isolation/cgroup.h"
#include "agent/isolation/user.h"
#include "agent/log.h"
#include "agent/session/node_credentials.h"
#include "agent/session/session.h"
#include "agent/shim/rank_shim.h"
#include "agent/supervisor/supervisor.h"
#include "common/argv.h"
#include "common/duration.h"
#include "common/http_server.h"
#include "common/status.h"
#include "common/proto_text.h"

#ifndef XL_AGENT_VERSION
#define XL_AGENT_VERSION "dev"
#endif

namespace xl::agent {
namespace {

std::string Summary(const v1::NodeInventory& inv) {
  uint64_t nvme_free = 0;
  for (const v1::Nvme& n : inv.nvme()) nvme_free += n.free_bytes();
  double best_nic = 0;
  for (const v1::Nic& n : inv.nics()) best_nic = std::max(best_nic, n.gbps());
  std::string gpus = absl::StrCat(inv.gpus_size(), " GPUs");
  if (inv.gpus_size() > 0) {
    absl::StrAppend(&gpus, " (", inv.gpus(0).model(), ", ",
                    HumanBytes(inv.gpus(0).memory_bytes()), ")");
  }
  return absl::StrCat(
      gpus, ", ", inv.cpus(), " CPUs, ", HumanBytes(inv.memory_bytes()),
      " memory, ", inv.nvme_size(), " NVMe (", HumanBytes(nvme_free),
      " free), ", inv.nics_size(), " NICs (fastest ", best_nic, " Gbit/s)");
}

// The limits of a job that asks for none.
struct JobDefaults {
  uint64_t memory_bytes = 0;
  int64_t max_processes = 0;
};

// --default-job-memory: "90%" of the node's `node_memory`, a size with a
// binary unit ("64GiB", "512M"), bytes, or 0.
absl::StatusOr<uint64_t> ParseJobMemory(const std::string& text,
                                        uint64_t node_memory) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--default-job-memory \"", text,
        "\" is neither a share of the node's memory (90%) nor a size "
        "(64GiB, 512MiB, 0 for none); fix the flag"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (absl::ConsumeSuffix(&s, "%")) {
    double pct = 0;
    if (!absl::SimpleAtod(s, &pct) || !(pct > 0 && pct <= 100)) return bad();
    return static_cast<uint64_t>(static_cast<double>(node_memory) * pct / 100);
  }
  uint64_t unit = 1;
  if (!absl::ConsumeSuffix(&s, "iB")) absl::ConsumeSuffix(&s, "B");
  for (const auto& [suffix, shift] :
       std::vector<std::pair<const char*, int>>{
           {"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}}) {
    if (absl::ConsumeSuffix(&s, suffix)) {
      unit = uint64_t{1} << shift;
      break;
    }
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(s, &n) || n > (~uint64_t{0}) / unit) return bad();
  return n * unit;
}

// What the agent enforces, one line each, for the log and
// --print-inventory.
std::vector<std::string> IsolationSummary(RunAs run_as, bool allow_root_jobs,
                                          const CgroupHierarchy& cgroups,
                                          const JobDefaults& defaults,
                                          const std::string& work_dir) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat(
      "run-as: ", RunAsName(run_as),
      run_as == RunAs::kSubmitter ? " (each job as its submitter's account)"
                                  : " (every job as the agent's user)",
      allow_root_jobs ? "; root jobs allowed" : "; root jobs refused"));
  for (const std::string& line : DescribeCgroups(cgroups)) {
    lines.push_back(line);
  }
  if (cgroups.version != CgroupVersion::kNone) {
    lines.push_back(absl::StrCat(
        "defaults: a job asking for no memory is limited to ",
        defaults.memory_bytes > 0 ? HumanBytes(defaults.memory_bytes)
                                  : std::string("nothing"),
        cgroups.memory ? "" : " (not enforced here)",
        " (--default-job-memory); processes ",
        defaults.max_processes > 0 ? absl::StrCat(defaults.max_processes)
                                   : std::string("unlimited"),
        cgroups.pids ? "" : " (not enforced here)",
        " (--default-max-processes)"));
  }
  lines.push_back(absl::StrCat("tmpdir: private per job attempt under ",
                               work_dir, "/tmp (mode 0700, removed after)"));
  return lines;
}

// Ranks running as their users must pass through --work-dir to their own
// directories under it.
void WarnIfNotTraversable(const std::string& work_dir) {
  for (std::filesystem::path p(work_dir); !p.empty() && p != p.root_path();
       p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
      LogLine(absl::StrCat(
          "warning: ", p.string(),
          " is not searchable by other users, so ranks running as their "
          "submitters cannot reach their working directories under "
          "--work-dir; chmod o+x ",
          p.string(), " or choose another --work-dir"));
      return;
    }
  }
}

int Main(int argc, char** argv) {
  CLI::App app{
      "xl-agent: reports this node (GPUs, NVMe, NICs, CPUs, memory) to "
      "xl-scheduler over one long-lived stream and runs the ranks the "
      "scheduler assigns (execve, one process group per rank, each under an "
      "xl-rank-shim process of its own so that it outlives the agent), as "
      "the job's submitter (--run-as) in a cgroup per job (memory, CPU, "
      "devices). Logs go to stderr. SIGTERM leaves the ranks running for the "
      "next xl-agent started with the same --work-dir, which adopts them "
      "(restarts, upgrades); ranks whose agent does not come back stop "
      "themselves when its lease runs out. SIGINT, or SIGTERM with --drain, "
      "stops every rank (SIGTERM, SIGKILL after its job's grace period) "
      "before exiting. Exits 0.",
      "xl-agent"};
  std::string scheduler;
  std::string work_dir;
  std::string inventory_file;
  std::string name;
  std::string address;
  int heartbeat_ms = 1000;
  bool print_inventory = false;
  NodeTlsOptions tls;
  std::string run_as_flag = "submitter";
  bool allow_root_jobs = false;
  bool drain = false;
  std::string cgroup_flag = "auto";
  std::string default_memory_flag = "90%";
  int64_t default_max_processes = 32768;
  app.add_option("--cgroup", cgroup_flag,
                 "Which cgroup hierarchy jobs go in: auto (v2 when it has "
                 "the memory controller, else v1), v1, or v2 (with whatever "
                 "controllers it has)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "v1", "v2"}));
  app.add_option("--default-job-memory", default_memory_flag,
                 "The memory limit of a job that asks for none "
                 "(resources.memory_bytes_per_node): a share of the node's "
                 "memory (90%) or a size (64GiB, 512MiB); 0: none")
      ->capture_default_str();
  app.add_option("--default-max-processes", default_max_processes,
                 "The most processes and threads one job may have on this "
                 "node (pids.max) where its queue sets no "
                 "max_processes_per_node; 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--drain", drain,
               "On SIGTERM, stop every rank (its job's grace, then SIGKILL) "
               "before exiting, as SIGINT does; without it SIGTERM leaves "
               "them running for the next agent (use it when the node is "
               "going away)");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT serving Prometheus /metrics over HTTP (connected, "
                 "scheduler acknowledgement age, running ranks, GPUs, rank "
                 "exits; no job secrets, no credential asked): e.g. "
                 "0.0.0.0:9401");
  app.set_config("--config", "",
                 "read options from this file first (TOML: one `name = "
                 "value` line per long option, e.g. work-dir = "
                 "\"/var/lib/xl-agent\"); flags given on the command line "
                 "win");
  // A misspelt key in the file is an error, as a misspelt flag is.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--scheduler", scheduler,
                 "HOST:PORT of xl-scheduler (required unless "
                 "--print-inventory)");
  app.add_option("--work-dir", work_dir,
                 "Directory the agent owns (created if missing): jobs/<job>/"
                 "<attempt> working directories, and scratch/ for checkpoints "
                 "when the node has no NVMe")
      ->required();
  app.add_option("--inventory", inventory_file,
                 "YAML or JSON file describing the node (xl.v1.NodeInventory "
                 "fields: hostname, labels, cpus, memory_bytes, gpus, nvme, "
                 "nics); replaces discovery through NVML and sysfs")
      ->check(CLI::ExistingFile);
  app.add_option("--name", name,
                 "Node name in the cluster (default: the inventory's "
                 "hostname)");
  app.add_option("--address", address,
                 "Address other nodes use to reach this one (MASTER_ADDR); "
                 "default: the address the scheduler sees the agent connect "
                 "from");
  app.add_option("--heartbeat-interval-ms", heartbeat_ms,
                 "Send a heartbeat at least this often (the scheduler's "
                 "RegisterAck may ask for more often)")
      ->capture_default_str()
      ->check(CLI::Range(10, 3600 * 1000));
  app.add_option("--tls-ca", tls.ca_file,
                 "CA certificate (PEM) to verify the scheduler with; turns "
                 "TLS on (env XL_TLS_CA)")
      ->envname("XL_TLS_CA");
  app.add_option("--tls-cert", tls.cert_file,
                 "this node's certificate (PEM), issued by the cluster's CA; "
                 "its name is the node's name (env XL_TLS_CERT)")
      ->envname("XL_TLS_CERT");
  app.add_option("--tls-key", tls.key_file,
                 "the key of --tls-cert (PEM) (env XL_TLS_KEY)")
      ->envname("XL_TLS_KEY");
  app.add_option("--join-token", tls.join_token,
                 "single-use join token ('xl-scheduler token create --join'): "
                 "without --tls-cert, the agent makes a key, gets its "
                 "certificate from the scheduler and keeps both in "
                 "<work-dir>/tls/ (env XL_JOIN_TOKEN, better: an argument "
                 "shows in ps until the agent has started)")
      ->envname("XL_JOIN_TOKEN");
  app.add_flag("--print-inventory", print_inventory,
               "Print the node's inventory (discovered, or the --inventory "
               "file with defaults filled in) as YAML in the inventory file "
               "format, and exit");
  app.add_option("--run-as", run_as_flag,
                 "Whose account ranks run as: submitter (the job's user, "
                 "looked up on this node; needs the agent to run as root) or "
                 "agent (the agent's own user, for single-user development "
                 "clusters)")
      ->capture_default_str()
      ->check(CLI::IsMember({"submitter", "agent"}));
  app.add_flag("--allow-root-jobs", allow_root_jobs,
               "Let ranks run as root (uid 0): jobs submitted by root, or "
               "every job under --run-as agent when the agent is root. "
               "Refused by default");
  CLI11_PARSE(app, argc, argv);
  // Parsed into copies: the join token leaves what ps shows.
  HideArgumentValues(argc, argv, {"--join-token"});
  const RunAs run_as =
      run_as_flag == "agent" ? RunAs::kAgent : RunAs::kSubmitter;
  if (scheduler.empty() && !print_inventory) {
    std::fprintf(stderr,
                 "--scheduler is required\nRun with --help for more "
                 "information.\n");
    return 106;  // CLI11's code for a missing required option.
  }

  // Block before any thread exists (NVML and gRPC start some) so that every
  // thread inherits the mask and the signals come to sigwait() below. Ranks
  // get a clean mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  SetLogName(name.empty() ? LocalHostname() : name);
  if (!print_inventory &&
      (scheduler.rfind(':') == std::string::npos || scheduler.back() == ':')) {
    LogLine(absl::StrCat("--scheduler ", scheduler,
                         " has no port; give HOST:PORT, for example "
                         "--scheduler sched-1:7070"));
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(work_dir, ec);
  if (ec) {
    LogLine(absl::StrCat("cannot create --work-dir ", work_dir, ": ",
                         ec.message(),
                         "; choose a directory the agent can "
                         "write"));
    return 2;
  }
  work_dir = std::filesystem::absolute(work_dir).lexically_normal().string();
  if (!work_dir.empty() && work_dir.size() > 1 && work_dir.back() == '/') {
    work_dir.pop_back();
  }

  absl::StatusOr<v1::NodeInventory> inventory;
  if (!inventory_file.empty()) {
    inventory = LoadInventoryFile(inventory_file);
  } else {
    DiscoveryOptions options;
    options.work_dir = work_dir;
    inventory = DiscoverInventory(options);
  }
  if (!inventory.ok()) {
    LogLine(absl::StrCat(inventory.status().message(),
                         inventory_file.empty()
                             ? "; pass --inventory FILE to describe the node"
                             : "; fix the inventory file"));
    return 2;
  }
  if (!address.empty()) inventory->set_address(address);
  absl::StatusOr<uint64_t> default_memory =
      ParseJobMemory(default_memory_flag, inventory->memory_bytes());
  if (!default_memory.ok()) {
    LogLine(std::string(default_memory.status().message()));
    return 2;
  }
  const bool name_given = !name.empty();
  if (name.empty()) name = inventory->hostname();
  const CgroupChoice cgroup_choice =
      cgroup_flag == "v1"   ? CgroupChoice::kV1
      : cgroup_flag == "v2" ? CgroupChoice::kV2
                            : CgroupChoice::kAuto;
  CgroupHierarchy cgroups = DetectCgroups(name, cgroup_choice);
  JobDefaults defaults{*default_memory, default_max_processes};
  const std::vector<std::string> isolation = IsolationSummary(
      run_as, allow_root_jobs, cgroups, defaults, work_dir);
  if (print_inventory) {
    std::fputs(MessageToYaml(*inventory).c_str(), stdout);
    // Comments, so the output stays a valid inventory file.
    std::fputs("# isolation (what this agent enforces):\n", stdout);
    for (const std::string& line : isolation) {
      std::fprintf(stdout, "#   %s\n", line.c_str());
    }
    return 0;
  }
  tls.work_dir = work_dir;
  tls.name = name;
  tls.name_is_default = !name_given;
  tls.scheduler = scheduler;
  auto credentials = LoadNodeCredentials(tls);
  if (!credentials.ok()) {
    LogLine(std::string(credentials.status().message()));
    return 2;
  }
  // With a certificate, the node is who the certificate says.
  if (!credentials->certificate_name.empty() &&
      credentials->certificate_name != name) {
    if (name_given) {
      LogLine(absl::StrCat("--name ", name, " differs from the name in the "
                           "node certificate, ", credentials->certificate_name,
                           "; drop --name or use that node's certificate"));
      return 2;
    }
    name = credentials->certificate_name;
    cgroups = DetectCgroups(name, cgroup_choice);
  }
  SetLogName(name);
  if (run_as == RunAs::kSubmitter && geteuid() != 0) {
    LogLine(absl::StrCat(
        "--run-as submitter runs each job as its submitter, which needs "
        "root; run xl-agent as root, or pass --run-as agent to run every "
        "job as this user (uid ", geteuid(), ")"));
    return 2;
  }
  if (run_as == RunAs::kSubmitter) WarnIfNotTraversable(work_dir);

  SessionOptions session_options;
  session_options.scheduler = scheduler;
  session_options.name = name;
  // The agent's identity survives its restarts with the ranks it adopts.
  const std::string state_dir = work_dir + "/state";
  std::filesystem::create_directories(state_dir, ec);
  ::chmod(state_dir.c_str(), 0700);
  const std::string instance_file = state_dir + "/instance";
  {
    std::string id;
    if (shim::ReadWholeFile(instance_file, &id)) {
      id = std::string(absl::StripAsciiWhitespace(id));
      if (id.size() == 32) session_options.instance_id = id;
    }
  }
  session_options.inventory = *inventory;
  session_options.agent_version = XL_AGENT_VERSION;
  session_options.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  session_options.credentials = credentials->channel;
  if (credentials->channel != nullptr) {
    session_options.rank_tls_ca =
        std::filesystem::absolute(tls.ca_file).string();
  }
  Session session(session_options);

  SupervisorOptions supervisor_options;
  supervisor_options.work_dir = work_dir;
  supervisor_options.run_as = run_as;
  supervisor_options.allow_root_jobs = allow_root_jobs;
  supervisor_options.cgroups = cgroups;
  supervisor_options.default_memory_bytes = defaults.memory_bytes;
  supervisor_options.default_max_processes = defaults.max_processes;
  if (cgroups.version != CgroupVersion::kNone) {
    absl::Status prepared = PrepareCgroups(cgroups);
    if (!prepared.ok()) {
      LogLine(absl::StrCat("running without cgroups (no memory, cpu or "
                           "device limits): ",
                           prepared.message()));
      supervisor_options.cgroups = CgroupHierarchy();
    }
  }
  for (const std::string& line :
       IsolationSummary(run_as, allow_root_jobs, supervisor_options.cgroups,
                        defaults, work_dir)) {
    LogLine(absl::StrCat("isolation: ", line));
  }
  supervisor_options.scratch_dir = ScratchDir(*inventory, work_dir);
  std::filesystem::create_directories(supervisor_options.scratch_dir, ec);
  if (ec) {
    // An inventory file may describe NVMe that this machine does not have
    // (a simulated node); ranks still need somewhere to checkpoint.
    const std::string fallback = work_dir + "/scratch";
    LogLine(absl::StrCat("cannot create the scratch directory ",
                         supervisor_options.scratch_dir, " (", ec.message(),
                         "); checkpoints go to ", fallback));
    supervisor_options.scratch_dir = fallback;
  }
  // xl-train ships beside xl-agent (installed) or in worker/ (build tree);
  // xl-rank-shim beside it.
  {
    std::error_code self_ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", self_ec);
    if (!self_ec) {
      supervisor_options.shim_binary =
          (self.parent_path() / "xl-rank-shim").string();
      for (auto candidate : {self.parent_path() / "xl-train",
                             self.parent_path() / "worker" / "xl-train"}) {
        if (access(candidate.c_str(), X_OK) == 0) {
          supervisor_options.train_binary = candidate.string();
          break;
        }
      }
    }
  }
  if (session_options.instance_id.empty() &&
      !shim::WriteFileAtomically(instance_file,
                                 session.instance_id() + "\n")) {
    LogLine(absl::StrCat("cannot write ", instance_file, ": ",
                         ErrnoString(errno),
                         "; a restarted agent will be a new instance"));
  }
  // Every rank holds a few descriptors here (its spools); ranks get the
  // limit the agent was started with.
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    supervisor_options.rank_open_files = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  Supervisor supervisor(supervisor_options, &session);
  absl::Status started = supervisor.Start();
  if (!started.ok()) {
    LogLine(std::string(started.message()));
    return 1;
  }
  LogLine(absl::StrCat("xl-agent ", XL_AGENT_VERSION, ": ", Summary(*inventory),
                       "; scheduler ", scheduler, "; work dir ", work_dir,
                       "; checkpoints under ", supervisor_options.scratch_dir));
  session.Start(&supervisor);
  std::unique_ptr<http::Server> metrics;
  if (!metrics_listen.empty()) {
    http::ServerOptions http_opts;
    http_opts.listen = metrics_listen;
    const v1::NodeInventory reported = *inventory;
    auto started_http = http::Server::Start(
        http_opts, [&session, &supervisor, reported](const http::Request& req) {
          if (req.path != "/metrics") {
            return http::TextResponse(404, "the agent serves /metrics only");
          }
          http::Response r;
          r.content_type = "text/plain; version=0.0.4; charset=utf-8";
          r.body = ScrapeAgent(session, supervisor, reported);
          return r;
        });
    if (!started_http.ok()) {
      LogLine(absl::StrCat("--metrics-listen: ",
                           started_http.status().message()));
      session.Shutdown(absl::Seconds(1));
      supervisor.Detach();
      return 1;
    }
    metrics = std::move(*started_http);
    LogLine(absl::StrCat("metrics on ", metrics->url(), "/metrics"));
  }

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  if (metrics != nullptr) metrics->Stop();
  if (sig == SIGTERM && !drain) {
    LogLine("received SIGTERM: leaving the ranks running for the next "
            "xl-agent (start it with the same --work-dir; --drain stops them "
            "instead)");
    supervisor.Detach();
    // Lets the statuses already queued reach the scheduler.
    session.Shutdown(absl::Seconds(1));
    LogLine("stopped");
    return 0;
  }
  LogLine(absl::StrCat("received ", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                       ": stopping every rank (each with its job's grace)"));
  absl::Status stopped = supervisor.StopAll();
  if (!stopped.ok()) LogLine(std::string(stopped.message()));
  RemoveNodeCgroups(supervisor_options.cgroups);
  // Lets the final rank statuses reach the scheduler.
  session.Shutdown(absl::Seconds(1));
  LogLine("stopped");
  return 0;
}

}  // namespace
}  // namespace xl::agent

int main(int argc, char** argv) {
  try {
    return xl::agent::Main(argc, argv);
  } catch (const std::exception& e) {
    xl::agent::LogLine(absl::StrCat("fatal: ", e.what()));
    return 1;
  }
}
