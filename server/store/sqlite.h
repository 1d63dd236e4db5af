// A thin RAII wrapper over the SQLite C API: a connection (Db) and prepared
// statements (Statement), with every result code mapped to absl::Status in
// this one file. A Db and its Statements are used by one thread at a time.
#ifndef XL_SERVER_STORE_SQLITE_H_
#define XL_SERVER_STORE_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xl::store {

class Statement;

struct DbOptions {
  bool read_only = false;
  // PRAGMA synchronous for files opened read-write (FULL, NORMAL, OFF).
  std::string synchronous = "FULL";
  // The VFS registered under this name; empty: SQLite's default.
  std::string vfs;
};

class Db {
 public:
  // Opens (creating if needed) the database file at `path`; ":memory:" for a
  // private in-memory database. Sets WAL and synchronous (FULL unless the
  // options say otherwise) for files.
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path,
                                                  const DbOptions& options);
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path,
                                                  bool read_only = false) {
    DbOptions options;
    options.read_only = read_only;
    return Open(path, options);
  }
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without results.
  absl::Status Exec(absl::string_view sql);
  absl::StatusOr<std::unique_ptr<Statement>> Prepare(absl::string_view sql);
  int64_t LastInsertRowId() const;
  // A transaction is open (SQLite may end one itself on some errors).
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  // Rows changed by the last INSERT, UPDATE or DELETE (0 for an ignored
  // INSERT OR IGNORE).
  int64_t Changes() const;
  // The status for SQLite result code `rc` on this connection.
  absl::Status Error(int rc, absl::string_view what) const;
  const std::string& path() const { return path_; }
  // The whole database as one consistent image (sqlite3_serialize: a read
  // transaction's view).
  absl::StatusOr<std::string> Serialize();
  // Replaces the whole database with `image` (a Serialize() of one of the
  // same page size) with the backup API, in one write transaction: other
  // connections see the new content on their next read.
  absl::Status ReplaceWith(absl::string_view image);

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  friend class Statement;
};

class Statement {
 public:
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind by 1-based index.
  void BindInt(int i, int64_t v);
  void BindDouble(int i, double v);
  void BindText(int i, absl::string_view v);
  void BindBlob(int i, absl::string_view v);
  void BindNull(int i);

  // Steps once: true when a row is ready, false when done.
  absl::StatusOr<bool> Step();
  // Steps to the end, calling `row` on each result row (stopping at its
  // first error), then resets the statement.
  absl::Status ForEachRow(const std::function<absl::Status()>& row);
  // Steps to the end, for statements without results.
  absl::Status Run() { return ForEachRow([] { return absl::OkStatus(); }); }
  // Clears bindings and resets, so the statement can be used again.
  void Reset();

  int64_t ColumnInt(int i) const;
  double ColumnDouble(int i) const;
  std::string ColumnText(int i) const;
  std::string ColumnBlob(int i) const;
  bool ColumnIsNull(int i) const;

 private:
  friend class Db;
  Statement(Db* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Db* db_;
  sqlite3_stmt* stmt_;
};

}  // namespace xl::store

#endif  // XL_SERVER_STORE_SQLITE_H_
