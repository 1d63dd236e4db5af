// xl-train data shards: the binary format, a writer, and a prefetching
// reader. Format (little-endian), one file:
//   "XLS1" | u32 input_dim | u32 classes | u64 count
//   | count x ( f32 x[input_dim] | i32 label )
// The files matching train.data.shards (a glob, sorted by name) form one
// sample sequence 0..N-1. Step s of rank r of W reads global batch
// g = s*W + r, samples g*B .. g*B+B-1 modulo N (wrapping around), which is
// the synthetic source's numbering. ShardReader reads ahead on a background
// thread into a bounded queue; Next() is called from one consumer thread.
#ifndef XL_AGENT_WORKER_DATA_DATA_SHARDS_H_
#define XL_AGENT_WORKER_DATA_DATA_SHARDS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

inline constexpr size_t kShardHeaderBytes = 20;

// Writes one shard atomically (temp file, fsync, rename). Errors name path.
absl::Status WriteShard(const std::string& path, int input_dim, int classes,
                        const float* x, const int32_t* labels, uint64_t count);

// Writes samples 0..count-1 of the synthetic teacher source of `config` as
// <dir>/shard-00000.xls, ... with at most per_file samples each; returns the
// paths. Training on them equals training on synthetic data while
// steps * world * batch <= count.
absl::StatusOr<std::vector<std::string>> WriteSyntheticShards(
    const std::string& dir, const TrainConfig& config, uint64_t count,
    uint64_t per_file);

class ShardReader {
 public:
  // Opens the shards of `glob` and starts reading ahead from step
  // `first_step` (0-based), keeping up to `depth` batches queued.
  // NOT_FOUND when nothing matches; INVALID_ARGUMENT naming the file for a
  // bad header or an input_dim/classes other than the config's.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      const std::string& glob, const TrainConfig& config, int rank, int world,
      int64_t first_step, int depth = 4);
  ~ShardReader();

  // Copies the next step's batch into x [batch x input_dim] and labels;
  // blocks until it is read. A read error (or a label out of range) is
  // returned here, naming the file.
  absl::Status Next(float* x, int32_t* labels);

  uint64_t total_samples() const { return total_; }

 private:
  struct File {
    std::string path;
    int fd = -1;
    uint64_t first = 0;  // global index of its first sample
    uint64_t count = 0;
  };
  struct Batch {
    std::vector<float> x;
    std::vector<int32_t> labels;
  };

  ShardReader(const TrainConfig& config, int rank, int world, int64_t step,
              int depth);
  void Run();
  absl::Status ReadBatch(int64_t step, Batch* out);

  const TrainConfig config_;
  const int rank_;
  const int world_;
  const int depth_;
  std::vector<File> files_;
  uint64_t total_ = 0;
  int64_t next_read_step_;  // reader thread only

  absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_DATA_DATA_SHARDS_H_
