// A RankEventSink for tests of the supervisor: records every event and
// waits for one with a deadline. Thread-safe.
#ifndef XL_TESTS_AGENT_RECORDING_SINK_H_
#define XL_TESTS_AGENT_RECORDING_SINK_H_

#include <signal.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/supervisor/supervisor.h"
#include "gtest/gtest.h"

namespace xl::agent {

constexpr absl::Duration kWait = absl::Seconds(4);

// Records every event, in order.
class RecordingSink : public RankEventSink {
 public:
  struct Event {
    bool is_status;
    v1::RankStatus status;
    v1::LogChunk chunk;
    absl::Time time = absl::Now();
    // Statuses: whether the rank's process group existed when it came.
    bool group_existed = false;
  };

  void OnRankStatus(const v1::RankStatus& status) override {
    const bool group_existed =
        status.pid() > 0 && (kill(-status.pid(), 0) == 0 || errno == EPERM);
    absl::MutexLock lock(&mu_);
    events_.push_back({true, status, {}, absl::Now(), group_existed});
  }
  void OnLogChunk(v1::LogChunk chunk) override {
    absl::MutexLock lock(&mu_);
    events_.push_back({false, {}, std::move(chunk)});
  }
  void OnMetrics(v1::TrainMetrics metrics) override {
    absl::MutexLock lock(&mu_);
    metrics_.push_back(std::move(metrics));
  }
  std::vector<v1::TrainMetrics> metrics() {
    absl::MutexLock lock(&mu_);
    return metrics_;
  }

  // Waits until `pred(events)` holds; false at the deadline.
  template <typename Pred>
  bool WaitFor(Pred pred, absl::Duration timeout = kWait) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pred(events_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }

  // Waits for the final status (EXITED or FAILED_TO_START) of a rank.
  v1::RankStatus WaitEnd(const std::string& job, int attempt, int rank) {
    v1::RankStatus found;
    bool ok = WaitFor([&](const std::vector<Event>& events) {
      for (const Event& e : events) {
        if (e.is_status && e.status.job_id() == job &&
            e.status.attempt() == attempt && e.status.rank() == rank &&
            e.status.state() != v1::RANK_RUNNING) {
          found = e.status;
          return true;
        }
      }
      return false;
    });
    EXPECT_TRUE(ok) << "rank " << job << "/" << attempt << "/" << rank
                    << " did not end";
    return found;
  }

  // The pid of a running rank, once it is running; 0 when it is not by the
  // deadline.
  int WaitRunning(const std::string& job, int attempt, int rank,
                  absl::Duration timeout = kWait) {
    int pid = 0;
    WaitFor(
        [&](const std::vector<Event>& events) {
          for (const Event& e : events) {
            if (e.is_status && e.status.job_id() == job &&
                e.status.attempt() == attempt && e.status.rank() == rank &&
                e.status.state() == v1::RANK_RUNNING) {
              pid = e.status.pid();
              return true;
            }
          }
          return false;
        },
        timeout);
    return pid;
  }

  // Concatenated output of one stream of a rank.
  std::string Output(const std::string& job, int rank, v1::LogStream stream) {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const Event& e : events_) {
      if (!e.is_status && e.chunk.job_id() == job && e.chunk.rank() == rank &&
          e.chunk.stream() == stream) {
        out += e.chunk.data();
      }
    }
    return out;
  }

  bool WaitOutput(const std::string& job, int rank, const std::string& text) {
    return WaitFor([&](const std::vector<Event>& events) {
      std::string out;
      for (const Event& e : events) {
        if (!e.is_status && e.chunk.job_id() == job && e.chunk.rank() == rank) {
          out += e.chunk.data();
        }
      }
      return out.find(text) != std::string::npos;
    });
  }

  std::vector<Event> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TrainMetrics> metrics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::agent

#endif  // XL_TESTS_AGENT_RECORDING_SINK_H_
