// GlooCollective: Gloo TCP + our Rendezvous as its Store. Gloo reports
// errors by exceptions; every call here catches them and returns UNAVAILABLE
// with the rank and host. One caller thread per instance.
#include "agent/worker/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace xl::worker {
namespace {

// gloo::rendezvous::Store over Rendezvous. Store has no error returns, so
// failures are thrown and turned back into a Status by Create().
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(Rendezvous* rdv, std::string prefix, absl::Duration timeout)
      : rdv_(rdv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status st =
        rdv_->Put(prefix_ + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  }

  std::vector<char> get(const std::string& key) override {
    auto v = rdv_->Get({prefix_ + key}, timeout_);
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    return std::vector<char>((*v)[0].begin(), (*v)[0].end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    auto v = rdv_->Get(full, absl::Milliseconds(timeout.count()));
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  }

 private:
  Rendezvous* rdv_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

std::string DefaultHost() {
  for (const char* var : {"XL_NODE_ADDRESS", "MASTER_ADDR"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  return "127.0.0.1";
}

}  // namespace

GlooCollective::GlooCollective(int rank, int size, std::string host,
                               absl::Duration timeout)
    : rank_(rank), size_(size), host_(std::move(host)), timeout_(timeout) {}

GlooCollective::~GlooCollective() = default;

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(
    int rank, int size, Rendezvous* rendezvous, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " of world ", size));
  }
  std::string host =
      options.hostname.empty() ? DefaultHost() : options.hostname;
  std::unique_ptr<GlooCollective> c(
      new GlooCollective(rank, size, host, options.timeout));
  if (size == 1) return c;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(
        std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    RendezvousStore store(rendezvous, options.key_prefix, options.timeout);
    ctx->connectFullMesh(store, device);
    c->context_ = std::move(ctx);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: rank ", rank, " at ", host, " could not connect to its ",
        size - 1, " peers: ", e.what()));
  }
  return c;
}

absl::Status GlooCollective::AllReduceMean(float* data, size_t count) {
  if (size_ == 1 || count == 0) return absl::OkStatus();
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
    opts.setTag(NextTag());
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo all-reduce on rank ",
                                               rank_, " (", host_, ") of ",
                                               size_, ": ", e.what()));
  }
  const float scale = 1.0f / static_cast<float>(size_);
  for (size_t i = 0; i < count; ++i) data[i] *= scale;
  return absl::OkStatus();
}

absl::Status GlooCollective::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  }
  if (size_ == 1 || count == 0) return absl::OkStatus();
  try {
    gloo::BroadcastOptions opts(context_);
    opts.setRoot(root);
    opts.setOutput(data, count);
    opts.setTag(NextTag());
    gloo::broadcast(opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo broadcast on rank ", rank_,
                                               " (", host_, ") from rank ",
                                               root, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooCollective::Barrier() {
  if (size_ == 1) return absl::OkStatus();
  try {
    gloo::BarrierOptions opts(context_);
    opts.setTag(NextTag());
    gloo::barrier(opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo barrier on rank ", rank_,
                                               " (", host_, "): ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace xl::worker
