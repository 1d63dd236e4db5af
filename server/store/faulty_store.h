// FaultyStore: a Store in front of another that fails writes on demand, for
// tests of the fences that keep the scheduler from acting on state it could
// not record (a full disk, a failing device). A failed write goes through
// the inner store as a write that returns the error, so `done` callbacks keep
// their queue order. Thread-safe.
#ifndef XL_SERVER_STORE_FAULTY_STORE_H_
#define XL_SERVER_STORE_FAULTY_STORE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/store.h"

namespace xl::store {

class FaultyStore : public Store {
 public:
  // `inner` must outlive this store.
  explicit FaultyStore(Store* inner) : inner_(inner) {}

  // Every write from now on fails with `error` until Heal().
  void FailWrites(absl::Status error);
  // The next `n` writes fail with `error`; later ones work.
  void FailNextWrites(int n, absl::Status error);
  void Heal();
  // Writes from now on wait (in order) until Resume(): for tests of what
  // happens while a write is in flight.
  void Pause();
  void Resume();
  // Writes failed on purpose so far.
  int64_t failed_writes() const;

  absl::StatusOr<StoredState> Load() override { return inner_->Load(); }
  void Write(WriteFn fn, DoneFn done) override;
  // Fails like a write while failing; else the inner store's probe.
  void Probe(DoneFn done) override;
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(int64_t job_id,
                                                     int64_t after_seq,
                                                     int rank,
                                                     int limit) override {
    return inner_->ReadLogs(job_id, after_seq, rank, limit);
  }
  absl::StatusOr<std::vector<std::pair<int64_t, v1::TrainMetrics>>>
  ReadMetrics(int64_t job_id, int64_t after_seq, int limit) override {
    return inner_->ReadMetrics(job_id, after_seq, limit);
  }
  int64_t commits() const override { return inner_->commits(); }

 private:
  Store* const inner_;
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Writes left to fail; -1: all until Heal().
  int64_t failing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<WriteFn, DoneFn>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::store

#endif  // XL_SERVER_STORE_FAULTY_STORE_H_
