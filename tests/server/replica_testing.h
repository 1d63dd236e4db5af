// Helpers of the replication tests and bench: a free loopback port for a
// replica, and a database's rows as bytes (two replicas that applied the
// same log must dump the same).
#ifndef XL_TESTS_SERVER_REPLICA_TESTING_H_
#define XL_TESTS_SERVER_REPLICA_TESTING_H_

#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace xl::testing {

// A port free now on 127.0.0.1 (the kernel's pick).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Every row of every table but `probe` (a clock), table by table in name
// order and rowid order, each value as its bytes.
inline std::string DumpDatabase(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "cannot open";
  std::vector<std::string> tables;
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT name FROM sqlite_master WHERE type = 'table' "
                     "AND name != 'probe' ORDER BY name",
                     -1, &s, nullptr);
  while (sqlite3_step(s) == SQLITE_ROW) {
    tables.emplace_back(
        reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  }
  sqlite3_finalize(s);
  std::string out;
  for (const std::string& t : tables) {
    out += "== " + t + "\n";
    sqlite3_prepare_v2(db, ("SELECT * FROM " + t).c_str(), -1, &s, nullptr);
    while (sqlite3_step(s) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const void* blob = sqlite3_column_blob(s, c);
        out += std::string(static_cast<const char*>(blob),
                           blob == nullptr ? 0 : sqlite3_column_bytes(s, c));
        out += "|";
      }
      out += "\n";
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return out;
}

}  // namespace xl::testing

#endif  // XL_TESTS_SERVER_REPLICA_TESTING_H_
