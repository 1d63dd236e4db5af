// The rendezvous store's bounds (security review F3): keys per Get, Gets
// waiting per attempt, how long a Get may wait, and a Put waking only the
// waiters of its key.
#include "server/control/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include <grpcpp/grpcpp.h>

#include "agent/worker/comm/rendezvous.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "xl/v1/rendezvous.grpc.pb.h"

namespace xl::control {
namespace {

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override { rdzv_.Open("7", 1, "secret", /*world_size=*/2); }

  v1::RendezvousGetRequest Get(std::vector<std::string> keys,
                               absl::Duration timeout = absl::Seconds(60)) {
    v1::RendezvousGetRequest req;
    req.mutable_scope()->set_job_id("7");
    req.mutable_scope()->set_attempt(1);
    req.mutable_scope()->set_token("secret");
    for (auto& k : keys) req.add_keys(k);
    req.mutable_timeout()->set_seconds(absl::ToInt64Seconds(timeout));
    return req;
  }
  absl::Status Put(const std::string& key, const std::string& value) {
    v1::RendezvousPutRequest req;
    req.mutable_scope()->set_job_id("7");
    req.mutable_scope()->set_attempt(1);
    req.mutable_scope()->set_token("secret");
    req.set_key(key);
    req.set_value(value);
    return rdzv_.Put(req);
  }
  // Starts a Get; its result lands in the returned slot.
  std::shared_ptr<std::optional<absl::StatusOr<std::vector<std::string>>>>
  Start(const v1::RendezvousGetRequest& req) {
    auto slot = std::make_shared<
        std::optional<absl::StatusOr<std::vector<std::string>>>>();
    rdzv_.Get(req, [slot](absl::StatusOr<std::vector<std::string>> r) {
      *slot = std::move(r);
    });
    return slot;
  }

  FakeClock clock_;
  Rendezvous rdzv_{&clock_};
};

TEST_F(RendezvousTest, AGetWaitsForEachOfItsKeysAndOnlyThem) {
  auto both = Start(Get({"a", "b"}));
  auto other = Start(Get({"c"}));
  ASSERT_TRUE(Put("a", "1").ok());
  EXPECT_FALSE(both->has_value());
  ASSERT_TRUE(Put("a", "again").ok());  // a key set twice counts once
  EXPECT_FALSE(both->has_value());
  ASSERT_TRUE(Put("b", "2").ok());
  ASSERT_TRUE(both->has_value());
  ASSERT_TRUE((*both)->ok());
  EXPECT_EQ(***both, (std::vector<std::string>{"again", "2"}));
  EXPECT_FALSE(other->has_value());
  // Set already: answered at once.
  auto now = Start(Get({"b", "a"}));
  ASSERT_TRUE(now->has_value());
  EXPECT_EQ(***now, (std::vector<std::string>{"2", "again"}));
}

TEST_F(RendezvousTest, KeysPerGetAreBounded) {
  std::vector<std::string> keys;
  for (int i = 0; i <= Rendezvous::kMaxKeysPerGet; ++i) {
    keys.push_back("k" + std::to_string(i));
  }
  auto r = Start(Get(keys));
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RendezvousTest, WaitersPerAttemptAreBounded) {
  // World size 2: at least 16 may wait.
  std::vector<std::shared_ptr<
      std::optional<absl::StatusOr<std::vector<std::string>>>>>
      waiting;
  for (int i = 0; i < Rendezvous::kMinWaiters; ++i) {
    waiting.push_back(Start(Get({"never"})));
    EXPECT_FALSE(waiting.back()->has_value());
  }
  auto refused = Start(Get({"never"}));
  ASSERT_TRUE(refused->has_value());
  EXPECT_EQ((*refused)->status().code(), absl::StatusCode::kResourceExhausted)
      << (*refused)->status();
  // Another job's attempt has room of its own.
  rdzv_.Open("8", 1, "other", 2);
  v1::RendezvousGetRequest theirs = Get({"x"});
  theirs.mutable_scope()->set_job_id("8");
  theirs.mutable_scope()->set_token("other");
  EXPECT_FALSE(Start(theirs)->has_value());
  // Once one ends, another may wait.
  ASSERT_TRUE(Put("never", "now").ok());
  EXPECT_FALSE(Start(Get({"later"}))->has_value());
}

TEST_F(RendezvousTest, NoGetWaitsLongerThanThirtyMinutes) {
  auto day = Start(Get({"k"}, absl::Hours(24)));
  clock_.Advance(Rendezvous::kMaxWait - absl::Seconds(1));
  rdzv_.Expire();
  EXPECT_FALSE(day->has_value());
  clock_.Advance(absl::Seconds(2));
  rdzv_.Expire();
  ASSERT_TRUE(day->has_value());
  EXPECT_EQ((*day)->status().code(), absl::StatusCode::kDeadlineExceeded);
  // An expired waiter frees its place, and its key's waiters are right.
  auto next = Start(Get({"k"}));
  ASSERT_TRUE(Put("k", "v").ok());
  ASSERT_TRUE(next->has_value());
  EXPECT_TRUE((*next)->ok());
}

// What held places for nothing (review of F3): a Get with no time left
// waited 30 minutes, one past its caller's deadline waited on, and one
// whose keys were all set was refused when the places were full.
TEST_F(RendezvousTest, OnlyAGetThatWaitsTakesAPlaceAndNoLongerThanItsCaller) {
  ASSERT_TRUE(Put("set", "v").ok());
  std::vector<std::shared_ptr<
      std::optional<absl::StatusOr<std::vector<std::string>>>>>
      waiting;
  for (int i = 0; i < Rendezvous::kMinWaiters; ++i) {
    waiting.push_back(Start(Get({"never"})));
  }
  // Full, yet a Get of keys already set is answered.
  auto answered = Start(Get({"set"}));
  ASSERT_TRUE(answered->has_value());
  ASSERT_TRUE((*answered)->ok()) << (*answered)->status();
  EXPECT_EQ(***answered, std::vector<std::string>{"v"});
  // Free one place; a Get with no time left does not take it.
  ASSERT_TRUE(Put("never", "now").ok());
  auto late = Start(Get({"missing"}, absl::ZeroDuration()));
  ASSERT_TRUE(late->has_value());
  EXPECT_EQ((*late)->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string((*late)->status().message()),
              ::testing::HasSubstr("missing"));
  // The caller's deadline bounds the wait.
  auto slot = std::make_shared<
      std::optional<absl::StatusOr<std::vector<std::string>>>>();
  rdzv_.Get(Get({"k"}, absl::Minutes(10)),
            [slot](absl::StatusOr<std::vector<std::string>> r) {
              *slot = std::move(r);
            },
            /*caller_left=*/absl::Seconds(10));
  EXPECT_FALSE(slot->has_value());
  clock_.Advance(absl::Seconds(11));
  rdzv_.Expire();
  ASSERT_TRUE(slot->has_value());
  EXPECT_EQ((*slot)->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousTest, AClosedAttemptAbortsItsWaitersAndRefusesMore) {
  auto waiting = Start(Get({"k"}));
  rdzv_.Close("7");
  ASSERT_TRUE(waiting->has_value());
  EXPECT_EQ((*waiting)->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Put("k", "v").code(), absl::StatusCode::kPermissionDenied);
}

// The scheduler's store behind real gRPC, as RendezvousServiceImpl serves
// it, without the rest of the controller.
class StoreService : public v1::RendezvousService::CallbackService {
 public:
  explicit StoreService(Rendezvous* rdzv) : rdzv_(rdzv) {}
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx,
                                const v1::RendezvousPutRequest* request,
                                v1::RendezvousPutResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(rdzv_->Put(*request)));
    return reactor;
  }
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const v1::RendezvousGetRequest* request,
                                v1::RendezvousGetResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    rdzv_->Get(*request, [reactor, response](
                             absl::StatusOr<std::vector<std::string>> values) {
      if (values.ok()) {
        for (auto& v : *values) response->add_values(std::move(v));
      }
      reactor->Finish(ToGrpcStatus(values.status()));
    });
    return reactor;
  }

 private:
  Rendezvous* const rdzv_;
};

TEST(RendezvousOverGrpcTest, AWorkerWaitsOnMoreKeysThanOneGetTakes) {
  FakeClock clock;
  Rendezvous rdzv(&clock);
  rdzv.Open("7", 1, "secret", /*world_size=*/2);
  StoreService service(&rdzv);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  std::unique_ptr<worker::Rendezvous> client = worker::NewSchedulerRendezvous(
      "127.0.0.1:" + std::to_string(port), "7", 1, "secret");

  // Gloo's full mesh waits on one key per rank: 2,500 ranks.
  std::vector<std::string> keys;
  for (int i = 0; i < 2500; ++i) {
    keys.push_back("rank" + std::to_string(i));
    ASSERT_TRUE(client->Put(keys.back(), "addr" + std::to_string(i)).ok());
  }
  absl::StatusOr<std::vector<std::string>> values =
      client->Get(keys, absl::Seconds(30));
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ((*values)[i], "addr" + std::to_string(i));
  }
  server->Shutdown();
}

}  // namespace
}  // namespace xl::control
