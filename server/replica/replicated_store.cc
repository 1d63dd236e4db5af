#include "server/replica/replicated_store.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/store/change_codec.h"

namespace xl::replica {
namespace {

// A write refused on its own (the same on every replica) rather than by
// the database (a full disk, an I/O error: this replica only).
bool OwnFailure(const absl::Status& st) {
  return absl::IsAlreadyExists(st) || absl::IsInvalidArgument(st) ||
         absl::IsFailedPrecondition(st) || absl::IsNotFound(st);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicatedStore>> ReplicatedStore::Open(
    const std::string& db_path, RaftLog::Options log) {
  store::StoreOptions options;
  options.synchronous = "NORMAL";  // the log is what is synced
  ASSIGN_OR_RETURN(auto local, store::SqliteStore::Open(db_path, options));
  ASSIGN_OR_RETURN(store::StoredState state, local->Load());
  // A database that applied entries of a log now gone (its raft directory
  // wiped or another given) would skip the new log's first entries as
  // applied: refuse, rather than hold other rows than the others.
  std::error_code ec;
  const bool new_log =
      !std::filesystem::exists(log.dir + "/metadata1", ec) &&
      !std::filesystem::exists(log.dir + "/metadata2", ec);
  if (new_log && state.applied_index > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        db_path, " holds entries up to ", state.applied_index,
        " of a replicated log, but the Raft log in ", log.dir,
        " is new: start it with its own Raft directory, or remove the "
        "database (and that directory) to join as a new replica, which "
        "copies the leader's state"));
  }
  std::unique_ptr<ReplicatedStore> s(new ReplicatedStore());
  s->local_ = std::move(local);
  s->applied_ = state.applied_index;
  ReplicatedStore* raw = s.get();
  log.apply = [raw](uint64_t index, absl::string_view entry,
                    absl::Status* outcome) {
    return raw->Apply(index, entry, outcome);
  };
  if (log.snapshot_every > 0) {
    log.snapshot = [raw] { return raw->Snapshot(); };
  }
  log.restore = [raw](absl::string_view state) {
    return raw->Restore(state);
  };
  ASSIGN_OR_RETURN(s->log_, RaftLog::Start(std::move(log)));
  return s;
}

ReplicatedStore::~ReplicatedStore() {
  log_.reset();  // no more applies
  local_.reset();
}

void ReplicatedStore::WriteChanges(
    std::shared_ptr<const store::ChangeBatch> batch, DoneFn done) {
  absl::StatusOr<std::string> entry = store::EncodeChanges(batch->changes);
  // What the followers could not decode (a string that is not UTF-8) is
  // refused here, before the log: never applied here and skipped there.
  if (entry.ok()) {
    if (absl::Status back = store::DecodeChanges(*entry).status();
        !back.ok()) {
      entry = absl::InvalidArgumentError(absl::StrCat(
          "the change cannot be replicated: ", back.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (entry.ok()) {
    // ChangeBatch.nonce (field 3, fixed64), appended: the encoding of a
    // message is the concatenation of its fields'.
    const uint64_t nonce = absl::Uniform<uint64_t>(bitgen_);
    entry->push_back(static_cast<char>((3 << 3) | 1));
    for (int i = 0; i < 8; ++i) {
      entry->push_back(static_cast<char>(nonce >> (8 * i)));
    }
  }
  if (!entry.ok()) {
    ++unanswered_;
    log_->Answer(entry.status(), [this, done = std::move(done)](
                                     absl::Status st) {
      done(std::move(st));
      absl::MutexLock lock(&mu_);
      --unanswered_;
    });
    return;
  }
  ++unanswered_;
  auto own = std::make_shared<Own>();
  own->entry = *entry;
  own->batch = std::move(batch);
  own->done = std::move(done);
  own_.push_back(own);
  auto it = std::prev(own_.end());
  log_->Append(*std::move(entry), [this, it, own](absl::Status st) {
    mu_.Lock();
    own->raft_answered = true;
    own->raft_status = st;
    if (own->applied) {
      mu_.Unlock();
      Deliver();  // in log order, once the local store has it too
      return;
    }
    // Not applied here (not committed, or not yet): answered now.
    own_.erase(it);
    mu_.Unlock();
    own->done(st.ok() ? absl::UnavailableError(
                            "the entry committed but was not applied here")
                      : std::move(st));
    absl::MutexLock lock(&mu_);
    --unanswered_;
  });
}

void ReplicatedStore::Deliver() {
  mu_.Lock();
  if (delivering_) {  // that thread looks again before it stops
    mu_.Unlock();
    return;
  }
  delivering_ = true;
  while (true) {
    std::vector<std::shared_ptr<Own>> ready;
    while (!order_.empty() && order_.front()->raft_answered &&
           order_.front()->local_done) {
      ready.push_back(std::move(order_.front()));
      order_.pop_front();
    }
    if (ready.empty()) break;
    mu_.Unlock();
    for (const auto& o : ready) {
      o->done(!o->raft_status.ok() ? o->raft_status : o->local_status);
    }
    mu_.Lock();
    unanswered_ -= static_cast<int64_t>(ready.size());
  }
  delivering_ = false;
  mu_.Unlock();
}

absl::Status ReplicatedStore::Drain() {
  return local_->WriteSync([](store::Tx&) { return absl::OkStatus(); });
}

void ReplicatedStore::Barrier(DoneFn done) {
  WriteChanges(std::make_shared<const store::ChangeBatch>(), std::move(done));
}

bool ReplicatedStore::WaitAnswered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unanswered_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

void ReplicatedStore::Write(WriteFn, DoneFn done) {
  log_->Answer(absl::UnimplementedError("a replicated store takes change "
                                        "lists (WriteChanges), not functions"),
               std::move(done));
}

namespace {

// A snapshot: this magic, the index of the last entry applied in it (8
// bytes, little-endian), then the database's image.
constexpr absl::string_view kSnapshotMagic("xlsnap1\n", 8);

}  // namespace

absl::StatusOr<std::string> ReplicatedStore::Snapshot() {
  // Every entry applied so far committed here first: the image holds them,
  // and the index of the last in replica_applied too.
  RETURN_IF_ERROR(Drain());
  ASSIGN_OR_RETURN(std::string image, local_->Serialize());
  std::string out(kSnapshotMagic);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(applied_ >> (8 * i)));
  out += image;
  return out;
}

absl::Status ReplicatedStore::Restore(absl::string_view state) {
  if (state.size() < 16 || state.substr(0, 8) != kSnapshotMagic) {
    return absl::DataLossError(
        "a snapshot of the replicated log that is not xl's (format 1); run "
        "the same release on every replica");
  }
  uint64_t index = 0;
  for (int i = 0; i < 8; ++i) {
    index |= uint64_t{static_cast<unsigned char>(state[8 + i])} << (8 * i);
  }
  // At start raft restores its newest snapshot, which this database holds
  // already (its writes were committed before the snapshot was taken).
  if (index <= applied_) return absl::OkStatus();
  RETURN_IF_ERROR(Drain());
  RETURN_IF_ERROR(local_->ReplaceWith(state.substr(16)));
  applied_ = index;
  return absl::OkStatus();
}

absl::Status ReplicatedStore::Apply(uint64_t index, absl::string_view entry,
                                    absl::Status* outcome) {
  // Applied before a restart: raft hands entries again from its last
  // snapshot, the database has them already.
  if (index <= applied_) return absl::OkStatus();
  // One of this replica's own writes (the oldest not applied, since they
  // commit in the order appended): its batch carries the out fields, and
  // its answer waits for this transaction.
  std::shared_ptr<Own> own;
  {
    absl::MutexLock lock(&mu_);
    if (!own_.empty() && own_.front()->entry == entry) {
      own = std::move(own_.front());
      own_.pop_front();
      own->applied = true;
      order_.push_back(own);
    }
  }
  absl::StatusOr<store::Changes> decoded;
  if (own == nullptr) decoded = store::DecodeChanges(entry);
  if (own == nullptr && !decoded.ok()) {
    // Of another release (a format or kind this one does not know): it
    // must not be skipped here while newer replicas apply it. Stop.
    if (!absl::IsDataLoss(decoded.status())) return decoded.status();
    // Damaged bytes, the same on every replica: refused alike everywhere.
    applied_ = index;
    *outcome = decoded.status();
    return absl::OkStatus();
  }
  // Queued on the local store, which commits what is queued together; its
  // answer comes on the store's thread, in order.
  auto changes = own != nullptr
                     ? std::shared_ptr<const store::ChangeBatch>(own->batch)
                     : std::make_shared<const store::ChangeBatch>(
                           store::ChangeBatch{*std::move(decoded)});
  local_->Write(
      [changes, index](store::Tx& tx) -> absl::Status {
        RETURN_IF_ERROR(store::WriteChanges(changes->changes, tx));
        return tx.SetAppliedIndex(index);
      },
      [this, own, index](absl::Status st) {
        if (!st.ok() && !OwnFailure(st)) {
          // A full disk, an I/O error: this replica stops (raft 0.15 would
          // leave it deaf); a restart applies the entry again.
          fprintf(stderr,
                  "xl-scheduler: cannot apply replicated log entry %llu here "
                  "(%s); stopping: fix this replica's database and start it "
                  "again\n",
                  static_cast<unsigned long long>(index),
                  st.ToString().c_str());
          std::abort();
        }
        if (own == nullptr) return;  // refused alike everywhere, or OK
        {
          absl::MutexLock lock(&mu_);
          own->local_done = true;
          own->local_status = std::move(st);
        }
        Deliver();
      });
  applied_ = index;
  *outcome = absl::OkStatus();  // the answer is Deliver()'s
  return absl::OkStatus();
}

}  // namespace xl::replica
