#include "agent/shim/rank_shim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace xl::agent::shim {
namespace {

// A spec is a sequence of fields "<name> <length>\n<bytes>\n"; repeated
// names append (argv, env, ...), and a "dir" starts a directory step whose
// "dir.*" fields follow it.
void Field(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, name, " ", value.size(), "\n", value, "\n");
}

// A whole number in [lo, hi] into `field`; false for anything else.
template <typename T>
bool Number(const std::string& value, T* field, int64_t lo, int64_t hi) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < lo || n > hi) return false;
  *field = static_cast<T>(n);
  return true;
}

template <typename T>
bool Number(const std::string& value, T* field) {
  return Number(value, field,
                static_cast<int64_t>(std::numeric_limits<T>::min()),
                static_cast<int64_t>(std::numeric_limits<T>::max()));
}

// "0" or "1".
bool Flag(const std::string& value, bool* field) {
  if (value != "0" && value != "1") return false;
  *field = value == "1";
  return true;
}

}  // namespace

std::string EncodeSpec(const Spec& spec) {
  std::string out;
  Field(&out, "version", "1");
  Field(&out, "job", spec.job_id);
  Field(&out, "attempt", absl::StrCat(spec.attempt));
  Field(&out, "rank", absl::StrCat(spec.rank));
  Field(&out, "lease_file", spec.lease_file);
  Field(&out, "grace_ms", absl::StrCat(spec.grace_ms));
  for (const DirStep& d : spec.dirs) {
    Field(&out, "dir", d.path);
    Field(&out, "dir.mode", absl::StrCat(d.mode));
    Field(&out, "dir.give", d.give_to_user ? "1" : "0");
    Field(&out, "dir.what", d.what);
    Field(&out, "dir.fix", d.fix);
  }
  Field(&out, "cwd", spec.dir);
  Field(&out, "program", spec.program);
  Field(&out, "search_path", spec.search_path);
  for (const std::string& a : spec.argv) Field(&out, "arg", a);
  for (const std::string& e : spec.env) Field(&out, "env", e);
  Field(&out, "change_user", spec.change_user ? "1" : "0");
  Field(&out, "uid", absl::StrCat(spec.uid));
  Field(&out, "gid", absl::StrCat(spec.gid));
  for (uint32_t g : spec.groups) Field(&out, "group", absl::StrCat(g));
  Field(&out, "user", spec.user_name);
  for (const std::string& p : spec.cgroup_procs) Field(&out, "cgroup_procs", p);
  Field(&out, "cgroup_dir", spec.cgroup_dir);
  Field(&out, "checkpoint_dir", spec.checkpoint_dir);
  Field(&out, "open_files", absl::StrCat(spec.open_files));
  Field(&out, "record", spec.record);
  Field(&out, "end", "");
  return out;
}

bool DecodeSpec(absl::string_view data, Spec* spec, std::string* error) {
  *spec = Spec();
  if (data.size() > kMaxSpecBytes) {
    *error = absl::StrCat("the spec is ", data.size(), " bytes; at most ",
                          kMaxSpecBytes, " are read");
    return false;
  }
  bool ended = false;
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) break;
    const absl::string_view head = data.substr(0, nl);
    const size_t space = head.rfind(' ');
    uint64_t length = 0;
    // The value and its newline must be there: compared without adding to
    // `length`, which may be anything up to 2^64 - 1.
    const size_t rest = data.size() - nl - 1;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtoi(head.substr(space + 1), &length) || length >= rest ||
        data[nl + 1 + length] != '\n') {
      *error = absl::StrCat("bad field header \"",
                            absl::CHexEscape(head.substr(0, 64)), "\"");
      return false;
    }
    const std::string name(head.substr(0, space));
    const std::string value(data.substr(nl + 1, length));
    data.remove_prefix(nl + 1 + length + 1);
    bool ok = true;
    if (name == "version") {
      ok = value == "1";
    } else if (name == "job") {
      spec->job_id = value;
    } else if (name == "attempt") {
      ok = Number(value, &spec->attempt);
    } else if (name == "rank") {
      ok = Number(value, &spec->rank);
    } else if (name == "lease_file") {
      spec->lease_file = value;
    } else if (name == "grace_ms") {
      ok = Number(value, &spec->grace_ms, 0,
                  std::numeric_limits<int64_t>::max());
    } else if (name == "dir") {
      spec->dirs.emplace_back().path = value;
    } else if (absl::StartsWith(name, "dir.")) {
      if (spec->dirs.empty()) {
        ok = false;
      } else if (name == "dir.mode") {
        ok = Number(value, &spec->dirs.back().mode, 0, 07777);
      } else if (name == "dir.give") {
        ok = Flag(value, &spec->dirs.back().give_to_user);
      } else if (name == "dir.what") {
        spec->dirs.back().what = value;
      } else if (name == "dir.fix") {
        spec->dirs.back().fix = value;
      }
    } else if (name == "cwd") {
      spec->dir = value;
    } else if (name == "program") {
      spec->program = value;
    } else if (name == "search_path") {
      spec->search_path = value;
    } else if (name == "arg") {
      spec->argv.push_back(value);
    } else if (name == "env") {
      spec->env.push_back(value);
    } else if (name == "change_user") {
      ok = Flag(value, &spec->change_user);
    } else if (name == "uid") {
      ok = Number(value, &spec->uid);
    } else if (name == "gid") {
      ok = Number(value, &spec->gid);
    } else if (name == "group") {
      ok = Number(value, &spec->groups.emplace_back());
    } else if (name == "user") {
      spec->user_name = value;
    } else if (name == "cgroup_procs") {
      spec->cgroup_procs.push_back(value);
    } else if (name == "cgroup_dir") {
      spec->cgroup_dir = value;
    } else if (name == "checkpoint_dir") {
      spec->checkpoint_dir = value;
    } else if (name == "open_files") {
      ok = absl::SimpleAtoi(value, &spec->open_files);
    } else if (name == "record") {
      spec->record = value;
    } else if (name == "end") {
      ended = true;
      break;
    }  // Unknown fields: from a newer agent; ignored.
    if (!ok) {
      *error = absl::StrCat("bad value for ", absl::CHexEscape(name), ": \"",
                            absl::CHexEscape(value.substr(0, 64)), "\"");
      return false;
    }
  }
  if (!ended) {
    *error = "the spec is cut short";
    return false;
  }
  if (spec->argv.empty() || spec->program.empty() || spec->dir.empty()) {
    *error = "the spec has no command or working directory";
    return false;
  }
  return true;
}

namespace {
const char* PhaseName(Status::Phase phase) {
  switch (phase) {
    case Status::kStarting: return "starting";
    case Status::kRunning: return "running";
    case Status::kFailed: return "failed";
    case Status::kExited: return "exited";
    case Status::kDone: return "done";
  }
  return "starting";
}
}  // namespace

std::string EncodeStatus(const Status& s) {
  // C-escaped: one line, and the message's bytes come back as they were
  // (a path with a newline in it is named as it is).
  const std::string message = absl::CEscape(s.message);
  return absl::StrCat("phase ", PhaseName(s.phase), "\npid ", s.pid,
                      "\nnode_fault ", s.node_fault ? 1 : 0, "\nwait_status ",
                      s.wait_status, "\nstdout ", s.stdout_bytes, "\nstderr ",
                      s.stderr_bytes, "\nstdout_dropped ", s.stdout_dropped,
                      "\nstderr_dropped ", s.stderr_dropped, "\nlease_stop ",
                      s.lease_stop ? 1 : 0, "\nmessage ", message, "\n");
}

bool DecodeStatus(absl::string_view data, Status* s) {
  const auto lines = ParseLines(data);
  auto phase = lines.find("phase");
  if (phase == lines.end()) return false;
  *s = Status();
  if (phase->second == "starting") {
    s->phase = Status::kStarting;
  } else if (phase->second == "running") {
    s->phase = Status::kRunning;
  } else if (phase->second == "failed") {
    s->phase = Status::kFailed;
  } else if (phase->second == "exited") {
    s->phase = Status::kExited;
  } else if (phase->second == "done") {
    s->phase = Status::kDone;
  } else {
    return false;
  }
  s->pid = static_cast<pid_t>(Int(lines, "pid"));
  s->node_fault = Int(lines, "node_fault") != 0;
  s->wait_status = static_cast<int>(Int(lines, "wait_status"));
  s->stdout_bytes = Int(lines, "stdout");
  s->stderr_bytes = Int(lines, "stderr");
  s->stdout_dropped = Int(lines, "stdout_dropped");
  s->stderr_dropped = Int(lines, "stderr_dropped");
  s->lease_stop = Int(lines, "lease_stop") != 0;
  auto message = lines.find("message");
  if (message != lines.end() &&
      !absl::CUnescape(message->second, &s->message)) {
    s->message = message->second;
  }
  // A rank that ran has a pid; a signal to -0 would be the agent's own group.
  return s->phase == Status::kStarting || s->phase == Status::kFailed ||
         s->pid > 1;
}

std::map<std::string, std::string> ParseLines(absl::string_view data) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(data, '\n')) {
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) {
      out[std::string(line)] = "";
    } else {
      out[std::string(line.substr(0, space))] =
          std::string(line.substr(space + 1));
    }
  }
  return out;
}

int64_t Int(const std::map<std::string, std::string>& lines,
            const std::string& key, int64_t fallback) {
  auto it = lines.find(key);
  int64_t v = 0;
  if (it == lines.end() || !absl::SimpleAtoi(it->second, &v)) return fallback;
  return v;
}

bool WriteFileAtomically(const std::string& path, absl::string_view data) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved == 0 ? ENOSPC : saved;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    return false;
  }
  return true;
}

bool ReadWholeFile(const std::string& path, std::string* data) {
  data->clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      return false;
    }
    if (n == 0) break;
    data->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

std::string RankDir(const std::string& state_dir, const std::string& job_id,
                    int attempt, int rank) {
  return absl::StrCat(state_dir, "/ranks/", job_id, ".", attempt, ".", rank);
}

std::string BootId() {
  std::string id;
  ReadWholeFile("/proc/sys/kernel/random/boot_id", &id);
  return std::string(absl::StripAsciiWhitespace(id));
}

bool LeaseExpired(const std::string& lease_file, int64_t now_ns) {
  if (lease_file.empty()) return false;
  // An agent that runs renews the lease or stops the ranks itself: a lease
  // file it could not rewrite (a full disk) must not stop them.
  const size_t slash = lease_file.rfind('/');
  const std::string agent_lock =
      (slash == std::string::npos ? std::string(".")
                                  : lease_file.substr(0, slash)) +
      "/agent.lock";
  int lock = ::open(agent_lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock >= 0) {
    const bool agent_runs = ::flock(lock, LOCK_SH | LOCK_NB) != 0;
    ::close(lock);
    if (agent_runs) return false;
  }
  std::string data;
  if (!ReadWholeFile(lease_file, &data)) return false;
  int64_t deadline = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(data), &deadline)) {
    return false;  // "none"
  }
  return now_ns >= deadline;
}

std::string EncodeLease(int64_t deadline_ns) {
  return deadline_ns < 0 ? std::string("none\n")
                         : absl::StrCat(deadline_ns, "\n");
}

}  // namespace xl::agent::shim
