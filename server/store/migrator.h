// Schema migrations: the numbered files of schema/ (embedded in the binary at
// build time), applied in order and tracked by PRAGMA user_version. Each
// migration runs in its own transaction. Not thread-safe; run at start.
#ifndef XL_SERVER_STORE_MIGRATOR_H_
#define XL_SERVER_STORE_MIGRATOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/sqlite.h"

namespace xl::store {

struct Migration {
  int version;
  std::string name;
  std::string sql;
};

// The migrations of schema/, in version order.
const std::vector<Migration>& SchemaMigrations();

absl::StatusOr<int> SchemaVersion(Db* db);

// Brings `db` up to `target` (-1: the newest). FAILED_PRECONDITION when the
// database is newer than every migration this binary knows.
absl::Status Migrate(Db* db, const std::vector<Migration>& migrations,
                     int target = -1);

}  // namespace xl::store

#endif  // XL_SERVER_STORE_MIGRATOR_H_
