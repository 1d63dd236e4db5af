#include "agent/isolation/user.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "agent/log.h"

namespace xl::agent {
namespace {

absl::StatusOr<RankUser> FromPasswd(const passwd& pw) {
  RankUser user;
  user.name = pw.pw_name;
  user.uid = pw.pw_uid;
  user.gid = pw.pw_gid;
  user.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  user.shell = pw.pw_shell != nullptr ? pw.pw_shell : "";
  // getgrouplist says how many there are when the buffer is too small.
  int count = 16;
  for (int tries = 0; tries < 8; ++tries) {
    user.groups.assign(static_cast<size_t>(count), 0);
    int n = count;
    if (getgrouplist(pw.pw_name, pw.pw_gid, user.groups.data(), &n) >= 0) {
      user.groups.resize(static_cast<size_t>(n));
      return user;
    }
    count = n > count ? n : count * 2;
  }
  return absl::InternalError(absl::StrCat(
      "cannot list the groups of user ", user.name, " on this node"));
}

// getpwnam_r or getpwuid_r with a buffer that grows on ERANGE.
template <typename Key, typename Fn>
absl::StatusOr<RankUser> Look(Key key, Fn fn, const std::string& what) {
  long hint = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::string buffer(hint > 0 ? static_cast<size_t>(hint) : 4096, '\0');
  while (true) {
    passwd pw;
    passwd* found = nullptr;
    int err = fn(key, &pw, buffer.data(), buffer.size(), &found);
    if (err == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (found != nullptr) return FromPasswd(pw);
    // 0, ENOENT, ESRCH, EBADF and EPERM all mean "no such user".
    if (err == 0 || err == ENOENT || err == ESRCH || err == EBADF ||
        err == EPERM) {
      return absl::NotFoundError(what);
    }
    return absl::InternalError(absl::StrCat(
        "cannot read the user database: ", ErrnoString(err)));
  }
}

}  // namespace

absl::StatusOr<RankUser> LookUpUser(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "the job names no user; the scheduler must send StartRanks.user "
        "(upgrade xl-scheduler), or run xl-agent with --run-as agent");
  }
  return Look(name.c_str(), getpwnam_r,
              absl::StrCat("user \"", name,
                           "\" has no account on this node; create the "
                           "account (useradd ", name,
                           ") or submit the job as a user that exists here"));
}

absl::StatusOr<RankUser> AgentUser() {
  const uid_t uid = geteuid();
  absl::StatusOr<RankUser> user =
      Look(uid, getpwuid_r,
           absl::StrCat("the agent's uid ", uid,
                        " has no entry in the user database; add one"));
  if (user.ok()) user->gid = getegid();  // What the agent's files get.
  return user;
}

const char* RunAsName(RunAs run_as) {
  return run_as == RunAs::kAgent ? "agent" : "submitter";
}

}  // namespace xl::agent
