// TensorBoard event files from xl-train, so that `tensorboard --logdir`
// shows a run's curves where people have TensorBoard.
//
// The format (TensorFlow's record_writer and event.proto): a file named
// events.out.tfevents.<seconds>.<host>.<pid> holding records of
//   uint64 length | uint32 masked CRC-32C of the length | data |
//   uint32 masked CRC-32C of the data
// (little-endian; masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), where
// each data is a serialized tensorflow.Event: the first one says
// file_version "brain.Event:2", the others carry a Summary of simple_value
// scalars at a step. The few protobuf fields are written by hand: no
// TensorFlow headers are needed.
#ifndef XL_AGENT_WORKER_LOOP_TENSORBOARD_H_
#define XL_AGENT_WORKER_LOOP_TENSORBOARD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/worker/loop/metrics.h"

namespace xl::worker {

// CRC-32C (Castagnoli), as TFRecord uses it.
uint32_t Crc32c(absl::string_view data);
uint32_t MaskedCrc32c(absl::string_view data);
// One TFRecord around `data`.
std::string TfRecord(absl::string_view data);
// A serialized tensorflow.Event with the scalars at `step`.
std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& values);

class TensorBoardWriter {
 public:
  // Makes `dir` (and its parents) and a new event file in it.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(
      const std::string& dir);
  ~TensorBoardWriter();

  // Appends one event and flushes it (TensorBoard reads files as they grow).
  absl::Status Add(double wall_time, int64_t step,
                   const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  absl::Status Write(const std::string& record);

  const std::string path_;
  std::FILE* file_;
};

// Passes each report on to `next` and writes its scalars to TensorBoard:
// train/loss, train/samples_per_second, train/learning_rate,
// time/{step,compute,allreduce,data_wait}_seconds, allreduce/bus_gbps and
// memory/peak_bytes. A failed write is said once on stderr and ends the
// event file, never the run.
class TensorBoardSink : public MetricsSink {
 public:
  TensorBoardSink(std::unique_ptr<TensorBoardWriter> writer,
                  double learning_rate, MetricsSink* next)
      : writer_(std::move(writer)), learning_rate_(learning_rate),
        next_(next) {}
  void Report(const v1::TrainMetrics& metrics) override;

 private:
  std::unique_ptr<TensorBoardWriter> writer_;
  const double learning_rate_;
  MetricsSink* const next_;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_TENSORBOARD_H_
