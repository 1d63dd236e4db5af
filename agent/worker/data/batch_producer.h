// BatchProducer: makes a rank's batches ahead of the training loop on
// persistent threads, so that a step costs only compute and all-reduce.
//
// Batches go into a ring of caller-owned slots (plain memory on CPU, pinned
// memory on CUDA). The batch of step s goes into slot s % slots; it is made
// once the consumer has released step s - slots. What a batch holds is a
// function of the step alone (the synthetic teacher data, or the shard
// reader's sequential records), so the samples and their order are those of
// making each batch in the loop, whatever the threads' timing.
//
// Synthetic data: `threads` threads each make a contiguous share of the
// rows of every batch. Shards: one thread (the reader is sequential and
// already reads ahead on its own thread).
//
// Thread-safe for one consumer thread calling Acquire/Release in step order.
#ifndef XL_AGENT_WORKER_DATA_BATCH_PRODUCER_H_
#define XL_AGENT_WORKER_DATA_BATCH_PRODUCER_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/worker/data/data.h"
#include "agent/worker/data/data_shards.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

struct BatchSlot {
  float* x = nullptr;         // [StepBatch() x input_dim]
  int32_t* labels = nullptr;  // [StepBatch()]
};

class BatchProducer {
 public:
  // Starts making the batches of steps [first_step, end_step) for `rank` of
  // `world` into `slots` (at least 1; 2 overlaps one step). threads >= 1.
  // Errors: opening the shards.
  static absl::StatusOr<std::unique_ptr<BatchProducer>> Start(
      const TrainConfig& config, int rank, int world, int64_t first_step,
      int64_t end_step, std::vector<BatchSlot> slots, int threads);

  // Stops the threads (a batch being made is finished first).
  ~BatchProducer();

  BatchProducer(const BatchProducer&) = delete;
  BatchProducer& operator=(const BatchProducer&) = delete;

  // Blocks until the batch of `step` is made; returns its slot, or the
  // error that making it met (a shard that cannot be read). The slot is the
  // consumer's until Release(step). `step` must be the one after the last
  // released (OUT_OF_RANGE otherwise, and past the end).
  absl::StatusOr<BatchSlot> Acquire(int64_t step);
  // The consumer is done with the batch of `step`: its slot may be reused.
  // Anything but the step acquired last is ignored.
  void Release(int64_t step);

  // Seconds Acquire blocked in total (the producer not keeping up).
  double waited_seconds() const;

 private:
  BatchProducer(const TrainConfig& config, int rank, int world,
                int64_t first_step, int64_t end_step,
                std::vector<BatchSlot> slots, int threads);
  void Run(int part);

  const TrainConfig config_;
  const int rank_;
  const int world_;
  const int64_t end_step_;
  const std::vector<BatchSlot> slots_;
  const int parts_;
  std::unique_ptr<SyntheticData> synthetic_;
  std::unique_ptr<ShardReader> reader_;  // used by part 0 only

  mutable absl::Mutex mu_;
  // Steps below released_ have had their slot given back; the producer may
  // make step s once s < released_ + slots.
  int64_t released_ ABSL_GUARDED_BY(mu_);
  // Per slot: the step it holds (or is being made for), parts finished.
  std::vector<int64_t> slot_step_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_parts_done_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> slot_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  double waited_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<std::thread> threads_;
};

// The ranks on this node: LOCAL_WORLD_SIZE, or 1 when unset or bad.
int LocalWorldSize();

// Threads for a producer of a rank: the cores this process may use, split
// over the ranks of the node (LOCAL_WORLD_SIZE), less the one that runs the
// training loop; at least 1, at most `cap`.
int ProducerThreads(int cap);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_DATA_BATCH_PRODUCER_H_
