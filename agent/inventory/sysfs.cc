#include "agent/inventory/sysfs.h"

#include <dirent.h>
#include <sched.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/log.h"

namespace xl::agent {
namespace {

std::string Join(const std::string& root, absl::string_view rel) {
  std::string out = root.empty() ? "/" : root;
  if (out.back() != '/') out.push_back('/');
  absl::StrAppend(&out, absl::StripPrefix(rel, "/"));
  return out;
}

// The first line of a small sysfs file, trimmed; empty when unreadable.
std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

// Sorted names in a directory (no "." and ".."); empty when it is missing.
std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  // readdir is safe on a DIR* no other thread uses.
  while (struct dirent* entry =
             readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(std::move(name));
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// /proc/mounts escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountField(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' &&
        s[i + 1] <= '7') {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(v));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// True when `source` ("/dev/nvme0n1p2") is `device` or one of its partitions.
bool IsDeviceOrPartition(absl::string_view source, const std::string& device) {
  if (!absl::ConsumePrefix(&source, "/dev/")) return false;
  if (!absl::ConsumePrefix(&source, device)) return false;
  if (source.empty()) return true;
  if (!absl::ConsumePrefix(&source, "p") || source.empty()) return false;
  return std::all_of(source.begin(), source.end(),
                     [](char c) { return absl::ascii_isdigit(c); });
}

// Mount point of `device` or a partition of it; empty when not mounted.
std::string FindMountPoint(const std::string& root, const std::string& device) {
  std::ifstream in(Join(root, "proc/mounts"));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 2) continue;
    if (IsDeviceOrPartition(fields[0], device)) {
      return UnescapeMountField(fields[1]);
    }
  }
  return "";
}

// "200 Gb/sec (4X HDR)" -> 200.
double ParseIbRate(const std::string& rate) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(rate, ' ', absl::SkipEmpty());
  double gbps = 0;
  if (parts.empty() || !absl::SimpleAtod(parts[0], &gbps) || gbps < 0) {
    return 0;
  }
  return gbps;
}

}  // namespace

absl::StatusOr<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("statvfs ", path, ": ", ErrnoString(errno)));
  }
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

absl::StatusOr<std::vector<v1::Nvme>> DiscoverNvme(
    const std::string& root, const std::string& work_dir) {
  std::vector<v1::Nvme> out;
  for (const std::string& name : ListDir(Join(root, "sys/block"))) {
    if (!absl::StartsWith(name, "nvme")) continue;
    const std::string dir = Join(root, absl::StrCat("sys/block/", name));
    // nvmeXcYnZ are the hidden per-controller paths of a multipath device.
    if (ReadFirstLine(dir + "/hidden") == "1") continue;
    uint64_t sectors = 0;
    if (!absl::SimpleAtoi(ReadFirstLine(dir + "/size"), &sectors)) continue;
    v1::Nvme nvme;
    nvme.set_device(name);
    nvme.set_capacity_bytes(sectors * 512);
    std::string mount = FindMountPoint(root, name);
    if (!mount.empty()) {
      // A device that holds "/" also holds the work dir in the usual setup;
      // "/xl-scratch" would need root to create.
      nvme.set_path(mount == "/" ? work_dir + "/scratch"
                                 : absl::StrCat(mount, "/xl-scratch"));
      absl::StatusOr<uint64_t> free_bytes = FreeBytes(mount);
      if (free_bytes.ok()) nvme.set_free_bytes(*free_bytes);
    }
    out.push_back(std::move(nvme));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Nic>> DiscoverNics(const std::string& root) {
  std::vector<v1::Nic> out;
  for (const std::string& name : ListDir(Join(root, "sys/class/net"))) {
    if (name == "lo") continue;
    const std::string dir = Join(root, absl::StrCat("sys/class/net/", name));
    // ARPHRD_INFINIBAND: the IPoIB face of an HCA listed below.
    if (ReadFirstLine(dir + "/type") == "32") continue;
    v1::Nic nic;
    nic.set_name(name);
    nic.set_kind(v1::ETHERNET);
    int64_t mbps = 0;
    if (absl::SimpleAtoi(ReadFirstLine(dir + "/speed"), &mbps) && mbps > 0) {
      nic.set_gbps(static_cast<double>(mbps) / 1000.0);
    }
    out.push_back(std::move(nic));
  }
  for (const std::string& name : ListDir(Join(root, "sys/class/infiniband"))) {
    const std::string ports =
        Join(root, absl::StrCat("sys/class/infiniband/", name, "/ports"));
    double gbps = 0;
    for (const std::string& port : ListDir(ports)) {
      gbps = std::max(
          gbps,
          ParseIbRate(ReadFirstLine(absl::StrCat(ports, "/", port, "/rate"))));
    }
    v1::Nic nic;
    nic.set_name(name);
    nic.set_kind(v1::INFINIBAND);
    nic.set_gbps(gbps);
    out.push_back(std::move(nic));
  }
  return out;
}

int DiscoverCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::StatusOr<uint64_t> DiscoverMemoryBytes(const std::string& root) {
  const std::string path = Join(root, "proc/meminfo");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "MemTotal:")) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(rest, ' ', absl::SkipEmpty());
    uint64_t kib = 0;
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kib)) return kib * 1024;
  }
  return absl::InternalError(absl::StrCat(
      "no MemTotal in ", path, "; pass --inventory to describe the node"));
}

}  // namespace xl::agent
