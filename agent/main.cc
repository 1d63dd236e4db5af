// xl-agent: reports this node to the scheduler and runs the ranks it assigns.
// main parses flags, builds the inventory, starts the supervisor (which
// adopts the ranks an earlier agent left running) and the session. SIGTERM
// leaves the ranks running for the next agent (an upgrade, a restart);
// SIGINT, or SIGTERM with --drain, stops every rank with its job's grace.
// Either exits 0. Signals are blocked in every thread and taken by sigwait()
// here.
//
// Over 600 lines: the flags with their help text (AddOptions) and one
// function per step of starting an agent; Main is the driver.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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
#include "common/leader.h"
#include "common/proto_text.h"
#include "common/status.h"

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
  for (const auto& [suffix, shift] : std::vector<std::pair<const char*, int>>{
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

// Every flag's value as given.
struct Flags {
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
  std::string metrics_listen;
};

// Adds every option to `app`, bound to `f`, in the order --help lists
// them.
void AddOptions(CLI::App* app, Flags* f) {
  app->add_option("--cgroup", f->cgroup_flag,
                  "Which cgroup hierarchy jobs go in: auto (v2 when it has "
                  "the memory controller, else v1), v1, or v2 (with whatever "
                  "controllers it has)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "v1", "v2"}));
  app->add_option("--default-job-memory", f->default_memory_flag,
                  "The memory limit of a job that asks for none "
                  "(resources.memory_bytes_per_node): a share of the node's "
                  "memory (90%) or a size (64GiB, 512MiB); 0: none")
      ->capture_default_str();
  app->add_option("--default-max-processes", f->default_max_processes,
                  "The most processes and threads one job may have on this "
                  "node (pids.max) where its queue sets no "
                  "max_processes_per_node; 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--drain", f->drain,
                "On SIGTERM, stop every rank (its job's grace, then SIGKILL) "
                "before exiting, as SIGINT does; without it SIGTERM leaves "
                "them running for the next agent (use it when the node is "
                "going away)");
  app->add_option("--metrics-listen", f->metrics_listen,
                  "HOST:PORT serving Prometheus /metrics over HTTP (connected, "
                  "scheduler acknowledgement age, running ranks, GPUs, rank "
                  "exits; no job secrets, no credential asked): e.g. "
                  "0.0.0.0:9401");
  app->set_config("--config", "",
                  "read options from this file first (TOML: one `name = "
                  "value` line per long option, e.g. work-dir = "
                  "\"/var/lib/xl-agent\"); flags given on the command line "
                  "win");
  // A misspelt key in the file is an error, as a misspelt flag is.
  app->allow_config_extras(CLI::config_extras_mode::error);
  app->add_option("--scheduler", f->scheduler,
                  "HOST:PORT of xl-scheduler (required unless "
                  "--print-inventory)");
  app->add_option("--work-dir", f->work_dir,
                  "Directory the agent owns (created if missing): jobs/<job>/"
                  "<attempt> working directories, and scratch/ for checkpoints "
                  "when the node has no NVMe")
      ->required();
  app->add_option("--inventory", f->inventory_file,
                  "YAML or JSON file describing the node (xl.v1.NodeInventory "
                  "fields: hostname, labels, cpus, memory_bytes, gpus, nvme, "
                  "nics); replaces discovery through NVML and sysfs")
      ->check(CLI::ExistingFile);
  app->add_option("--name", f->name,
                  "Node name in the cluster (default: the inventory's "
                  "hostname)");
  app->add_option("--address", f->address,
                  "Address other nodes use to reach this one (MASTER_ADDR); "
                  "default: the address the scheduler sees the agent connect "
                  "from");
  app->add_option("--heartbeat-interval-ms", f->heartbeat_ms,
                  "Send a heartbeat at least this often (the scheduler's "
                  "RegisterAck may ask for more often)")
      ->capture_default_str()
      ->check(CLI::Range(10, 3600 * 1000));
  app->add_option("--tls-ca", f->tls.ca_file,
                  "CA certificate (PEM) to verify the scheduler with; turns "
                  "TLS on (env XL_TLS_CA)")
      ->envname("XL_TLS_CA");
  app->add_option("--tls-cert", f->tls.cert_file,
                  "this node's certificate (PEM), issued by the cluster's CA; "
                  "its name is the node's name (env XL_TLS_CERT)")
      ->envname("XL_TLS_CERT");
  app->add_option("--tls-key", f->tls.key_file,
                  "the key of --tls-cert (PEM) (env XL_TLS_KEY)")
      ->envname("XL_TLS_KEY");
  app->add_option("--join-token", f->tls.join_token,
                  "single-use join token ('xl-scheduler token create --join'): "
                  "without --tls-cert, the agent makes a key, gets its "
                  "certificate from the scheduler and keeps both in "
                  "<work-dir>/tls/ (env XL_JOIN_TOKEN, better: an argument "
                  "shows in ps until the agent has started)")
      ->envname("XL_JOIN_TOKEN");
  app->add_flag("--print-inventory", f->print_inventory,
                "Print the node's inventory (discovered, or the --inventory "
                "file with defaults filled in) as YAML in the inventory file "
                "format, and exit");
  app->add_option("--run-as", f->run_as_flag,
                  "Whose account ranks run as: submitter (the job's user, "
                  "looked up on this node; needs the agent to run as root) or "
                  "agent (the agent's own user, for single-user development "
                  "clusters)")
      ->capture_default_str()
      ->check(CLI::IsMember({"submitter", "agent"}));
  app->add_flag("--allow-root-jobs", f->allow_root_jobs,
                "Let ranks run as root (uid 0): jobs submitted by root, or "
                "every job under --run-as agent when the agent is root. "
                "Refused by default");
}

// What main decided before the agent starts: the flags made good, the
// node's inventory and name, its credentials, cgroups and job defaults.
struct Node {
  RunAs run_as = RunAs::kSubmitter;
  v1::NodeInventory inventory;
  bool name_given = false;
  CgroupChoice cgroup_choice = CgroupChoice::kAuto;
  CgroupHierarchy cgroups;
  JobDefaults defaults;
  NodeCredentials credentials;
};

// Creates --work-dir and makes it absolute, without a trailing slash.
absl::Status PrepareWorkDir(std::string* work_dir) {
  std::error_code ec;
  std::filesystem::create_directories(*work_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create --work-dir ", *work_dir, ": ", ec.message(),
                     "; choose a directory the agent can write"));
  }
  *work_dir = std::filesystem::absolute(*work_dir).lexically_normal().string();
  if (work_dir->size() > 1 && work_dir->back() == '/') work_dir->pop_back();
  return absl::OkStatus();
}

// The node as the --inventory file describes it, else as discovered; with
// --address, the job-facing address; and the job defaults and cgroups.
absl::Status DescribeNode(Flags* f, Node* node) {
  absl::StatusOr<v1::NodeInventory> inventory;
  if (!f->inventory_file.empty()) {
    inventory = LoadInventoryFile(f->inventory_file);
  } else {
    DiscoveryOptions options;
    options.work_dir = f->work_dir;
    inventory = DiscoverInventory(options);
  }
  if (!inventory.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(inventory.status().message(),
                     f->inventory_file.empty()
                         ? "; pass --inventory FILE to describe the node"
                         : "; fix the inventory file"));
  }
  node->inventory = *std::move(inventory);
  if (!f->address.empty()) node->inventory.set_address(f->address);
  absl::StatusOr<uint64_t> default_memory =
      ParseJobMemory(f->default_memory_flag, node->inventory.memory_bytes());
  if (!default_memory.ok()) return default_memory.status();
  node->name_given = !f->name.empty();
  if (f->name.empty()) f->name = node->inventory.hostname();
  node->cgroup_choice = f->cgroup_flag == "v1"   ? CgroupChoice::kV1
                        : f->cgroup_flag == "v2" ? CgroupChoice::kV2
                                                 : CgroupChoice::kAuto;
  node->cgroups = DetectCgroups(f->name, node->cgroup_choice);
  node->defaults = JobDefaults{*default_memory, f->default_max_processes};
  return absl::OkStatus();
}

// --print-inventory: the inventory as an inventory file, with what this
// agent enforces as comments (so the output stays a valid file).
void PrintInventory(const Flags& f, const Node& node) {
  std::fputs(MessageToYaml(node.inventory).c_str(), stdout);
  std::fputs("# isolation (what this agent enforces):\n", stdout);
  for (const std::string& line :
       IsolationSummary(node.run_as, f.allow_root_jobs, node.cgroups,
                        node.defaults, f.work_dir)) {
    std::fprintf(stdout, "#   %s\n", line.c_str());
  }
}

// The node's credentials; with a certificate, the node is who the
// certificate says (--name must agree).
absl::Status Identify(Flags* f, Node* node) {
  f->tls.work_dir = f->work_dir;
  f->tls.name = f->name;
  f->tls.name_is_default = !node->name_given;
  f->tls.scheduler = f->scheduler;
  auto credentials = LoadNodeCredentials(f->tls);
  if (!credentials.ok()) return credentials.status();
  node->credentials = *std::move(credentials);
  const std::string& certified = node->credentials.certificate_name;
  if (!certified.empty() && certified != f->name) {
    if (node->name_given) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--name ", f->name,
          " differs from the name in the node "
          "certificate, ",
          certified, "; drop --name or use that node's certificate"));
    }
    f->name = certified;
    node->cgroups = DetectCgroups(f->name, node->cgroup_choice);
  }
  SetLogName(f->name);
  if (node->run_as == RunAs::kSubmitter && geteuid() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--run-as submitter runs each job as its submitter, which needs "
        "root; run xl-agent as root, or pass --run-as agent to run every "
        "job as this user (uid ",
        geteuid(), ")"));
  }
  if (node->run_as == RunAs::kSubmitter) WarnIfNotTraversable(f->work_dir);
  return absl::OkStatus();
}

// The session's options. The agent's identity (its instance id, in
// <work-dir>/state/instance) survives its restarts with the ranks it adopts.
SessionOptions SessionOptionsFor(const Flags& f, const Node& node,
                                 std::string* instance_file) {
  SessionOptions o;
  o.scheduler = f.scheduler;
  o.name = f.name;
  const std::string state_dir = f.work_dir + "/state";
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  ::chmod(state_dir.c_str(), 0700);
  *instance_file = state_dir + "/instance";
  o.term_file = state_dir + "/leader_term";
  std::string id;
  if (shim::ReadWholeFile(*instance_file, &id)) {
    id = std::string(absl::StripAsciiWhitespace(id));
    if (id.size() == 32) o.instance_id = id;
  }
  o.inventory = node.inventory;
  o.agent_version = XL_AGENT_VERSION;
  o.heartbeat_interval = absl::Milliseconds(f.heartbeat_ms);
  o.credentials = node.credentials.channel;
  if (node.credentials.channel != nullptr) {
    o.rank_tls_ca = std::filesystem::absolute(f.tls.ca_file).string();
  }
  return o;
}

// The supervisor's options: the cgroups made ready (or none, said why),
// the scratch directory, the binaries beside this one and the ranks'
// open-file limit (this agent's soft limit; its own is raised to the hard
// one: every rank holds a few descriptors here).
SupervisorOptions SupervisorOptionsFor(const Flags& f, const Node& node) {
  SupervisorOptions o;
  o.work_dir = f.work_dir;
  o.run_as = node.run_as;
  o.allow_root_jobs = f.allow_root_jobs;
  o.cgroups = node.cgroups;
  o.default_memory_bytes = node.defaults.memory_bytes;
  o.default_max_processes = node.defaults.max_processes;
  if (node.cgroups.version != CgroupVersion::kNone) {
    absl::Status prepared = PrepareCgroups(node.cgroups);
    if (!prepared.ok()) {
      LogLine(
          absl::StrCat("running without cgroups (no memory, cpu or "
                       "device limits): ",
                       prepared.message()));
      o.cgroups = CgroupHierarchy();
    }
  }
  for (const std::string& line :
       IsolationSummary(node.run_as, f.allow_root_jobs, o.cgroups,
                        node.defaults, f.work_dir)) {
    LogLine(absl::StrCat("isolation: ", line));
  }
  o.scratch_dir = ScratchDir(node.inventory, f.work_dir);
  std::error_code ec;
  std::filesystem::create_directories(o.scratch_dir, ec);
  if (ec) {
    // An inventory file may describe NVMe that this machine does not have
    // (a simulated node); ranks still need somewhere to checkpoint.
    const std::string fallback = f.work_dir + "/scratch";
    LogLine(absl::StrCat("cannot create the scratch directory ", o.scratch_dir,
                         " (", ec.message(), "); checkpoints go to ",
                         fallback));
    o.scratch_dir = fallback;
  }
  // xl-train ships beside xl-agent (installed) or in worker/ (build tree);
  // xl-rank-shim beside it.
  std::error_code self_ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", self_ec);
  if (!self_ec) {
    o.shim_binary = (self.parent_path() / "xl-rank-shim").string();
    for (auto candidate : {self.parent_path() / "xl-train",
                           self.parent_path() / "worker" / "xl-train"}) {
      if (access(candidate.c_str(), X_OK) == 0) {
        o.train_binary = candidate.string();
        break;
      }
    }
  }
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur < files.rlim_max) {
    o.rank_open_files = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  return o;
}

// --metrics-listen: Prometheus /metrics over HTTP.
absl::StatusOr<std::unique_ptr<http::Server>> ServeMetrics(
    const std::string& listen, const Session& session,
    const Supervisor& supervisor, const v1::NodeInventory& reported) {
  http::ServerOptions http_opts;
  http_opts.listen = listen;
  return http::Server::Start(
      http_opts, [&session, &supervisor, reported](const http::Request& req) {
        if (req.path != "/metrics") {
          return http::TextResponse(404, "the agent serves /metrics only");
        }
        http::Response r;
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.body = ScrapeAgent(session, supervisor, reported);
        return r;
      });
}

// After SIGTERM without --drain the ranks keep running for the next agent;
// after SIGINT, or SIGTERM with --drain, every rank stops with its job's
// grace.
int Stop(int sig, bool drain, const CgroupHierarchy& cgroups, Session* session,
         Supervisor* supervisor) {
  if (sig == SIGTERM && !drain) {
    LogLine(
        "received SIGTERM: leaving the ranks running for the next "
        "xl-agent (start it with the same --work-dir; --drain stops them "
        "instead)");
    supervisor->Detach();
    // Lets the statuses already queued reach the scheduler.
    session->Shutdown(absl::Seconds(1));
    LogLine("stopped");
    return 0;
  }
  LogLine(absl::StrCat("received ", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                       ": stopping every rank (each with its job's grace)"));
  absl::Status stopped = supervisor->StopAll();
  if (!stopped.ok()) LogLine(std::string(stopped.message()));
  RemoveNodeCgroups(cgroups);
  // Lets the final rank statuses reach the scheduler.
  session->Shutdown(absl::Seconds(1));
  LogLine("stopped");
  return 0;
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
  Flags f;
  AddOptions(&app, &f);
  CLI11_PARSE(app, argc, argv);
  // Parsed into copies: the join token leaves what ps shows.
  HideArgumentValues(argc, argv, {"--join-token"});
  if (f.scheduler.empty() && !f.print_inventory) {
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

  SetLogName(f.name.empty() ? LocalHostname() : f.name);
  if (!f.print_inventory) {
    auto list = xl::SplitServerList(f.scheduler, "--scheduler");
    if (!list.ok()) {
      LogLine(std::string(list.status().message()));
      return 2;
    }
  }
  Node node;
  node.run_as = f.run_as_flag == "agent" ? RunAs::kAgent : RunAs::kSubmitter;
  absl::Status described = PrepareWorkDir(&f.work_dir);
  if (described.ok()) described = DescribeNode(&f, &node);
  if (!described.ok()) {
    LogLine(std::string(described.message()));
    return 2;
  }
  if (f.print_inventory) {
    PrintInventory(f, node);
    return 0;
  }
  if (absl::Status st = Identify(&f, &node); !st.ok()) {
    LogLine(std::string(st.message()));
    return 2;
  }
  std::string instance_file;
  const SessionOptions session_options =
      SessionOptionsFor(f, node, &instance_file);
  Session session(session_options);
  const SupervisorOptions supervisor_options = SupervisorOptionsFor(f, node);
  if (session_options.instance_id.empty() &&
      !shim::WriteFileAtomically(instance_file, session.instance_id() + "\n")) {
    LogLine(absl::StrCat("cannot write ", instance_file, ": ",
                         ErrnoString(errno),
                         "; a restarted agent will be a new instance"));
  }
  Supervisor supervisor(supervisor_options, &session);
  if (absl::Status started = supervisor.Start(); !started.ok()) {
    LogLine(std::string(started.message()));
    return 1;
  }
  LogLine(absl::StrCat("xl-agent ", XL_AGENT_VERSION, ": ",
                       Summary(node.inventory), "; scheduler ", f.scheduler,
                       "; work dir ", f.work_dir, "; checkpoints under ",
                       supervisor_options.scratch_dir));
  session.Start(&supervisor);
  std::unique_ptr<http::Server> metrics;
  if (!f.metrics_listen.empty()) {
    auto served =
        ServeMetrics(f.metrics_listen, session, supervisor, node.inventory);
    if (!served.ok()) {
      LogLine(absl::StrCat("--metrics-listen: ", served.status().message()));
      session.Shutdown(absl::Seconds(1));
      supervisor.Detach();
      return 1;
    }
    metrics = *std::move(served);
    LogLine(absl::StrCat("metrics on ", metrics->url(), "/metrics"));
  }
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  if (metrics != nullptr) metrics->Stop();
  return Stop(sig, f.drain, supervisor_options.cgroups, &session, &supervisor);
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
