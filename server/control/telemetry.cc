#include "server/control/telemetry.h"

#include "server/state/job_table.h"

namespace xl::control {
namespace {

// Seconds, from 100 us to 30 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

}  // namespace

SchedulerTelemetry::SchedulerTelemetry()
    : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  submit_latency_ = &prometheus::BuildHistogram()
                         .Name("xl_submit_latency_seconds")
                         .Help("Time from a SubmitJob call to its answer "
                               "(the job stored, or refused)")
                         .Register(r)
                         .Add({}, LatencyBuckets());
  auto& pass = prometheus::BuildHistogram()
                   .Name("xl_scheduling_pass_duration_seconds")
                   .Help("Time of one scheduling pass, computed off the "
                         "lock: kind full (every pending job) or new (only "
                         "jobs submitted since the last pass)")
                   .Register(r);
  pass_full_ = &pass.Add({{"kind", "full"}}, LatencyBuckets());
  pass_new_ = &pass.Add({{"kind", "new"}}, LatencyBuckets());
  commit_writes_ = &prometheus::BuildHistogram()
                        .Name("xl_store_commit_writes")
                        .Help("Writes grouped into one SQLite transaction")
                        .Register(r)
                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                     1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
                                     1024});
  commit_duration_ = &prometheus::BuildHistogram()
                          .Name("xl_store_commit_duration_seconds")
                          .Help("Time of a transaction's COMMIT, which "
                                "includes the write-ahead log's fsync")
                          .Register(r)
                          .Add({}, LatencyBuckets());
  auto& submits = prometheus::BuildCounter()
                      .Name("xl_jobs_submitted_total")
                      .Help("SubmitJob calls answered since the scheduler "
                            "started: accepted (stored) or rejected")
                      .Register(r);
  submitted_ = &submits.Add({{"result", "accepted"}});
  rejected_ = &submits.Add({{"result", "rejected"}});
  leader_ = &prometheus::BuildGauge()
                 .Name("xl_scheduler_leader")
                 .Help("1 while this scheduler leads (a single scheduler "
                       "always), 0 while it follows")
                 .Register(r)
                 .Add({});
  leader_->Set(1);
  term_ = &prometheus::BuildGauge()
               .Name("xl_raft_term")
               .Help("The newest Raft term this replica knows (0: not "
                     "replicated)")
               .Register(r)
               .Add({});
  commit_index_ = &prometheus::BuildGauge()
                       .Name("xl_raft_commit_index")
                       .Help("The newest log entry this replica knows "
                             "committed on a majority")
                       .Register(r)
                       .Add({});
  applied_index_ = &prometheus::BuildGauge()
                        .Name("xl_raft_applied_index")
                        .Help("The newest log entry applied to this "
                              "replica's database")
                        .Register(r)
                        .Add({});
  finished_ = &prometheus::BuildCounter()
                   .Name("xl_jobs_finished_total")
                   .Help("Jobs that reached a final state since the "
                         "scheduler started, by that state")
                   .Register(r);
  for (v1::JobState s : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    finished_->Add({{"state", v1::JobState_Name(s)}});
  }
}

void SchedulerTelemetry::ObserveSubmit(absl::Duration latency,
                                       bool accepted) {
  submit_latency_->Observe(absl::ToDoubleSeconds(latency));
  (accepted ? submitted_ : rejected_)->Increment();
}

void SchedulerTelemetry::ObservePass(bool full, absl::Duration took) {
  (full ? pass_full_ : pass_new_)->Observe(absl::ToDoubleSeconds(took));
}

void SchedulerTelemetry::ObserveCommit(size_t writes, absl::Duration commit) {
  commit_writes_->Observe(static_cast<double>(writes));
  commit_duration_->Observe(absl::ToDoubleSeconds(commit));
}

void SchedulerTelemetry::ObserveTransition(v1::JobState state) {
  if (!state::JobTable::IsTerminal(state)) return;
  finished_->Add({{"state", v1::JobState_Name(state)}}).Increment();
}

void SchedulerTelemetry::SetReplica(bool leader, uint64_t term,
                                    uint64_t commit_index,
                                    uint64_t applied_index) {
  leader_->Set(leader ? 1 : 0);
  term_->Set(static_cast<double>(term));
  commit_index_->Set(static_cast<double>(commit_index));
  applied_index_->Set(static_cast<double>(applied_index));
}

}  // namespace xl::control
