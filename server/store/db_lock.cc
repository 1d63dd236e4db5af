#include "server/store/db_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace xl::store {

absl::StatusOr<std::unique_ptr<DbLock>> DbLock::Acquire(
    const std::string& db_path) {
  if (db_path == ":memory:") return std::unique_ptr<DbLock>(new DbLock(-1));
  const std::string path = db_path + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--db: cannot open ", path, ": ", strerror(errno),
                     "; check that the --db directory is writable"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(absl::StripAsciiWhitespace(
                                     absl::string_view(buf, n)))
                               : "";
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db: ", db_path, " is in use by another xl-scheduler",
          holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"),
          "; two schedulers on one database would overwrite each other's "
          "jobs: stop that one first, or give this one another --db"));
    }
    return absl::UnavailableError(absl::StrCat(
        "--db: cannot lock ", path, ": ", strerror(err)));
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) !=
          static_cast<ssize_t>(pid.size())) {
    // The pid is only for the message; the lock is what counts.
  }
  return std::unique_ptr<DbLock>(new DbLock(fd));
}

DbLock::~DbLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace xl::store
