// raft_log_bench: how many entries a second the replicated log
// (server/replica/raft_log.h) commits, and how long each waits, with one
// replica (its own disk only) and with three (a majority of disks and
// loopback TCP), side by side in one run on this machine. Entries are
// --size bytes (a store transaction of a few submits is about 1-3 KB),
// --inflight of them outstanding at once (group commit is the caller's:
// this measures the log alone, applying nothing).
//
// usage: raft_log_bench [--entries N] [--size B] [--inflight K] [--dir D]
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/replica/raft_log.h"
#include "tests/server/replica_testing.h"

namespace {

using xl::replica::RaftLog;

struct Result {
  double per_second = 0;
  double p50_ms = 0, p99_ms = 0;
  int failed = 0;
};

Result Run(int replicas, int entries, int size, int inflight,
           const std::string& dir) {
  std::map<uint64_t, std::string> peers;
  for (int id = 1; id <= replicas; ++id) {
    peers[id] = absl::StrCat("127.0.0.1:", xl::testing::FreePort());
  }
  std::vector<std::unique_ptr<RaftLog>> logs;
  for (int id = 1; id <= replicas; ++id) {
    RaftLog::Options o;
    o.id = id;
    o.peers = peers;
    o.dir = absl::StrCat(dir, "/r", replicas, "-", id);
    o.election_timeout = absl::Milliseconds(300);
    o.heartbeat = absl::Milliseconds(50);
    o.apply = [](uint64_t, absl::string_view, absl::Status*) {
      return absl::OkStatus();
    };
    auto log = RaftLog::Start(o);
    if (!log.ok()) {
      fprintf(stderr, "raft_log_bench: %s\n", log.status().ToString().c_str());
      exit(1);
    }
    logs.push_back(*std::move(log));
  }
  RaftLog* leader = nullptr;
  const absl::Time until = absl::Now() + absl::Seconds(15);
  while (leader == nullptr && absl::Now() < until) {
    for (auto& l : logs) {
      if (l->state().leader) leader = l.get();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (leader == nullptr) {
    fprintf(stderr, "raft_log_bench: no leader in 15 s\n");
    exit(1);
  }
  absl::Mutex mu;
  int outstanding = 0, finished = 0, failed = 0;
  std::vector<double> latency_ms;
  latency_ms.reserve(entries);
  const std::string entry(size, 'x');
  const absl::Time start = absl::Now();
  for (int i = 0; i < entries; ++i) {
    {
      absl::MutexLock lock(&mu);
      auto room = [&] { return outstanding < inflight; };
      mu.Await(absl::Condition(&room));
      ++outstanding;
    }
    const absl::Time sent = absl::Now();
    leader->Append(entry, [&, sent](absl::Status st) {
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - sent);
      absl::MutexLock lock(&mu);
      --outstanding;
      ++finished;
      if (!st.ok()) ++failed;
      latency_ms.push_back(ms);
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all = [&] { return finished == entries; };
    mu.Await(absl::Condition(&all));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  logs.clear();
  std::sort(latency_ms.begin(), latency_ms.end());
  Result r;
  r.per_second = entries / seconds;
  r.p50_ms = latency_ms[latency_ms.size() / 2];
  r.p99_ms = latency_ms[latency_ms.size() * 99 / 100];
  r.failed = failed;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int entries = 20000, size = 2048, inflight = 64;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "raft_log_bench: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--entries") {
      entries = std::max(1, atoi(value().c_str()));
    } else if (a == "--size") {
      size = std::max(0, atoi(value().c_str()));
    } else if (a == "--inflight") {
      inflight = std::max(1, atoi(value().c_str()));
    } else if (a == "--dir") {
      dir = value();
    } else {
      printf(
          "usage: raft_log_bench [--entries N] [--size B] [--inflight K] "
          "[--dir D]\n\nCommits N entries of B bytes, K in flight, on a "
          "replicated log of one replica and of three (loopback TCP, each "
          "with its own directory under D, default a new one in /tmp), and "
          "prints entries/s and commit latency side by side.\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/xl-raft-bench-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  printf("raft_log_bench: %d entries of %d bytes, %d in flight, in %s\n",
         entries, size, inflight, dir.c_str());
  printf("| replicas | entries/s | commit p50 ms | p99 ms | failed |\n");
  printf("|---|---|---|---|---|\n");
  double one = 0;
  for (int replicas : {1, 3}) {
    Result r = Run(replicas, entries, size, inflight, dir);
    if (replicas == 1) one = r.per_second;
    printf("| %d | %.0f | %.2f | %.2f | %d |\n", replicas, r.per_second,
           r.p50_ms, r.p99_ms, r.failed);
  }
  (void)one;
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
