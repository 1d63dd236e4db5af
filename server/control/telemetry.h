// SchedulerTelemetry: what the scheduler counts and times as it works, for
// Prometheus (/metrics): submit latency, scheduling passes, the store's
// commits, jobs submitted and ended. The model's state (jobs by state,
// GPUs, heartbeats, training progress) is read at scrape time instead
// (Controller::CollectMetrics). Names follow Prometheus' conventions: xl_
// prefix, base units, _total counters. Thread-safe (prometheus-cpp's
// metrics are atomic).
#ifndef XL_SERVER_CONTROL_TELEMETRY_H_
#define XL_SERVER_CONTROL_TELEMETRY_H_

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/time/time.h"
#include "xl/v1/job.pb.h"

namespace xl::control {

class SchedulerTelemetry {
 public:
  SchedulerTelemetry();

  // The registry holding these metrics (its Collect() feeds /metrics).
  prometheus::Registry& registry() { return *registry_; }

  void ObserveSubmit(absl::Duration latency, bool accepted);
  // A scheduling pass over every pending job ("full") or only new ones.
  void ObservePass(bool full, absl::Duration took);
  // One store transaction: how many writes it grouped, how long its COMMIT
  // (the WAL's fsync) took.
  void ObserveCommit(size_t writes, absl::Duration commit);
  // A job moved to `state` (only terminal states are counted).
  void ObserveTransition(v1::JobState state);
  // A replicated scheduler: this replica's role, its Raft term and its
  // log's commit and apply indexes (a single scheduler: leader, term 0).
  void SetReplica(bool leader, uint64_t term, uint64_t commit_index,
                  uint64_t applied_index);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* submit_latency_;
  prometheus::Histogram* pass_full_;
  prometheus::Histogram* pass_new_;
  prometheus::Histogram* commit_writes_;
  prometheus::Histogram* commit_duration_;
  prometheus::Counter* submitted_;
  prometheus::Counter* rejected_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Gauge* leader_;
  prometheus::Gauge* term_;
  prometheus::Gauge* commit_index_;
  prometheus::Gauge* applied_index_;
};

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_TELEMETRY_H_
