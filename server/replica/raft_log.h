// RaftLog: a log of opaque entries (store transactions, change_codec.h)
// replicated across the scheduler's replicas with canonical raft (Debian's
// libraft 0.15, its libuv TCP transport and on-disk log), applied on every
// replica in log order. One thread runs raft's event loop; other threads
// append through a queue and are answered from that thread.
//
// What it gives: Append answers only once the entry is committed on a
// majority and applied on this replica, with what applying it gave; on a
// replica that does not lead it answers FAILED_PRECONDITION naming the leader
// (when one is known); an entry whose leadership was lost before it committed
// is answered UNAVAILABLE and may still commit (the caller's change must be
// safe to make again: idempotency keys, puts rather than increments).
//
// Snapshots: every `snapshot_every` entries, raft takes the whole state
// (`snapshot`) and drops the log before it but the last `snapshot_trailing`
// entries; a replica too far behind for those gets a snapshot (`restore`).
//
// Not yet: membership changes, TLS between replicas.
//
// Thread-safe.
#ifndef XL_SERVER_REPLICA_RAFT_LOG_H_
#define XL_SERVER_REPLICA_RAFT_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace xl::replica {

// The payload of an UNAVAILABLE answer whose entry may still commit (the
// leader lost its leadership with the entry in flight).
inline constexpr char kMayCommitPayload[] = "type.xl.dev/replica.may-commit";

class RaftLog {
 public:
  struct Options {
    // This replica's id (1, 2, ...) and every replica's raft address
    // ("host:port", this one's included), the same on all of them.
    uint64_t id = 0;
    std::map<uint64_t, std::string> peers;
    // raft's log and metadata (created when missing). One directory per
    // replica, never shared.
    std::string dir;
    absl::Duration election_timeout = absl::Seconds(1);
    absl::Duration heartbeat = absl::Milliseconds(100);
    // Applies a committed entry on this replica, in log order, on the loop
    // thread, and sets *outcome to the entry's own outcome (the leader's
    // Append answers with it: a write refused on its own, the same on every
    // replica). An error returned says this replica cannot apply it (a full
    // disk, an entry of a newer release): the process stops, as etcd does
    // (raft 0.15 would leave the replica dropping every later message); a
    // restart applies the log again from what its database says it did.
    std::function<absl::Status(uint64_t index, absl::string_view entry,
                               absl::Status* outcome)>
        apply;
    // The whole applied state, on the loop thread (empty: no snapshots, the
    // log grows without end); and its restore, on the loop thread, with a
    // state `snapshot` made (of this replica, at start, or the leader's).
    // A failed restore stops the process, as a failed apply does.
    std::function<absl::StatusOr<std::string>()> snapshot;
    std::function<absl::Status(absl::string_view state)> restore;
    unsigned snapshot_every = 16384;
    unsigned snapshot_trailing = 4096;
  };

  // Starts the replica: a new one bootstraps the configuration in
  // `peers`; one with a log goes on from it.
  static absl::StatusOr<std::unique_ptr<RaftLog>> Start(Options options);
  // Stops appending, lets the entries in flight finish (for at most a
  // few seconds) and closes.
  ~RaftLog();
  RaftLog(const RaftLog&) = delete;
  RaftLog& operator=(const RaftLog&) = delete;

  // Appends `entry`; `done` runs on the loop thread (never inside Append:
  // the caller may hold a lock the answer takes).
  void Append(std::string entry, std::function<void(absl::Status)> done);

  // Runs done(status) on the loop thread, after the appends queued before
  // it: an answer that must not come inside the caller's call.
  void Answer(absl::Status status, std::function<void(absl::Status)> done);

  struct State {
    bool leader = false;
    uint64_t leader_id = 0;  // 0: none known
    std::string leader_address;
    uint64_t term = 0;
    uint64_t commit_index = 0;
    uint64_t applied_index = 0;
  };
  // As of the loop's last look (at most a heartbeat old).
  State state() const;

  struct Impl;

 private:
  explicit RaftLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xl::replica

#endif  // XL_SERVER_REPLICA_RAFT_LOG_H_
