#include "agent/worker/comm/rendezvous.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/limits.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "xl/v1/rendezvous.grpc.pb.h"

namespace xl::worker {

absl::Status InMemoryRendezvous::Put(const std::string& key,
                                     const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> InMemoryRendezvous::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& k : keys) {
      if (values_.count(k) == 0) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (values_.count(k) == 0) missing.push_back(k);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous keys never set: ", absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(values_[k]);
  return out;
}

namespace {

// TLS verifying the scheduler with the CA file in XL_TLS_CA (the agent sets
// it when it talks TLS); plaintext without it.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  const char* ca = std::getenv("XL_TLS_CA");
  if (ca == nullptr || *ca == '\0') return grpc::InsecureChannelCredentials();
  std::ifstream in(ca);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

class SchedulerRendezvous : public Rendezvous {
 public:
  SchedulerRendezvous(const std::string& address, const std::string& job_id,
                      int attempt, const std::string& token)
      : address_(address),
        stub_(v1::RendezvousService::NewStub(
            grpc::CreateChannel(address, ChannelCredentials()))) {
    scope_.set_job_id(job_id);
    scope_.set_attempt(attempt);
    scope_.set_token(token);
  }

  absl::Status Put(const std::string& key, const std::string& value) override {
    v1::RendezvousPutRequest req;
    *req.mutable_scope() = scope_;
    req.set_key(key);
    req.set_value(value);
    v1::RendezvousPutResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.set_wait_for_ready(true);
    return Annotate(FromGrpcStatus(stub_->Put(&ctx, req, &resp)),
                    absl::StrCat("rendezvous put ", key, " at ", address_));
  }

  // Waits on the keys in pieces the scheduler takes (a world of more than
  // kMaxRendezvousKeysPerGet ranks asks for more), each with what is left
  // of `timeout`.
  absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (size_t begin = 0; begin < keys.size();
         begin += kMaxRendezvousKeysPerGet) {
      const size_t end =
          std::min(keys.size(), begin + kMaxRendezvousKeysPerGet);
      absl::Status st = GetPiece(keys, begin, end,
                                 std::max(absl::ZeroDuration(),
                                          deadline - absl::Now()),
                                 &values);
      if (!st.ok()) return st;
    }
    return values;
  }

 private:
  absl::Status GetPiece(const std::vector<std::string>& keys, size_t begin,
                        size_t end, absl::Duration timeout,
                        std::vector<std::string>* values) {
    v1::RendezvousGetRequest req;
    *req.mutable_scope() = scope_;
    for (size_t i = begin; i < end; ++i) req.add_keys(keys[i]);
    *req.mutable_timeout() = ToProtoDuration(timeout);
    v1::RendezvousGetResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoSeconds(timeout + absl::Seconds(10)));
    ctx.set_wait_for_ready(true);
    absl::Status st = FromGrpcStatus(stub_->Get(&ctx, req, &resp));
    if (!st.ok()) {
      return Annotate(st, absl::StrCat("rendezvous get at ", address_));
    }
    if (resp.values_size() != static_cast<int>(end - begin)) {
      return absl::InternalError(absl::StrCat(
          "rendezvous get at ", address_, " answered ", resp.values_size(),
          " values for ", end - begin, " keys; is the scheduler the same "
          "version as the agent?"));
    }
    values->insert(values->end(), resp.values().begin(), resp.values().end());
    return absl::OkStatus();
  }

  const std::string address_;
  v1::RendezvousScope scope_;
  std::unique_ptr<v1::RendezvousService::Stub> stub_;
};

}  // namespace

std::unique_ptr<Rendezvous> NewSchedulerRendezvous(const std::string& address,
                                                   const std::string& job_id,
                                                   int attempt,
                                                   const std::string& token) {
  return std::make_unique<SchedulerRendezvous>(address, job_id, attempt, token);
}

}  // namespace xl::worker
