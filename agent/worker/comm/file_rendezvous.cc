// FileRendezvous: keys as files, atomic by rename, read by polling.
#include "agent/worker/comm/file_rendezvous.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace xl::worker {
namespace {

absl::Status MkdirAll(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      cur = path.substr(0, i);
      if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(
            absl::StrCat("mkdir ", cur, ": ", std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

FileRendezvous::FileRendezvous(std::string dir, std::string scope)
    : root_(absl::StrCat(dir, "/", scope)) {}

std::string FileRendezvous::PathOf(const std::string& key) const {
  // Keys may hold '/' and other bytes; keep [A-Za-z0-9._-], escape the rest.
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      name += absl::StrFormat("%%%02X", c);
    }
  }
  return absl::StrCat(root_, "/", name);
}

absl::Status FileRendezvous::Put(const std::string& key,
                                 const std::string& value) {
  if (absl::Status st = MkdirAll(root_); !st.ok()) return st;
  const std::string path = PathOf(key);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out.good()) return absl::InternalError("rendezvous: write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("rendezvous: rename ", tmp, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FileRendezvous::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> out(keys.size());
  std::vector<bool> have(keys.size(), false);
  for (;;) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (have[i]) continue;
      std::ifstream in(PathOf(keys[i]), std::ios::binary);
      if (!in) {
        missing.push_back(keys[i]);
        continue;
      }
      std::ostringstream ss;
      ss << in.rdbuf();
      out[i] = ss.str();
      have[i] = true;
    }
    if (missing.empty()) return out;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous keys never set in ", root_, ": ",
                       absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace xl::worker
