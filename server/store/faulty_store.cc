#include "server/store/faulty_store.h"

#include <utility>

namespace xl::store {

void FaultyStore::FailWrites(absl::Status error) {
  absl::MutexLock lock(&mu_);
  error_ = std::move(error);
  failing_ = -1;
}

void FaultyStore::FailNextWrites(int n, absl::Status error) {
  absl::MutexLock lock(&mu_);
  error_ = std::move(error);
  failing_ = n;
}

void FaultyStore::Heal() {
  absl::MutexLock lock(&mu_);
  failing_ = 0;
}

int64_t FaultyStore::failed_writes() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void FaultyStore::Pause() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
}

void FaultyStore::Resume() {
  std::vector<std::pair<WriteFn, DoneFn>> held;
  {
    absl::MutexLock lock(&mu_);
    paused_ = false;
    held.swap(held_);
  }
  for (auto& [fn, done] : held) Write(std::move(fn), std::move(done));
}

void FaultyStore::Write(WriteFn fn, DoneFn done) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (paused_) {
      held_.emplace_back(std::move(fn), std::move(done));
      return;
    }
    if (failing_ != 0) {
      error = error_;
      ++failed_;
      if (failing_ > 0) --failing_;
    }
  }
  if (!error.ok()) {
    inner_->Write([error](Tx&) { return error; }, std::move(done));
    return;
  }
  inner_->Write(std::move(fn), std::move(done));
}

void FaultyStore::Probe(DoneFn done) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (failing_ != 0) error = error_;
  }
  if (!error.ok()) {
    inner_->Write([error](Tx&) { return error; }, std::move(done));
    return;
  }
  inner_->Probe(std::move(done));
}

}  // namespace xl::store
