#include "server/store/sqlite.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace xl::store {

absl::Status Db::Error(int rc, absl::string_view what) const {
  std::string msg = absl::StrCat("sqlite ", what, " on ", path_, ": ",
                                 db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(msg);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat(msg, "; free disk space where --db lives"));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(
          absl::StrCat(msg, "; check that the --db directory is writable"));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::string> Db::Serialize() {
  sqlite3_int64 size = 0;
  unsigned char* image = sqlite3_serialize(db_, "main", &size, 0);
  if (image == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path_, ": cannot copy the database (out of memory, or an empty "
        "database)"));
  }
  std::string out(reinterpret_cast<const char*>(image),
                  static_cast<size_t>(size));
  sqlite3_free(image);
  return out;
}

absl::Status Db::ReplaceWith(absl::string_view image) {
  if (image.size() < 100 || image.substr(0, 16) != absl::string_view(
                                                       "SQLite format 3\0", 16)) {
    return absl::DataLossError(
        absl::StrCat(path_, ": the image to restore is not a SQLite database"));
  }
  sqlite3* mem = nullptr;
  int rc = sqlite3_open(":memory:", &mem);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(mem, sqlite3_close);
  if (rc != SQLITE_OK) return Error(rc, "restore: open memory");
  auto* copy = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  if (copy == nullptr) return absl::ResourceExhaustedError("restore: memory");
  memcpy(copy, image.data(), image.size());
  // A WAL database's image says so in bytes 18-19; the in-memory copy
  // reads it as a rollback-journal one.
  copy[18] = copy[19] = 1;
  rc = sqlite3_deserialize(mem, "main", copy, image.size(), image.size(),
                           SQLITE_DESERIALIZE_FREEONCLOSE |
                               SQLITE_DESERIALIZE_READONLY);
  if (rc != SQLITE_OK) {
    return absl::DataLossError(
        absl::StrCat(path_, ": the image to restore cannot be read: ",
                     sqlite3_errstr(rc)));
  }
  // A damaged image (sqlite3_serialize reads unreadable pages as zeros)
  // must not replace a good database.
  sqlite3_stmt* check = nullptr;
  rc = sqlite3_prepare_v2(mem, "PRAGMA quick_check", -1, &check, nullptr);
  std::string verdict;
  if (rc == SQLITE_OK && sqlite3_step(check) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(check, 0);
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  }
  sqlite3_finalize(check);
  if (verdict != "ok") {
    return absl::DataLossError(absl::StrCat(
        path_, ": the image to restore fails SQLite's check: ", verdict));
  }
  sqlite3_backup* backup = sqlite3_backup_init(db_, "main", mem, "main");
  if (backup == nullptr) return Error(sqlite3_errcode(db_), "restore");
  rc = sqlite3_backup_step(backup, -1);
  const int finish = sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) return Error(rc, "restore");
  if (finish != SQLITE_OK) return Error(finish, "restore");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path,
                                             const DbOptions& options) {
  const bool read_only = options.read_only;
  if (options.synchronous != "FULL" && options.synchronous != "NORMAL" &&
      options.synchronous != "OFF") {
    return absl::InvalidArgumentError(absl::StrCat(
        "synchronous: \"", options.synchronous, "\" is not FULL, NORMAL or OFF"));
  }
  sqlite3* raw = nullptr;
  int flags = read_only ? SQLITE_OPEN_READONLY
                        : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags,
                           options.vfs.empty() ? nullptr : options.vfs.c_str());
  std::unique_ptr<Db> db(new Db(raw, path));
  if (rc != SQLITE_OK) return db->Error(rc, "open");
  sqlite3_busy_timeout(raw, 5000);
  sqlite3_extended_result_codes(raw, 1);
  if (path != ":memory:" && !read_only) {
    auto st = db->Exec(absl::StrCat("PRAGMA journal_mode=WAL; PRAGMA synchronous=",
                                    options.synchronous, ";"));
    if (!st.ok()) return st;
  }
  auto st = db->Exec("PRAGMA foreign_keys=ON;");
  if (!st.ok()) return st;
  return db;
}

Db::~Db() { sqlite3_close_v2(db_); }

absl::Status Db::Exec(absl::string_view sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status st = Error(rc, "exec");
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Statement>> Db::Prepare(absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare '", sql, "'"));
  return std::unique_ptr<Statement>(new Statement(this, stmt));
}

int64_t Db::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

int64_t Db::Changes() const { return sqlite3_changes(db_); }

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::BindInt(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
void Statement::BindDouble(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
void Statement::BindText(int i, absl::string_view v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                    SQLITE_TRANSIENT);
}
void Statement::BindBlob(int i, absl::string_view v) {
  sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()),
                    SQLITE_TRANSIENT);
}
void Statement::BindNull(int i) { sqlite3_bind_null(stmt_, i); }

absl::StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, "step");
}

absl::Status Statement::ForEachRow(const std::function<absl::Status()>& row) {
  absl::Status status;
  while (status.ok()) {
    auto more = Step();
    if (!more.ok()) {
      status = more.status();
    } else if (!*more) {
      break;
    } else {
      status = row();
    }
  }
  Reset();
  return status;
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::ColumnInt(int i) const {
  return sqlite3_column_int64(stmt_, i);
}
double Statement::ColumnDouble(int i) const {
  return sqlite3_column_double(stmt_, i);
}
std::string Statement::ColumnText(int i) const {
  const unsigned char* p = sqlite3_column_text(stmt_, i);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         sqlite3_column_bytes(stmt_, i))
           : std::string();
}
std::string Statement::ColumnBlob(int i) const {
  const void* p = sqlite3_column_blob(stmt_, i);
  return p ? std::string(static_cast<const char*>(p),
                         sqlite3_column_bytes(stmt_, i))
           : std::string();
}
bool Statement::ColumnIsNull(int i) const {
  return sqlite3_column_type(stmt_, i) == SQLITE_NULL;
}

}  // namespace xl::store
