// Checkpoints of xl-train: `<dir>/ckpt-<step>.xlc`, written atomically by
// rank 0 (temp file, write, fsync, rename, fsync of the directory), the
// newest valid one found at resume. Format, little-endian:
//   "XLC1" | u32 version (2) | u64 step | u64 fingerprint | u64 count
//   | u64 adam_t | f32 loss_scale | u32 batch_per_rank | u64 good_steps
//   | f32 params[count] | f32 m[count] | f32 v[count]
//   | u64 FNV-1a-64 of every byte before it.
// Version 1 (no loss_scale / good_steps) is still read. batch_per_rank
// (the micro-batch the run used) is 0 in files written before it was kept.
// Free functions; safe from any thread for distinct directories.
#ifndef XL_AGENT_WORKER_LOOP_CHECKPOINT_H_
#define XL_AGENT_WORKER_LOOP_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

inline constexpr uint32_t kCheckpointVersion = 2;

struct TrainState {
  int64_t step = 0;  // optimizer steps completed
  int64_t adam_t = 0;
  // FP16 dynamic loss scaling: the scale and the overflow-free steps since
  // it last changed. 0: none (FP32/BF16, or a version 1 checkpoint).
  float loss_scale = 0;
  int64_t good_steps = 0;
  // The batch per rank the run trained with (batch_per_rank: auto keeps it
  // on resume, so the sample numbering goes on where it stopped); 0:
  // unknown.
  int32_t batch_per_rank = 0;
  std::vector<float> params;
  std::vector<float> m;
  std::vector<float> v;
};

// FNV-1a 64 of the model's shape (the widths); two configs whose
// checkpoints are interchangeable have the same fingerprint.
uint64_t ConfigFingerprint(const TrainConfig& config);
uint64_t Fnv1a64(const void* data, size_t size,
                 uint64_t h = 0xcbf29ce484222325ull);

// "<dir>/ckpt-<step>.xlc".
std::string CheckpointPath(const std::string& dir, int64_t step);

// Writes the state atomically and then deletes all but the newest `keep`
// checkpoints. Errors carry the errno (RESOURCE_EXHAUSTED for ENOSPC,
// PERMISSION_DENIED, INTERNAL otherwise) and name the path; on error no
// partial ckpt-<step>.xlc is left behind.
absl::Status WriteCheckpoint(const std::string& dir, const TrainState& state,
                             uint64_t fingerprint, int keep = 3);

// Writes periodic checkpoints on a thread of its own, so that the training
// loop pays only for the copy of its state (from the GPU, on GPU), not for
// the disk, as long as the disk keeps up. One write at a time: Submit()
// waits for the last one first. A final checkpoint (SIGTERM) is written by
// the caller after Wait(). The destructor waits.
class CheckpointWriter {
 public:
  using WriteFn = std::function<absl::Status(const TrainState&)>;
  explicit CheckpointWriter(WriteFn write) : write_(std::move(write)) {}
  ~CheckpointWriter() { (void)Wait(); }
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the write in flight, if any, then starts writing `state` and
  // returns.
  void Submit(TrainState state);
  // True while a write runs.
  bool busy() const;
  // Waits for the write in flight; its status (OK when there was none).
  absl::Status Wait();

 private:
  WriteFn write_;
  std::future<absl::Status> pending_;
};

// WriteCheckpoint into `dir` for a CheckpointWriter: a periodic checkpoint
// that fails costs progress, not the run, so its failure is a warning on
// stderr.
CheckpointWriter::WriteFn PeriodicCheckpoints(std::string dir,
                                              uint64_t fingerprint, int keep);

// Reads and verifies one checkpoint; DATA_LOSS for a bad magic, size or
// checksum, FAILED_PRECONDITION for another version or shape.
absl::StatusOr<TrainState> ReadCheckpoint(const std::string& path,
                                          uint64_t fingerprint, int64_t count);

struct LoadedCheckpoint {
  std::optional<TrainState> state;   // empty: start fresh
  std::string path;                  // the file used
  std::vector<std::string> skipped;  // "path: why" per skipped file
};

// The newest valid checkpoint in `dir` (none when the directory is missing
// or empty). Skipped files are listed and each named on stderr with the
// reason. Errors only for an unreadable directory.
absl::StatusOr<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir,
                                                      uint64_t fingerprint,
                                                      int64_t count);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_CHECKPOINT_H_
