#include "server/store/migrator.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xl::store {

absl::StatusOr<int> SchemaVersion(Db* db) {
  ASSIGN_OR_RETURN(auto stmt, db->Prepare("PRAGMA user_version"));
  ASSIGN_OR_RETURN(bool row, stmt->Step());
  if (!row) return absl::InternalError("PRAGMA user_version returned no row");
  return static_cast<int>(stmt->ColumnInt(0));
}

absl::Status Migrate(Db* db, const std::vector<Migration>& migrations,
                     int target) {
  int newest = migrations.empty() ? 0 : migrations.back().version;
  if (target < 0) target = newest;
  ASSIGN_OR_RETURN(int current, SchemaVersion(db));
  if (current > newest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", db->path(), " has schema version ", current,
        " but this xl-scheduler knows versions up to ", newest,
        "; run a newer xl-scheduler or point --db at another file"));
  }
  for (const Migration& m : migrations) {
    if (m.version <= current || m.version > target) continue;
    RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
    absl::Status st = db->Exec(m.sql);
    if (st.ok()) {
      st = db->Exec(absl::StrCat("PRAGMA user_version = ", m.version));
    }
    if (!st.ok()) {
      (void)db->Exec("ROLLBACK");
      return Annotate(st, absl::StrCat("migration ", m.name));
    }
    RETURN_IF_ERROR(db->Exec("COMMIT"));
  }
  return absl::OkStatus();
}

}  // namespace xl::store
