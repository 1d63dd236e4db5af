// DbLock: one xl-scheduler per database. An exclusive flock(2) on
// "<db>.lock", held for the process's life and released by the kernel when
// it dies (so a crash leaves no stale lock); the file names the holder's
// pid for the error a second scheduler prints. Thread-compatible.
#ifndef XL_SERVER_STORE_DB_LOCK_H_
#define XL_SERVER_STORE_DB_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace xl::store {

class DbLock {
 public:
  // Takes the lock of the database at `db_path`, or FAILED_PRECONDITION
  // naming the process that holds it.
  static absl::StatusOr<std::unique_ptr<DbLock>> Acquire(
      const std::string& db_path);
  ~DbLock();
  DbLock(const DbLock&) = delete;
  DbLock& operator=(const DbLock&) = delete;

 private:
  explicit DbLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace xl::store

#endif  // XL_SERVER_STORE_DB_LOCK_H_
