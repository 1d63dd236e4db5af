// BatchProducer; see batch_producer.h. One mutex guards the ring's
// bookkeeping; the rows themselves are written outside it, each part into
// its own rows of a slot the consumer does not hold.
#include "agent/worker/data/batch_producer.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace xl::worker {

absl::StatusOr<std::unique_ptr<BatchProducer>> BatchProducer::Start(
    const TrainConfig& config, int rank, int world, int64_t first_step,
    int64_t end_step, std::vector<BatchSlot> slots, int threads) {
  if (slots.empty() || threads < 1) {
    return absl::InvalidArgumentError(
        "BatchProducer needs at least one slot and one thread");
  }
  std::unique_ptr<BatchProducer> p(new BatchProducer(
      config, rank, world, first_step, end_step, std::move(slots),
      config.shards.empty() ? std::min(threads, config.StepBatch()) : 1));
  if (config.shards.empty()) {
    p->synthetic_ = std::make_unique<SyntheticData>(config);
  } else {
    auto r = ShardReader::Open(config.shards, config, rank, world, first_step);
    if (!r.ok()) return r.status();
    p->reader_ = *std::move(r);
  }
  for (int part = 0; part < p->parts_; ++part) {
    p->threads_.emplace_back([raw = p.get(), part] { raw->Run(part); });
  }
  return p;
}

BatchProducer::BatchProducer(const TrainConfig& config, int rank, int world,
                             int64_t first_step, int64_t end_step,
                             std::vector<BatchSlot> slots, int threads)
    : config_(config),
      rank_(rank),
      world_(world),
      end_step_(end_step),
      slots_(std::move(slots)),
      parts_(threads),
      released_(first_step),
      slot_step_(slots_.size()),
      slot_parts_done_(slots_.size(), 0),
      slot_status_(slots_.size()) {
  const int64_t n = static_cast<int64_t>(slots_.size());
  // Slot s % n holds step s; the first n steps are free to make.
  for (int64_t s = first_step; s < first_step + n; ++s) {
    slot_step_[s % n] = s;
  }
}

BatchProducer::~BatchProducer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void BatchProducer::Run(int part) {
  const int64_t n = static_cast<int64_t>(slots_.size());
  const int b = config_.StepBatch();
  const int row_begin = static_cast<int>(static_cast<int64_t>(b) * part / parts_);
  const int row_end =
      static_cast<int>(static_cast<int64_t>(b) * (part + 1) / parts_);
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    step = released_;
  }
  for (; step < end_step_; ++step) {
    const int64_t slot = step % n;
    {
      absl::MutexLock lock(&mu_);
      auto free = [this, step, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || step < released_ + n;
      };
      mu_.Await(absl::Condition(&free));
      if (stop_) return;
    }
    const BatchSlot& out = slots_[slot];
    absl::Status st;
    if (reader_ != nullptr) {
      st = reader_->Next(out.x, out.labels);
    } else {
      synthetic_->Samples(
          synthetic_->FirstSample(step, rank_, world_) + row_begin,
          row_end - row_begin,
          out.x + static_cast<size_t>(row_begin) * config_.input_dim,
          out.labels + row_begin);
    }
    absl::MutexLock lock(&mu_);
    if (!st.ok()) slot_status_[slot] = st;
    ++slot_parts_done_[slot];
    if (!st.ok()) return;  // the reader cannot go on; Acquire says why
  }
}

absl::StatusOr<BatchSlot> BatchProducer::Acquire(int64_t step) {
  const int64_t slot = step % static_cast<int64_t>(slots_.size());
  const auto t0 = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  // Only the next step is ever made: any other would wait forever.
  if (step != released_ || step >= end_step_) {
    return absl::OutOfRangeError(absl::StrCat(
        "BatchProducer: Acquire(", step, ") but the next batch is step ",
        released_, " (steps end at ", end_step_, ")"));
  }
  auto ready = [this, step, slot]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slot_step_[slot] == step &&
           (slot_parts_done_[slot] == parts_ || !slot_status_[slot].ok());
  };
  mu_.Await(absl::Condition(&ready));
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           t0)
                 .count();
  if (!slot_status_[slot].ok()) return slot_status_[slot];
  return slots_[slot];
}

void BatchProducer::Release(int64_t step) {
  const int64_t n = static_cast<int64_t>(slots_.size());
  absl::MutexLock lock(&mu_);
  // A duplicate or out-of-order release would hand a slot back twice (and
  // lose the batch made into it): ignored.
  if (step != released_) return;
  const int64_t slot = step % n;
  slot_step_[slot] = step + n;
  slot_parts_done_[slot] = 0;
  slot_status_[slot] = absl::OkStatus();
  released_ = step + 1;
}

double BatchProducer::waited_seconds() const {
  absl::MutexLock lock(&mu_);
  return waited_;
}

int LocalWorldSize() {
  int local = 1;
  if (const char* s = std::getenv("LOCAL_WORLD_SIZE");
      s == nullptr || !absl::SimpleAtoi(s, &local) || local < 1) {
    local = 1;
  }
  return local;
}

int ProducerThreads(int cap) {
  cpu_set_t set;
  int cores = 1;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  return std::max(1, std::min(cap, cores / LocalWorldSize() - 1));
}

}  // namespace xl::worker
