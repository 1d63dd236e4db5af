#include "server/replica/replicated_store.h"

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
  own_.push_back(Own{*entry, std::move(batch)});
  auto it = std::prev(own_.end());
  log_->Append(*std::move(entry),
               [this, it, done = std::move(done)](absl::Status st) {
                 {
                   absl::MutexLock lock(&mu_);
                   own_.erase(it);
                 }
                 done(std::move(st));
                 absl::MutexLock lock(&mu_);
                 --unanswered_;
               });
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
  // Applies are synchronous on this thread: every one so far is committed,
  // and the image holds the index of the last in replica_applied too.
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
  RETURN_IF_ERROR(local_->ReplaceWith(state.substr(16)));
  applied_ = index;
  return absl::OkStatus();
}

absl::Status ReplicatedStore::Apply(uint64_t index, absl::string_view entry,
                                    absl::Status* outcome) {
  // Applied before a restart: raft hands entries again from its last
  // snapshot, the database has them already.
  if (index <= applied_) return absl::OkStatus();
  // One of this replica's own writes (the oldest not answered, since they
  // commit in the order appended): its batch carries the out fields.
  std::shared_ptr<const store::ChangeBatch> own;
  {
    absl::MutexLock lock(&mu_);
    if (!own_.empty() && own_.front().entry == entry) {
      own = own_.front().batch;
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
  const store::Changes& changes = own != nullptr ? own->changes : *decoded;
  absl::Status st = local_->WriteSync([&](store::Tx& tx) -> absl::Status {
    RETURN_IF_ERROR(store::WriteChanges(changes, tx));
    return tx.SetAppliedIndex(index);
  });
  if (!st.ok() && !OwnFailure(st)) {
    return st;  // this replica stops; a restart applies it again
  }
  applied_ = index;
  *outcome = st;  // OK, or refused on its own (nothing of it written)
  return absl::OkStatus();
}

}  // namespace xl::replica
