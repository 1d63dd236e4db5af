// xl's CPU all-reduce path (GlooCollective: Gloo ring over TCP, mean) timed
// from 4 KiB to 256 MiB. Forks `--ranks` processes that meet through a
// FileRendezvous; rank 0 prints "bytes seconds_per_op" lines, the format of
// mpi_allreduce.c, for allreduce_bench.py to put side by side.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/worker/comm/file_rendezvous.h"
#include "agent/worker/comm/gloo_collective.h"

namespace {

int RunRank(int rank, int size, const std::string& dir, long max_bytes) {
  xl::worker::FileRendezvous rendezvous(dir, "bench");
  xl::worker::GlooOptions options;
  options.hostname = "127.0.0.1";
  auto coll = xl::worker::GlooCollective::Create(rank, size, &rendezvous, options);
  if (!coll.ok()) {
    fprintf(stderr, "allreduce_bench: rank %d: %s\n", rank,
            std::string(coll.status().message()).c_str());
    return 1;
  }
  std::vector<float> buf(max_bytes / 4, 1.0f);
  for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    size_t n = bytes / 4;
    // About 1 GiB moved per size (at least 4 and at most 2000 operations),
    // so every size is timed over a similar stretch; same as the other side.
    int iters = (int)((1L << 30) / bytes);
    iters = iters < 4 ? 4 : (iters > 2000 ? 2000 : iters);
    (void)(*coll)->AllReduceMean(buf.data(), n);
    (void)(*coll)->Barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      auto st = (*coll)->AllReduceMean(buf.data(), n);
      if (!st.ok()) {
        fprintf(stderr, "allreduce_bench: %s\n", std::string(st.message()).c_str());
        return 1;
      }
    }
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    // Ring steps are lockstep, so rank 0 times the whole collective.
    (void)(*coll)->Barrier();
    if (rank == 0) {
      printf("%ld %.9f\n", bytes, t);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  long max_bytes = 256L << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help") {
      printf("usage: allreduce_bench [--ranks N] [--max-bytes B]\n");
      return 0;
    }
    if (a == "--ranks" && i + 1 < argc) ranks = atoi(argv[++i]);
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = atol(argv[++i]);
    else {
      fprintf(stderr, "allreduce_bench: unknown argument %s; see --help\n", a.c_str());
      return 2;
    }
  }
  std::string dir = std::filesystem::temp_directory_path() /
                    ("xl-allreduce-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) _exit(RunRank(r, ranks, dir, max_bytes));
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
