// Over 600 lines: cgroup v1 and v2 side by side (detection, limits, peak
// memory, kill, removal), each operation next to its other version.
#include "agent/isolation/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/isolation/device_filter.h"
#include "agent/log.h"

namespace xl::agent {
namespace {

// The v1 controllers the agent uses; memory is required, the rest optional.
constexpr const char* kV1Controllers[] = {"memory", "cpu", "devices",
                                          "freezer", "pids"};
constexpr int64_t kCfsPeriodUs = 100000;

struct Mount {
  std::string root;   // the mount's root within its hierarchy
  std::string point;  // where it is mounted
  std::string fstype;
  std::vector<std::string> options;  // super options: the v1 controllers
};

std::vector<Mount> ReadMounts(const std::string& mountinfo) {
  std::vector<Mount> mounts;
  std::ifstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root point options [tags] - fstype source super
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) continue;
    Mount m;
    m.root = fields[3];
    m.point = fields[4];
    m.fstype = fields[dash + 1];
    if (dash + 3 < fields.size()) {
      m.options = absl::StrSplit(fields[dash + 3], ',');
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

// controller -> the agent's cgroup path in that hierarchy ("" for v2).
std::map<std::string, std::string> ReadOwnCgroups(const std::string& file) {
  std::map<std::string, std::string> own;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[1].empty()) {
      own[""] = parts[2];
      continue;
    }
    for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
      own[std::string(c)] = parts[2];
    }
  }
  return own;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

absl::Status WriteFile(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", ErrnoString(errno)));
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write \"", value, "\" to ", path, ": ", ErrnoString(err)));
  }
  return absl::OkStatus();
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool Writable(const std::string& path) {
  return ::access(path.c_str(), W_OK) == 0;
}

// The value of `key` in a "key value" per line file (memory.events,
// memory.oom_control); -1 when absent.
int64_t KeyedValue(const std::string& path, absl::string_view key) {
  std::string text;
  if (!ReadFile(path, &text)) return -1;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    int64_t v;
    if (kv.first == key && absl::SimpleAtoi(kv.second, &v)) return v;
  }
  return -1;
}

uint64_t NumberIn(const std::string& path) {
  std::string text;
  uint64_t v = 0;
  if (!ReadFile(path, &text) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v)) {
    return 0;
  }
  return v;
}

// "c MAJOR:MINOR rwm" for a character device file, or "" when it is not one.
std::string DeviceRuleOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return "";
  return absl::StrCat("c ", major(st.st_rdev), ":", minor(st.st_rdev), " rwm");
}

std::vector<std::string> DeviceAllowList(const v1::ResourceLimits& limits) {
  // Fixed numbers of Linux's devices.txt: null, zero, full, random,
  // urandom, tty, console, ptmx and every pseudo-terminal.
  std::vector<std::string> rules = {
      "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",  "c 1:9 rwm",
      "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm"};
  for (const char* path : {"/dev/nvidiactl", "/dev/nvidia-uvm",
                           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}) {
    std::string rule = DeviceRuleOf(path);
    if (!rule.empty()) rules.push_back(rule);
  }
  // The node's RDMA devices, shared by its jobs as its NICs are (NCCL's
  // InfiniBand/RoCE transport: uverbs, rdma_cm, umad), and GPUDirect's
  // (gdrcopy, GPUDirect Storage): without them a multi-node job falls back
  // to TCP without a word.
  for (const char* path : {"/dev/gdrdrv", "/dev/nvidia-fs"}) {
    std::string rule = DeviceRuleOf(path);
    if (!rule.empty()) rules.push_back(rule);
  }
  std::error_code ec;
  for (const char* dir : {"/dev/nvidia-caps", "/dev/infiniband"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::string rule = DeviceRuleOf(entry.path().string());
      if (!rule.empty()) rules.push_back(rule);
    }
    ec.clear();
  }
  for (int i = 0; i < 16; ++i) {  // GPUDirect Storage: /dev/nvidia-fs0..15
    std::string rule = DeviceRuleOf(absl::StrCat("/dev/nvidia-fs", i));
    if (!rule.empty()) rules.push_back(rule);
  }
  for (int index : limits.gpu_indices()) {
    std::string rule = DeviceRuleOf(absl::StrCat("/dev/nvidia", index));
    // The driver's major is 195 and minor the index; where the file is
    // missing the rule grants nothing that exists.
    rules.push_back(rule.empty() ? absl::StrCat("c 195:", index, " rwm")
                                 : rule);
  }
  return rules;
}

void KillEach(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
}

}  // namespace

CgroupHierarchy DetectCgroups(const std::string& node_name,
                              CgroupChoice choice,
                              const std::string& mountinfo,
                              const std::string& own_cgroup) {
  CgroupHierarchy h;
  const std::vector<Mount> mounts = ReadMounts(mountinfo);
  const std::map<std::string, std::string> own = ReadOwnCgroups(own_cgroup);
  const std::string suffix = absl::StrCat("/xl/", node_name);

  // v2 first, when it has the memory controller.
  std::string v2_note;
  for (const Mount& m : mounts) {
    if (m.fstype != "cgroup2" || choice == CgroupChoice::kV1) continue;
    std::string controllers;
    ReadFile(m.point + "/cgroup.controllers", &controllers);
    std::vector<absl::string_view> list =
        absl::StrSplit(controllers, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    auto has = [&](absl::string_view c) {
      return std::find(list.begin(), list.end(), c) != list.end();
    };
    if (!has("memory") && choice != CgroupChoice::kV2) {
      v2_note = absl::StrCat("cgroup v2 at ", m.point,
                             " has no memory controller");
      continue;
    }
    if (!Writable(m.point)) {
      v2_note = absl::StrCat("cgroup v2 at ", m.point,
                             " is not writable by the agent");
      continue;
    }
    h.version = CgroupVersion::kV2;
    h.v2_dir = m.point + suffix;
    h.memory = has("memory");
    h.cpu = has("cpu");
    h.pids = has("pids");
    h.freeze_or_kill = true;  // cgroup.kill, or cgroup.freeze before it
    std::vector<std::string> notes;
    std::vector<std::string> missing;
    for (const char* c : {"memory", "cpu", "pids"}) {
      if (!has(c)) missing.push_back(c);
    }
    if (!missing.empty()) {
      notes.push_back(absl::StrCat(
          "cgroup v2 at ", m.point, " lacks the ", absl::StrJoin(missing, ", "),
          " controller", missing.size() > 1 ? "s" : "",
          " (bound to cgroup v1 on this host?); their limits are not "
          "enforced"));
    }
    absl::Status bpf = ProbeDeviceFilter();
    h.devices = bpf.ok();
    if (!bpf.ok()) {
      notes.push_back(absl::StrCat("devices are not confined: ",
                                   bpf.message()));
    }
    h.note = absl::StrJoin(notes, "; ");
    return h;
  }
  if (choice == CgroupChoice::kV2) {
    h.note = v2_note.empty() ? "--cgroup v2: no cgroup2 mount" : v2_note;
    return h;
  }

  // Then the v1 controllers under the agent's own cgroup of each.
  for (const char* controller : kV1Controllers) {
    for (const Mount& m : mounts) {
      if (m.fstype != "cgroup" ||
          std::find(m.options.begin(), m.options.end(), controller) ==
              m.options.end()) {
        continue;
      }
      auto it = own.find(controller);
      std::string path = it == own.end() ? "/" : it->second;
      // The mount shows the hierarchy from m.root down.
      if (m.root != "/" && path.rfind(m.root, 0) == 0) {
        path = path.substr(m.root.size());
      }
      if (path == "/") path.clear();
      const std::string base = m.point + path;
      if (!Writable(base)) break;
      h.v1_dirs[controller] = base + suffix;
      break;
    }
  }
  if (h.v1_dirs.count("memory") == 0) {
    h.v1_dirs.clear();
    h.note = v2_note.empty() ? "no writable cgroup hierarchy with the memory "
                               "controller (the agent runs unprivileged, or "
                               "/sys/fs/cgroup is read-only)"
                             : absl::StrCat(v2_note,
                                            ", and no writable cgroup v1 "
                                            "memory controller");
    return h;
  }
  h.version = CgroupVersion::kV1;
  h.memory = true;
  h.cpu = h.v1_dirs.count("cpu") > 0;
  h.devices = h.v1_dirs.count("devices") > 0;
  h.pids = h.v1_dirs.count("pids") > 0;
  h.freeze_or_kill = h.v1_dirs.count("freezer") > 0;
  std::vector<std::string> missing;
  for (const char* c : kV1Controllers) {
    if (h.v1_dirs.count(c) == 0) missing.push_back(c);
  }
  if (!missing.empty()) {
    h.note = absl::StrCat("cgroup v1 controllers not usable: ",
                          absl::StrJoin(missing, ", "));
  }
  return h;
}

absl::Status PrepareCgroups(const CgroupHierarchy& h) {
  std::error_code ec;
  if (h.version == CgroupVersion::kV2) {
    std::filesystem::create_directories(h.v2_dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", h.v2_dir, ": ", ec.message()));
    }
    // Controllers reach a cgroup only through each ancestor's
    // subtree_control: from the node's parent's parent (the mount) down.
    std::filesystem::path node(h.v2_dir);
    for (const std::filesystem::path& dir :
         {node.parent_path().parent_path(), node.parent_path(), node}) {
      for (const char* c : {"memory", "cpu", "pids"}) {
        absl::Status s = WriteFile(dir.string() + "/cgroup.subtree_control",
                                   absl::StrCat("+", c));
        if (!s.ok() && std::string(c) == "memory" && h.memory) return s;
      }
    }
    return absl::OkStatus();
  }
  for (const auto& [controller, dir] : h.v1_dirs) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", dir, ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

void RemoveNodeCgroups(const CgroupHierarchy& h) {
  if (!h.v2_dir.empty()) ::rmdir(h.v2_dir.c_str());
  for (const auto& [controller, dir] : h.v1_dirs) ::rmdir(dir.c_str());
}

std::vector<std::string> DescribeCgroups(const CgroupHierarchy& h) {
  std::vector<std::string> lines;
  switch (h.version) {
    case CgroupVersion::kNone:
      lines.push_back(absl::StrCat("cgroups: none (", h.note,
                                   "); memory, cpu and devices not enforced"));
      return lines;
    case CgroupVersion::kV2:
      lines.push_back(absl::StrCat("cgroups: v2 at ", h.v2_dir));
      break;
    case CgroupVersion::kV1: {
      std::vector<std::string> dirs;
      for (const auto& [c, d] : h.v1_dirs) dirs.push_back(absl::StrCat(c, "=", d));
      lines.push_back(absl::StrCat("cgroups: v1 (", absl::StrJoin(dirs, " "),
                                   ")"));
      break;
    }
  }
  lines.push_back(absl::StrCat(
      "memory: ", h.memory ? "limit (memory_bytes_per_node, else the node's "
                             "default) and peak"
                           : "not enforced"));
  lines.push_back(absl::StrCat(
      "cpu: ", h.cpu ? "CFS quota (cpus_per_node)" : "not enforced"));
  lines.push_back(absl::StrCat(
      "processes: ", h.pids ? "at most pids.max per job (the queue's "
                              "max_processes_per_node, else the node's "
                              "default)"
                            : "not limited"));
  lines.push_back(absl::StrCat(
      "devices: ",
      h.devices ? absl::StrCat("only the allocated GPUs and the usual /dev "
                               "character devices",
                               h.version == CgroupVersion::kV2
                                   ? " (BPF device program)"
                                   : "")
                : "not confined"));
  lines.push_back(absl::StrCat(
      "kill: ", h.freeze_or_kill ? "every process of the cgroup at once"
                                 : "every process of the cgroup, one by one"));
  if (!h.note.empty() && h.version != CgroupVersion::kNone) {
    lines.push_back(absl::StrCat("note: ", h.note));
  }
  return lines;
}

absl::StatusOr<std::unique_ptr<JobCgroup>> JobCgroup::Create(
    const CgroupHierarchy& h, const std::string& name,
    const v1::ResourceLimits& limits) {
  if (h.version == CgroupVersion::kNone) {
    return absl::FailedPreconditionError("no cgroup hierarchy to use");
  }
  std::unique_ptr<JobCgroup> cg = Adopt(h, name, 0);
  const std::vector<std::string> dirs = cg->dirs_;
  // Left by an agent that died before cleaning up: nothing of it may
  // survive into this attempt.
  if (Exists(dirs.front())) {
    cg->KillAll();
    for (int i = 0; i < 100 && !cg->Pids().empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    absl::Status removed = cg->Remove();
    if (!removed.ok()) return removed;
  }
  for (const std::string& dir : dirs) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create cgroup ", dir, ": ", ErrnoString(errno)));
    }
  }
  const std::string& mem = dirs.front();
  cg->memory_limit_ = limits.memory_bytes();
  auto fail = [&](absl::Status s) {
    (void)cg->Remove();
    return s;
  };
  if (h.version == CgroupVersion::kV2) {
    if (h.memory && limits.memory_bytes() > 0) {
      absl::Status s =
          WriteFile(mem + "/memory.max", absl::StrCat(limits.memory_bytes()));
      if (!s.ok()) return fail(s);
      // Over the limit means the OOM killer, not swapping.
      if (Exists(mem + "/memory.swap.max")) {
        (void)WriteFile(mem + "/memory.swap.max", "0");
      }
    }
    if (h.cpu && limits.cpus() > 0) {
      absl::Status s = WriteFile(
          mem + "/cpu.max",
          absl::StrCat(limits.cpus() * kCfsPeriodUs, " ", kCfsPeriodUs));
      if (!s.ok()) return fail(s);
    }
    if (h.pids && limits.max_processes() > 0) {
      absl::Status s =
          WriteFile(mem + "/pids.max", absl::StrCat(limits.max_processes()));
      if (!s.ok()) return fail(s);
    }
    if (h.devices) {
      std::vector<DeviceRule> rules;
      for (const std::string& line : DeviceAllowList(limits)) {
        absl::StatusOr<DeviceRule> rule = ParseDeviceRule(line);
        if (!rule.ok()) return fail(rule.status());
        rules.push_back(*rule);
      }
      const int fd = ::open(mem.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        return fail(absl::FailedPreconditionError(
            absl::StrCat("cannot open ", mem, ": ", ErrnoString(errno))));
      }
      absl::Status s = AttachDeviceFilter(fd, rules);
      ::close(fd);
      if (!s.ok()) return fail(s);
    }
    return cg;
  }
  if (limits.memory_bytes() > 0) {
    absl::Status s = WriteFile(mem + "/memory.limit_in_bytes",
                               absl::StrCat(limits.memory_bytes()));
    if (!s.ok()) return fail(s);
    if (Exists(mem + "/memory.swappiness")) {
      (void)WriteFile(mem + "/memory.swappiness", "0");
    }
  }
  if (auto it = h.v1_dirs.find("cpu"); it != h.v1_dirs.end() && limits.cpus() > 0) {
    const std::string dir = absl::StrCat(it->second, "/", name);
    absl::Status s = WriteFile(dir + "/cpu.cfs_period_us",
                               absl::StrCat(kCfsPeriodUs));
    if (s.ok()) {
      s = WriteFile(dir + "/cpu.cfs_quota_us",
                    absl::StrCat(limits.cpus() * kCfsPeriodUs));
    }
    if (!s.ok()) return fail(s);
  }
  if (auto it = h.v1_dirs.find("pids");
      it != h.v1_dirs.end() && limits.max_processes() > 0) {
    absl::Status s = WriteFile(absl::StrCat(it->second, "/", name, "/pids.max"),
                               absl::StrCat(limits.max_processes()));
    if (!s.ok()) return fail(s);
  }
  if (auto it = h.v1_dirs.find("devices"); it != h.v1_dirs.end()) {
    const std::string dir = absl::StrCat(it->second, "/", name);
    absl::Status s = WriteFile(dir + "/devices.deny", "a");
    for (const std::string& rule : DeviceAllowList(limits)) {
      if (!s.ok()) break;
      s = WriteFile(dir + "/devices.allow", rule);
    }
    if (!s.ok()) return fail(s);
  }
  return cg;
}

std::unique_ptr<JobCgroup> JobCgroup::Adopt(const CgroupHierarchy& h,
                                            const std::string& name,
                                            uint64_t memory_limit) {
  std::vector<std::string> dirs;
  std::string freezer;
  std::string pids;
  if (h.version == CgroupVersion::kV2) {
    dirs.push_back(absl::StrCat(h.v2_dir, "/", name));
    if (h.pids) pids = dirs.back();
  } else {
    dirs.push_back(absl::StrCat(h.v1_dirs.at("memory"), "/", name));
    for (const auto& [controller, dir] : h.v1_dirs) {
      if (controller == "memory") continue;
      dirs.push_back(absl::StrCat(dir, "/", name));
      if (controller == "freezer") freezer = dirs.back();
      if (controller == "pids") pids = dirs.back();
    }
  }
  std::unique_ptr<JobCgroup> cg(new JobCgroup(h.version, dirs));
  cg->freezer_dir_ = freezer;
  cg->pids_dir_ = pids;
  cg->memory_limit_ = memory_limit;
  return cg;
}

std::vector<std::string> JobCgroup::ProcsFiles() const {
  std::vector<std::string> files;
  for (const std::string& dir : dirs_) files.push_back(dir + "/cgroup.procs");
  return files;
}

absl::StatusOr<std::vector<int>> JobCgroup::OpenProcsFiles() const {
  std::vector<int> fds;
  for (const std::string& dir : dirs_) {
    const std::string path = dir + "/cgroup.procs";
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      for (int f : fds) ::close(f);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open ", path, ": ", ErrnoString(err)));
    }
    fds.push_back(fd);
  }
  return fds;
}

uint64_t JobCgroup::PeakMemoryBytes() const {
  return NumberIn(main_dir() + (version_ == CgroupVersion::kV2
                                    ? "/memory.peak"
                                    : "/memory.max_usage_in_bytes"));
}

int64_t JobCgroup::OomKills() const {
  int64_t n = KeyedValue(main_dir() + (version_ == CgroupVersion::kV2
                                           ? "/memory.events"
                                           : "/memory.oom_control"),
                         "oom_kill");
  return n < 0 ? 0 : n;
}

int64_t JobCgroup::ProcessLimit() const {
  if (pids_dir_.empty()) return 0;
  return static_cast<int64_t>(NumberIn(pids_dir_ + "/pids.max"));
}

int64_t JobCgroup::ProcessLimitHits() const {
  if (pids_dir_.empty()) return 0;
  const int64_t n = KeyedValue(pids_dir_ + "/pids.events", "max");
  return n < 0 ? 0 : n;
}

std::vector<pid_t> JobCgroup::Pids() const {
  std::vector<pid_t> pids;
  std::string text;
  if (!ReadFile(main_dir() + "/cgroup.procs", &text)) return pids;
  for (absl::string_view line :
       absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int pid;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

void JobCgroup::KillAll() {
  if (version_ == CgroupVersion::kV2) {
    if (WriteFile(main_dir() + "/cgroup.kill", "1").ok()) return;
    // Before Linux 5.14: freeze, kill, thaw.
    const bool frozen = WriteFile(main_dir() + "/cgroup.freeze", "1").ok();
    KillEach(Pids());
    if (frozen) (void)WriteFile(main_dir() + "/cgroup.freeze", "0");
    return;
  }
  if (freezer_dir_.empty()) {
    // Without a freezer a process may fork between the read and the kill:
    // a few rounds, and the caller checks Pids() again.
    for (int i = 0; i < 3; ++i) KillEach(Pids());
    return;
  }
  const std::string state = freezer_dir_ + "/freezer.state";
  if (!WriteFile(state, "FROZEN").ok()) {
    KillEach(Pids());
    return;
  }
  // FREEZING until every task stopped; bounded, the kill works either way.
  for (int i = 0; i < 100; ++i) {
    std::string now;
    if (!ReadFile(state, &now) || absl::StartsWith(now, "FROZEN")) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  KillEach(Pids());
  (void)WriteFile(state, "THAWED");
}

absl::Status JobCgroup::Remove() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      if (err == EBUSY) {
        return absl::UnavailableError(
            absl::StrCat("cgroup ", *it, " still has processes"));
      }
      return absl::InternalError(
          absl::StrCat("cannot remove cgroup ", *it, ": ", ErrnoString(err)));
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::agent
