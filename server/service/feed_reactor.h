// FeedReactor: a server-streaming reactor that sends a job's items (events
// or log chunks, anything with seq()) as they are committed, and, when
// following, waits for the controller's wake-up instead of polling. One write
// in flight; no lock is held across StartWrite or Finish.
#ifndef XL_SERVER_SERVICE_FEED_REACTOR_H_
#define XL_SERVER_SERVICE_FEED_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "server/control/controller.h"

namespace xl::service {

using control::Controller;

template <typename T>
class FeedReactor : public grpc::ServerWriteReactor<T> {
 public:
  // Reads items with seq > after; sets `finished` when no more will come.
  using Fetch = std::function<absl::Status(int64_t after, std::vector<T>* out,
                                           bool* finished)>;

  // Starts streaming at once; deletes itself when the RPC is done, after
  // calling `on_done` (when set).
  static grpc::ServerWriteReactor<T>* Start(
      Controller* controller, std::string job_id, int64_t after, bool follow,
      Fetch fetch, std::function<void()> on_done = nullptr) {
    auto* r = new FeedReactor(controller, std::move(job_id), after, follow,
                              std::move(fetch));
    r->on_done_ = std::move(on_done);
    auto feed = r->feed_;
    r->listener_ = controller->AddListener(r->job_id_, [feed] {
      absl::MutexLock lock(&feed->mu);
      if (feed->reactor != nullptr) feed->reactor->Pump();
    });
    r->Pump();
    return r;
  }

 private:
  struct Feed {
    absl::Mutex mu;
    FeedReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  FeedReactor(Controller* controller, std::string job_id, int64_t after,
              bool follow, Fetch fetch)
      : controller_(controller),
        job_id_(std::move(job_id)),
        after_(after),
        follow_(follow),
        fetch_(std::move(fetch)),
        feed_(std::make_shared<Feed>()) {
    absl::MutexLock lock(&feed_->mu);
    feed_->reactor = this;
  }

  void Pump() {
    const T* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (cancelled_) {
        finished_ = true;
        finish = true;
        status = grpc::Status::CANCELLED;
      } else {
        if (buffer_.empty()) {
          std::vector<T> got;
          bool done = false;
          absl::Status st = fetch_(after_, &got, &done);
          if (!st.ok()) {
            finish = true;
            status = ToGrpcStatus(st);
          } else {
            for (auto& item : got) buffer_.push_back(std::move(item));
            if (buffer_.empty() && (done || !follow_)) finish = true;
          }
        }
        if (!finish && !buffer_.empty()) {
          current_ = std::move(buffer_.front());
          buffer_.pop_front();
          after_ = current_.seq();
          writing_ = true;
          next = &current_;
        }
        if (finish) finished_ = true;
      }
    }
    if (next != nullptr) {
      this->StartWrite(next);
    } else if (finish) {
      this->Finish(status);
    }
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    Pump();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&feed_->mu);
      feed_->reactor = nullptr;
    }
    controller_->RemoveListener(job_id_, listener_);
    if (on_done_) on_done_();
    delete this;
  }

  Controller* const controller_;
  const std::string job_id_;
  const bool follow_;
  const Fetch fetch_;
  std::shared_ptr<Feed> feed_;
  int64_t listener_ = 0;
  std::function<void()> on_done_;

  absl::Mutex mu_;
  int64_t after_ ABSL_GUARDED_BY(mu_);
  std::deque<T> buffer_ ABSL_GUARDED_BY(mu_);
  T current_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_FEED_REACTOR_H_
