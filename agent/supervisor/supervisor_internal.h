// What supervisor.cc and rank_state.cc share: a rank as the supervisor
// follows it, its outputs, and the helpers both use. Not for other users.
#ifndef XL_AGENT_SUPERVISOR_SUPERVISOR_INTERNAL_H_
#define XL_AGENT_SUPERVISOR_SUPERVISOR_INTERNAL_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/shim/rank_shim.h"
#include "agent/supervisor/supervisor.h"
#include "xl/v1/agent.pb.h"

namespace xl::agent {

// A rank's stdout, stderr or metrics: its spool file (written by the shim),
// how far it was read and sent, and the bytes not yet sent because their
// line is incomplete.
struct Supervisor::Output {
  Output(v1::LogStream stream, const char* name) : stream(stream), name(name) {}
  const v1::LogStream stream;
  const char* const name;  // the spool's file name
  int fd = -1;            // open while the rank's output may still grow
  bool closed = false;
  std::string pending;
  absl::Time pending_since = absl::InfiniteFuture();
  int64_t offset = 0;       // bytes emitted so far (LogChunk.end_offset)
  int64_t read_offset = 0;  // bytes read from the spool
  int64_t stored = 0;       // acknowledged by the scheduler
  // Chunk ends an earlier agent sent past `stored`: sent again as the same
  // chunks after an adoption.
  std::deque<int64_t> replay;
  int chunks_fd = -1;  // where chunk ends are remembered
  int64_t punched = 0;  // the spool's bytes given back to the disk
  // Bytes the shim could not spool, already said in the rank's log.
  int64_t dropped_said = 0;
  // The spool cannot be opened or read (said once in the rank's log):
  // nothing more comes of it.
  bool unreadable = false;
  // The last read stopped with the spool's end not reached (no room in the
  // session, or the per-poll bound): the pending partial line is not a
  // partial line of the rank's, so it is not flushed on a timer.
  bool starved = false;
  // Metrics only: the latest whole line not yet sent, and when one was
  // (SupervisorOptions::metrics_interval).
  std::string held;
  absl::Time sent_at = absl::InfinitePast();
};

// One started rank. pgid == pid: the leader is the process the shim
// execve'd.
struct Supervisor::Process {
  RankKey key;
  std::string dir;  // its state directory
  pid_t shim_pid = 0;
  bool shim_gone = false;
  absl::Time next_lock_check = absl::InfinitePast();
  int watch = -1;
  bool dirty = true;
  // The shim reported the rank running (pid known), or the start is over.
  bool started = false;
  bool finished = false;  // failed to start: nothing left to follow
  pid_t pid = 0;
  bool leader_alive = true;
  // Some process of the group may remain after the leader exits.
  bool group_alive = true;
  bool stopping = false;
  // Why the agent stopped it on its own (its lease ran out, it is shutting
  // down); empty when the scheduler asked or nobody did.
  std::string stopped_by_agent;
  bool sigkill_sent = false;
  // A signal asked for before the rank had a pid.
  int pending_signal = 0;
  absl::Time kill_deadline = absl::InfiniteFuture();
  absl::Duration grace;
  // The leader exited; its status goes once the output it wrote before
  // (up to out_end and err_end in the spools; -1: all there is) has been
  // handed to the session, which may take a while when the session is
  // full (a restarted agent with much output to send again).
  struct PendingExit {
    int wait_status = 0;
    bool lease_stop = false;
    std::string how;
    int64_t out_end = -1;
    int64_t err_end = -1;
    absl::Time since;  // monotonic: the hold is bounded (kExitHold)
  };
  std::optional<PendingExit> pending_exit;
  // The group ended after the leader's exit was said: said once the
  // outputs are read to their end.
  bool group_gone_unsaid = false;
  // The RANK_EXITED status sent at the leader's exit, sent again without
  // processes_remaining once the group is gone.
  v1::RankStatus exit_status;
  Output out{v1::STDOUT, shim::kStdout};
  Output err{v1::STDERR, shim::kStderr};
  // XL_METRICS_FD: one TrainMetrics JSON object per line.
  Output metrics{v1::LOG_STREAM_UNSPECIFIED, shim::kMetrics};
  absl::Time metrics_persisted = absl::InfinitePast();
};

namespace internal {

inline void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// True while any process of the group exists (zombies included).
inline bool GroupAlive(pid_t pgid) {
  return pgid > 0 && (::kill(-pgid, 0) == 0 || errno == EPERM);
}

// True when no xl-rank-shim holds the rank directory's lock (it is gone,
// or it never started).
inline bool ShimGone(const std::string& dir) {
  int fd = ::open((dir + "/" + shim::kLock).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);  // Releases it again when taken.
  return free;
}

// The chunk ends remembered in a chunks file.
inline std::vector<int64_t> ReadChunkEnds(const std::string& path) {
  std::string data;
  std::vector<int64_t> ends;
  if (!shim::ReadWholeFile(path, &data)) return ends;
  for (size_t i = 0; i + sizeof(int64_t) <= data.size(); i += sizeof(int64_t)) {
    int64_t end;
    memcpy(&end, data.data() + i, sizeof(end));
    ends.push_back(end);
  }
  return ends;
}

}  // namespace internal
}  // namespace xl::agent

#endif  // XL_AGENT_SUPERVISOR_SUPERVISOR_INTERNAL_H_
