// The authorization matrix: every RPC of the public and agent APIs, called
// over real TLS on 127.0.0.1 against a real SchedulerServer (SQLite file,
// mTLS listener), by every kind of caller: no credential, a client
// certificate from another CA, an expired token, a revoked token, another
// user, the job's owner, an admin, the agent of the node, the agent of
// another node. Every cell's status code is asserted; denials are counted
// and all must hold. Redaction (others' environment values, secret_env) is
// checked wherever a job comes back.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/crypto/openssl.h"
#include "common/identity.h"
#include "server/auth/token_store.h"
#include "server/service/scheduler_server.h"
#include "xl/v1/agent.grpc.pb.h"
#include "xl/v1/auth.grpc.pb.h"
#include "xl/v1/queue.grpc.pb.h"
#include "xl/v1/rendezvous.grpc.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl {
namespace {

using grpc::StatusCode;

enum Who {
  kNone,
  kOtherCa,
  kExpired,
  kRevoked,
  kOtherUser,
  kOwner,
  kAdmin,
  kNode,
  kOtherNode,
  kWhoCount
};
constexpr std::array<const char*, kWhoCount> kWhoNames = {
    "no credential", "certificate of another CA", "expired token",
    "revoked token", "another user", "owner", "admin", "the node's agent",
    "another node's agent"};

constexpr char kSecretValue[] = "hunter2";
constexpr char kPlainValue[] = "visible-to-owner";

struct Pki {
  std::string cert, key;
};

Pki Issue(const crypto::CertificateSubject& subject, const Pki& issuer) {
  auto key = crypto::GeneratePrivateKeyPem();
  EXPECT_TRUE(key.ok()) << key.status();
  auto pub = crypto::PublicKeyPem(*key);
  EXPECT_TRUE(pub.ok()) << pub.status();
  auto cert = crypto::IssueCertificate(subject, *pub, issuer.cert,
                                       issuer.cert.empty() ? *key : issuer.key);
  EXPECT_TRUE(cert.ok()) << cert.status();
  return {*cert, *key};
}

Pki MakeCa(const std::string& name) {
  crypto::CertificateSubject s;
  s.common_name = name;
  s.is_ca = true;
  return Issue(s, Pki{});
}

Pki NodeCert(const std::string& node, const Pki& ca, bool marked = true) {
  crypto::CertificateSubject s;
  s.common_name = node;
  if (marked) s.uris = {absl::StrCat(kNodeCertificateUriPrefix, node)};
  s.client_auth = true;
  return Issue(s, ca);
}

class AuthMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/xl-auth-matrix-", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ca_ = MakeCa("xl test CA");
    other_ca_ = MakeCa("another CA");
    crypto::CertificateSubject server;
    server.common_name = "localhost";
    server.ip_addresses = {"127.0.0.1"};
    server.server_auth = true;
    Pki server_pki = Issue(server, ca_);
    node_n1_ = NodeCert("n1", ca_);
    node_n2_ = NodeCert("n2", ca_);
    node_n3_ = NodeCert("n3", ca_);
    stranger_ = NodeCert("n3", other_ca_);  // same name, wrong CA

    service::ServerOptions opts;
    opts.listen = "127.0.0.1:0";
    opts.db = dir_ + "/xl.db";
    opts.controller.heartbeat_timeout = absl::Seconds(120);
    opts.controller.lease = absl::Seconds(120);
    auto write = [&](const std::string& name, const std::string& pem) {
      std::string path = dir_ + "/" + name;
      EXPECT_TRUE(crypto::WriteFileAtomically(path, pem, 0600).ok());
      return path;
    };
    opts.tls_cert_file = write("server.crt", server_pki.cert);
    opts.tls_key_file = write("server.key", server_pki.key);
    opts.tls_ca_file = write("ca.crt", ca_.cert);
    opts.ca_cert_file = opts.tls_ca_file;
    opts.ca_key_file = write("ca.key", ca_.key);

    // Tokens are made on the file before the scheduler opens it, the way
    // `xl-scheduler token create` makes the first admin's.
    {
      auto tokens = auth::TokenStore::Open(opts.db);
      ASSERT_TRUE(tokens.ok()) << tokens.status();
      const absl::Time now = absl::Now();
      auto make = [&](const std::string& user, bool admin, absl::Duration ttl,
                      absl::Time at) {
        auto made = (*tokens)->Create(auth::kUserToken, user, admin, ttl, at);
        EXPECT_TRUE(made.ok()) << made.status();
        return *made;
      };
      token_[kOwner] = make("alice", false, absl::Hours(1), now).second;
      token_[kOtherUser] = make("bob", false, absl::Hours(1), now).second;
      token_[kAdmin] = make("root", true, absl::Hours(1), now).second;
      token_[kExpired] =
          make("alice", true, absl::Hours(1), now - absl::Hours(2)).second;
      auto revoked = make("alice", true, absl::Hours(1), now);
      token_[kRevoked] = revoked.second;
      revoked_id_ = revoked.first.id;
      ASSERT_TRUE((*tokens)->Revoke(revoked_id_, now).ok());
      for (int w = 0; w < kWhoCount; ++w) {
        auto join = (*tokens)->Create(auth::kJoinToken, "", false,
                                      absl::Hours(1), now);
        ASSERT_TRUE(join.ok()) << join.status();
        join_token_[w] = join->second;
      }
    }
    auto started = service::SchedulerServer::Start(opts);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    for (int w = 0; w < kWhoCount; ++w) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = ca_.cert;
      const Pki* client = nullptr;
      if (w == kOtherCa) client = &stranger_;
      if (w == kNode) client = &node_n3_;
      if (w == kOtherNode) client = &node_n2_;
      if (client != nullptr) {
        ssl.pem_cert_chain = client->cert;
        ssl.pem_private_key = client->key;
      }
      grpc::ChannelArguments args;
      // Separate connections: gRPC would otherwise share one subchannel.
      args.SetInt("xl.test.who", w);
      channel_[w] =
          grpc::CreateCustomChannel(target_, grpc::SslCredentials(ssl), args);
    }
  }

  void TearDown() override {
    if (agent_stream_ != nullptr) {
      agent_context_.TryCancel();
      v1::SchedulerMessage drain;
      while (agent_stream_->Read(&drain)) {
      }
      agent_stream_->Finish().ok();
      agent_stream_.reset();
    }
    if (server_ != nullptr) server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<grpc::ClientContext> Context(int w) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
    // Ignored with auth on: a caller cannot name itself.
    ctx->AddMetadata("x-xl-user", "root");
    if (!token_[w].empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token_[w]));
    }
    return ctx;
  }

  v1::JobService::Stub Jobs(int w) { return v1::JobService::Stub(channel_[w]); }

  // A job of alice's with a plain and a secret environment value.
  std::string SubmitAlices(const std::string& name, int nodes = 1) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->add_command("/bin/true");
    req.mutable_spec()->add_command("--key=argument-secret");
    (*req.mutable_spec()->mutable_env())["PLAIN"] = kPlainValue;
    (*req.mutable_spec()->mutable_env())["SECRET_KEY"] = kSecretValue;
    req.mutable_spec()->add_secret_env("SECRET_KEY");
    req.mutable_spec()->mutable_resources()->set_nodes(nodes);
    v1::SubmitJobResponse resp;
    auto ctx = Context(kOwner);
    grpc::Status st = Jobs(kOwner).SubmitJob(ctx.get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  // Registers node n1 with the n1 certificate over a real stream and keeps
  // the session; returns the first StartRanks it gets.
  void ConnectN1() {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_.cert;
    ssl.pem_cert_chain = node_n1_.cert;
    ssl.pem_private_key = node_n1_.key;
    agent_channel_ = grpc::CreateChannel(target_, grpc::SslCredentials(ssl));
    agent_stub_ = v1::AgentService::NewStub(agent_channel_);
    agent_stream_ = agent_stub_->Connect(&agent_context_);
    v1::AgentMessage reg;
    reg.mutable_register_()->set_name("n1");
    reg.mutable_register_()->set_instance_id("n1-instance");
    reg.mutable_register_()->set_shared_env(true);
    reg.mutable_register_()->mutable_inventory()->set_hostname("n1");
    reg.mutable_register_()->mutable_inventory()->set_cpus(8);
    reg.mutable_register_()->mutable_inventory()->set_memory_bytes(1ull << 34);
    ASSERT_TRUE(agent_stream_->Write(reg));
    v1::SchedulerMessage ack;
    ASSERT_TRUE(agent_stream_->Read(&ack));
    ASSERT_TRUE(ack.has_register_ack()) << ack.DebugString();
  }

  v1::StartRanks NextStart() {
    v1::SchedulerMessage m;
    while (agent_stream_->Read(&m)) {
      if (m.has_start_ranks()) return m.start_ranks();
    }
    ADD_FAILURE() << "the agent stream ended before a StartRanks";
    return {};
  }

  std::string dir_;
  Pki ca_, other_ca_, node_n1_, node_n2_, node_n3_, stranger_;
  std::array<std::string, kWhoCount> token_;
  std::array<std::string, kWhoCount> join_token_;
  std::string revoked_id_;
  std::unique_ptr<service::SchedulerServer> server_;
  std::string target_;
  std::array<std::shared_ptr<grpc::Channel>, kWhoCount> channel_;
  std::shared_ptr<grpc::Channel> agent_channel_;
  std::unique_ptr<v1::AgentService::Stub> agent_stub_;
  grpc::ClientContext agent_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage,
                                           v1::SchedulerMessage>>
      agent_stream_;
};

// Expected codes of one row, by caller.
using Row = std::array<StatusCode, kWhoCount>;

constexpr StatusCode OK = StatusCode::OK;
constexpr StatusCode UNAUTH = StatusCode::UNAUTHENTICATED;
constexpr StatusCode DENIED = StatusCode::PERMISSION_DENIED;
constexpr StatusCode NOCONN = StatusCode::UNAVAILABLE;  // TLS handshake fails

//                   none    otherCA expired revoked other   owner admin node    othernode
constexpr Row kAnyUser = {UNAUTH, NOCONN, UNAUTH, UNAUTH, OK,     OK,   OK,   DENIED, DENIED};
constexpr Row kOwnerOnly = {UNAUTH, NOCONN, UNAUTH, UNAUTH, DENIED, OK,   OK,   DENIED, DENIED};
constexpr Row kAdminOnly = {UNAUTH, NOCONN, UNAUTH, UNAUTH, DENIED, DENIED, OK, DENIED, DENIED};
constexpr Row kAnyone = {UNAUTH, NOCONN, UNAUTH, UNAUTH, OK,     OK,   OK,   OK,     OK};
constexpr Row kThisNode = {UNAUTH, NOCONN, UNAUTH, UNAUTH, DENIED, DENIED, DENIED, OK, DENIED};
// Rendezvous and join carry their own secret (the attempt's token, a join
// token); the caller's identity does not matter, TLS does.
constexpr Row kByOwnSecret = {OK, NOCONN, OK, OK, OK, OK, OK, OK, OK};
constexpr Row kNeverWithBadSecret = {DENIED, NOCONN, DENIED, DENIED, DENIED,
                                     DENIED, DENIED, DENIED, DENIED};

// Checks what a returned job shows to `w`.
void ExpectRedactedFor(int w, const v1::Job& job, const std::string& rpc) {
  const auto& env = job.spec().env();
  ASSERT_EQ(env.count("SECRET_KEY"), 1u) << rpc;
  EXPECT_NE(env.at("SECRET_KEY"), kSecretValue)
      << rpc << ": a secret_env value was shown to " << kWhoNames[w];
  const bool full = w == kOwner || w == kAdmin;
  EXPECT_EQ(env.at("PLAIN") == kPlainValue, full)
      << rpc << ": environment shown to " << kWhoNames[w];
  ASSERT_GE(job.spec().command_size(), 2) << rpc;
  EXPECT_EQ(job.spec().command(1) == "--key=argument-secret", full)
      << rpc << ": arguments shown to " << kWhoNames[w];
}

TEST_F(AuthMatrixTest, EveryRpcByEveryCaller) {
  ConnectN1();
  // A running attempt, for the rendezvous rows: alice's job lands on n1.
  const std::string running = SubmitAlices("rendezvous");
  v1::StartRanks start = NextStart();
  ASSERT_EQ(start.job_id(), running);
  const std::string rdzv_token = start.env().at("XL_RENDEZVOUS_TOKEN");
  ASSERT_FALSE(rdzv_token.empty());
  // Pending (2 nodes never fit): read, watched, cancelled in the rows.
  const std::string job = SubmitAlices("target", /*nodes=*/2);
  std::array<std::string, kWhoCount> cancel_job;
  for (int w = 0; w < kWhoCount; ++w) {
    cancel_job[w] = SubmitAlices(absl::StrCat("cancel-", w), 2);
  }

  struct Rpc {
    std::string name;
    Row expected;
    std::function<grpc::Status(int)> call;
  };
  std::vector<Rpc> rpcs;
  auto unary = [&](const std::string& name, Row row,
                   std::function<grpc::Status(int, grpc::ClientContext*)> f) {
    rpcs.push_back({name, row, [this, f](int w) {
                      auto ctx = Context(w);
                      return f(w, ctx.get());
                    }});
  };
  unary("JobService.SubmitJob", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_command("/bin/true");
    req.mutable_spec()->mutable_resources()->set_nodes(2);
    v1::SubmitJobResponse resp;
    return Jobs(w).SubmitJob(c, req, &resp);
  });
  {
    // A queue only alice (and admins) may submit to, with a cap of 5.
    v1::PutQueueRequest req;
    req.mutable_spec()->set_name("alices");
    req.mutable_spec()->add_users("alice");
    req.mutable_spec()->mutable_max_priority()->set_value(5);
    v1::Queue resp;
    auto ctx = Context(kAdmin);
    grpc::Status st =
        v1::QueueService::Stub(channel_[kAdmin]).PutQueue(ctx.get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  auto submit_in = [&](const std::string& queue, int priority) {
    return [this, queue, priority](int w, grpc::ClientContext* c) {
      v1::SubmitJobRequest req;
      req.mutable_spec()->add_command("/bin/true");
      req.mutable_spec()->set_queue(queue);
      req.mutable_spec()->set_priority(priority);
      req.mutable_spec()->mutable_resources()->set_nodes(2);
      v1::SubmitJobResponse resp;
      return Jobs(w).SubmitJob(c, req, &resp);
    };
  };
  // Priority and queues are permissions (finding F1): above the default
  // queue's cap of 0 only admins; a queue that admits alice, alice and
  // admins; within a queue's cap, every user it admits.
  unary("JobService.SubmitJob (priority 7 in default)", kAdminOnly,
        submit_in("default", 7));
  unary("JobService.SubmitJob (queue admitting alice)", kOwnerOnly,
        submit_in("alices", 0));
  unary("JobService.SubmitJob (priority 5 within alices' cap)", kOwnerOnly,
        submit_in("alices", 5));
  unary("JobService.SubmitJob (priority 6 above alices' cap)", kAdminOnly,
        submit_in("alices", 6));
  unary("JobService.SetJobPriority", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::SetJobPriorityRequest req;
          req.set_job_id(job);
          req.set_priority(100 + w);
          v1::Job resp;
          grpc::Status st = Jobs(w).SetJobPriority(c, req, &resp);
          if (st.ok()) EXPECT_EQ(resp.spec().priority(), 100 + w);
          return st;
        });
  unary("JobService.GetJob", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::Job resp;
    grpc::Status st = Jobs(w).GetJob(c, req, &resp);
    if (st.ok()) ExpectRedactedFor(w, resp, "GetJob");
    return st;
  });
  // A running job's MASTER_PORT is its owner's (security review F5).
  unary("JobService.GetJob (a running job)", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::GetJobRequest req;
          req.set_job_id(running);
          v1::Job resp;
          grpc::Status st = Jobs(w).GetJob(c, req, &resp);
          if (st.ok()) {
            EXPECT_EQ(resp.master_port() > 0, w == kOwner || w == kAdmin)
                << "MASTER_PORT shown to " << kWhoNames[w];
          }
          return st;
        });
  unary("JobService.ExplainJob", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::ExplainJobRequest req;
    req.set_job_id(job);
    v1::ExplainJobResponse resp;
    grpc::Status st = Jobs(w).ExplainJob(c, req, &resp);
    if (st.ok()) ExpectRedactedFor(w, resp.job(), "ExplainJob");
    return st;
  });
  unary("JobService.ListJobs", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    grpc::Status st = Jobs(w).ListJobs(c, req, &resp);
    if (st.ok()) {
      EXPECT_GT(resp.jobs_size(), 0);
      int alices = 0;
      for (const v1::Job& j : resp.jobs()) {
        if (j.user() == "alice" && j.spec().name() == "target") {
          ExpectRedactedFor(w, j, "ListJobs");
          ++alices;
        }
      }
      EXPECT_EQ(alices, 1) << "ListJobs by " << kWhoNames[w];
    }
    return st;
  });
  unary("JobService.CancelJob", kOwnerOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::CancelJobRequest req;
          req.set_job_id(cancel_job[w]);
          v1::CancelJobResponse resp;
          grpc::Status st = Jobs(w).CancelJob(c, req, &resp);
          if (st.ok()) ExpectRedactedFor(w, resp.job(), "CancelJob");
          return st;
        });
  unary("JobService.GetQueue", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::GetQueueResponse resp;
    return Jobs(w).GetQueue(c, {}, &resp);
  });
  unary("JobService.GetJobMetrics", kOwnerOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::GetJobMetricsRequest req;
          req.set_job_id(job);
          v1::GetJobMetricsResponse resp;
          return Jobs(w).GetJobMetrics(c, req, &resp);
        });
  unary("JobService.PlanResources", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::PlanResourcesRequest req;
          req.mutable_model()->set_parameters(1e9);
          v1::Plan resp;
          return Jobs(w).PlanResources(c, req, &resp);
        });
  unary("JobService.WatchJob", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::WatchJobRequest req;
    req.set_job_id(job);
    auto reader = Jobs(w).WatchJob(c, req);
    v1::JobEvent event;
    if (reader->Read(&event)) {
      c->TryCancel();
      while (reader->Read(&event)) {
      }
      reader->Finish().ok();
      return grpc::Status::OK;
    }
    return reader->Finish();
  });
  unary("JobService.StreamLogs", kOwnerOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::StreamLogsRequest req;
          req.set_job_id(job);
          req.set_all_ranks(true);
          auto reader = Jobs(w).StreamLogs(c, req);
          v1::LogChunk chunk;
          while (reader->Read(&chunk)) {
          }
          return reader->Finish();
        });
  auto nodes = [&](int w) { return v1::NodeService::Stub(channel_[w]); };
  unary("NodeService.ListNodes", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::ListNodesResponse resp;
    return nodes(w).ListNodes(c, {}, &resp);
  });
  unary("NodeService.GetNode", kAnyUser, [&](int w, grpc::ClientContext* c) {
    v1::GetNodeRequest req;
    req.set_name("n1");
    v1::Node resp;
    return nodes(w).GetNode(c, req, &resp);
  });
  unary("NodeService.DrainNode", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::DrainNodeRequest req;
          req.set_name("n1");
          v1::Node resp;
          return nodes(w).DrainNode(c, req, &resp);
        });
  unary("NodeService.ResumeNode", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::ResumeNodeRequest req;
          req.set_name("n1");
          v1::Node resp;
          return nodes(w).ResumeNode(c, req, &resp);
        });
  auto queues = [&](int w) { return v1::QueueService::Stub(channel_[w]); };
  {
    // A queue for the admin's delete to find.
    v1::PutQueueRequest req;
    req.mutable_spec()->set_name("doomed");
    v1::Queue resp;
    auto ctx = Context(kAdmin);
    ASSERT_TRUE(queues(kAdmin).PutQueue(ctx.get(), req, &resp).ok());
  }
  unary("QueueService.ListQueues", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::ListQueuesResponse resp;
          return queues(w).ListQueues(c, {}, &resp);
        });
  unary("QueueService.GetQueueSpec", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::GetQueueSpecRequest req;
          req.set_name("default");
          v1::Queue resp;
          return queues(w).GetQueueSpec(c, req, &resp);
        });
  unary("QueueService.PutQueue", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::PutQueueRequest req;
          req.mutable_spec()->set_name("made-in-matrix");
          req.mutable_spec()->set_weight(2 + w);
          v1::Queue resp;
          return queues(w).PutQueue(c, req, &resp);
        });
  unary("QueueService.DeleteQueue", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::DeleteQueueRequest req;
          req.set_name("doomed");
          v1::DeleteQueueResponse resp;
          return queues(w).DeleteQueue(c, req, &resp);
        });
  unary("QueueService.ListQueueChanges", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::ListQueueChangesResponse resp;
          return queues(w).ListQueueChanges(c, {}, &resp);
        });
  unary("QueueService.GetShares", kAnyUser,
        [&](int w, grpc::ClientContext* c) {
          v1::GetSharesResponse resp;
          return queues(w).GetShares(c, {}, &resp);
        });
  auto auth = [&](int w) { return v1::AuthService::Stub(channel_[w]); };
  unary("AuthService.WhoAmI", kAnyone, [&](int w, grpc::ClientContext* c) {
    v1::WhoAmIResponse resp;
    grpc::Status st = auth(w).WhoAmI(c, {}, &resp);
    if (st.ok()) {
      EXPECT_TRUE(resp.auth_enabled());
      const char* name = w == kOwner       ? "alice"
                         : w == kOtherUser ? "bob"
                         : w == kAdmin     ? "root"
                         : w == kNode      ? "n3"
                                           : "n2";
      EXPECT_EQ(resp.name(), name) << kWhoNames[w];
    }
    return st;
  });
  unary("AuthService.CreateToken", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::CreateTokenRequest req;
          req.set_user("carol");
          v1::CreateTokenResponse resp;
          return auth(w).CreateToken(c, req, &resp);
        });
  unary("AuthService.ListTokens", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::ListTokensResponse resp;
          grpc::Status st = auth(w).ListTokens(c, {}, &resp);
          for (const auto& t : resp.tokens()) {
            EXPECT_EQ(t.DebugString().find("xl_"), std::string::npos)
                << "a token's secret was listed";
          }
          return st;
        });
  unary("AuthService.RevokeToken", kAdminOnly,
        [&](int w, grpc::ClientContext* c) {
          v1::RevokeTokenRequest req;
          req.set_id(revoked_id_);
          v1::RevokeTokenResponse resp;
          return auth(w).RevokeToken(c, req, &resp);
        });
  unary("AuthService.JoinNode", kByOwnSecret,
        [&](int w, grpc::ClientContext* c) {
          v1::JoinNodeRequest req;
          req.set_join_token(join_token_[w]);
          req.set_node_name(absl::StrCat("joined-", w));
          auto key = crypto::GeneratePrivateKeyPem();
          req.set_public_key_pem(*crypto::PublicKeyPem(*key));
          v1::JoinNodeResponse resp;
          grpc::Status st = auth(w).JoinNode(c, req, &resp);
          if (st.ok()) {
            EXPECT_TRUE(
                crypto::VerifyCertificate(resp.certificate_pem(), ca_.cert)
                    .ok());
            EXPECT_EQ(*crypto::CertificateCommonName(resp.certificate_pem()),
                      absl::StrCat("joined-", w));
          }
          return st;
        });
  auto rdzv = [&](int w) { return v1::RendezvousService::Stub(channel_[w]); };
  unary("RendezvousService.Put (the attempt's token)", kByOwnSecret,
        [&](int w, grpc::ClientContext* c) {
          v1::RendezvousPutRequest req;
          req.mutable_scope()->set_job_id(running);
          req.mutable_scope()->set_attempt(start.attempt());
          req.mutable_scope()->set_token(rdzv_token);
          req.set_key(absl::StrCat("k", w));
          req.set_value("v");
          v1::RendezvousPutResponse resp;
          return rdzv(w).Put(c, req, &resp);
        });
  unary("RendezvousService.Put (a wrong token)", kNeverWithBadSecret,
        [&](int w, grpc::ClientContext* c) {
          v1::RendezvousPutRequest req;
          req.mutable_scope()->set_job_id(running);
          req.mutable_scope()->set_attempt(start.attempt());
          req.mutable_scope()->set_token(rdzv_token + "x");
          req.set_key("k");
          v1::RendezvousPutResponse resp;
          return rdzv(w).Put(c, req, &resp);
        });
  unary("RendezvousService.Get (a wrong token)", kNeverWithBadSecret,
        [&](int w, grpc::ClientContext* c) {
          v1::RendezvousGetRequest req;
          req.mutable_scope()->set_job_id(running);
          req.mutable_scope()->set_attempt(start.attempt());
          req.mutable_scope()->set_token("");
          req.add_keys("k0");
          v1::RendezvousGetResponse resp;
          return rdzv(w).Get(c, req, &resp);
        });
  // An agent session for node n3: only n3's certificate may open it.
  unary("AgentService.Connect (as n3)", kThisNode,
        [&](int w, grpc::ClientContext* c) {
          v1::AgentService::Stub stub(channel_[w]);
          auto stream = stub.Connect(c);
          v1::AgentMessage reg;
          reg.mutable_register_()->set_name("n3");
          reg.mutable_register_()->set_instance_id(absl::StrCat("who-", w));
          reg.mutable_register_()->mutable_inventory()->set_cpus(1);
          stream->Write(reg);
          v1::SchedulerMessage ack;
          if (stream->Read(&ack) && ack.has_register_ack()) {
            c->TryCancel();
            while (stream->Read(&ack)) {
            }
            stream->Finish().ok();
            return grpc::Status::OK;
          }
          return stream->Finish();
        });

  int cells = 0, denials = 0, denials_held = 0;
  for (const Rpc& rpc : rpcs) {
    for (int w = 0; w < kWhoCount; ++w) {
      grpc::Status st = rpc.call(w);
      ++cells;
      const bool deny = rpc.expected[w] != OK;
      if (deny) ++denials;
      if (deny && st.error_code() == rpc.expected[w]) ++denials_held;
      EXPECT_EQ(st.error_code(), rpc.expected[w])
          << rpc.name << " by " << kWhoNames[w] << ": " << st.error_message();
      if (!st.ok()) {
        EXPECT_FALSE(st.error_message().empty())
            << rpc.name << " by " << kWhoNames[w] << ": a denial says why";
      }
    }
  }
  std::printf("authorization matrix: %d RPC rows x %d callers = %d cells; "
              "%d of %d denials held\n",
              static_cast<int>(rpcs.size()), kWhoCount, cells, denials_held,
              denials);
  EXPECT_EQ(denials_held, denials);
}

// An agent with n2's certificate cannot register as n1: the node name
// comes from the certificate.
// A failed job's reason quotes its rank (security review F10): a path from
// the job's environment, its program's words. Others see that it failed,
// not why; a pending job's reason (the scheduler's, why it waits) is
// everyone's, as the queue is.
TEST_F(AuthMatrixTest, AFailedJobsReasonIsItsOwners) {
  ConnectN1();
  const std::string id = SubmitAlices("fails");
  v1::StartRanks start = NextStart();
  ASSERT_EQ(start.job_id(), id);
  const std::string pending = SubmitAlices("waits", /*nodes=*/2);
  const std::string leak = "cannot open /home/alice/project-x/PATH=/opt/x";
  v1::AgentMessage exit;
  v1::RankStatus* st = exit.mutable_rank_status();
  st->set_job_id(id);
  st->set_attempt(start.attempt());
  st->set_rank(0);
  st->set_state(v1::RANK_EXITED);
  st->set_exit_code(3);
  st->set_message(leak);
  ASSERT_TRUE(agent_stream_->Write(exit));
  auto get = [&](int w, const std::string& job) {
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::Job resp;
    auto ctx = Context(w);
    grpc::Status s = Jobs(w).GetJob(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  v1::Job done;
  for (int i = 0; i < 500; ++i) {
    done = get(kOwner, id);
    if (done.state() == v1::FAILED) break;
    usleep(10000);
  }
  ASSERT_EQ(done.state(), v1::FAILED) << done.DebugString();
  EXPECT_NE(done.reason().find(leak), std::string::npos) << done.reason();
  EXPECT_NE(get(kAdmin, id).reason().find(leak), std::string::npos);
  EXPECT_EQ(get(kOtherUser, id).reason(), auth::kReasonHidden);
  const std::string waits = get(kOwner, pending).reason();
  EXPECT_FALSE(waits.empty());
  EXPECT_EQ(get(kOtherUser, pending).reason(), waits);

  // The same through WatchJob: bob sees every transition, no rank's words.
  for (int w : {kOtherUser, kOwner}) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto ctx = Context(w);
    auto reader = Jobs(w).WatchJob(ctx.get(), req);
    v1::JobEvent event;
    bool failed = false;
    while (!failed && reader->Read(&event)) {
      if (w != kOwner) {
        EXPECT_EQ(event.reason().find("/home/alice"), std::string::npos)
            << kWhoNames[w] << ": " << event.reason();
      }
      if (event.to_state() == v1::FAILED) {
        failed = true;
        EXPECT_EQ(event.reason().find(leak) != std::string::npos, w == kOwner)
            << kWhoNames[w] << ": " << event.reason();
      }
    }
    EXPECT_TRUE(failed) << kWhoNames[w];
    ctx->TryCancel();
    while (reader->Read(&event)) {
    }
    reader->Finish().ok();
  }
}

TEST_F(AuthMatrixTest, ANodeCertificateCannotRegisterAnotherName) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_.cert;
  ssl.pem_cert_chain = node_n2_.cert;
  ssl.pem_private_key = node_n2_.key;
  auto stub = v1::AgentService::NewStub(
      grpc::CreateChannel(target_, grpc::SslCredentials(ssl)));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  v1::AgentMessage reg;
  reg.mutable_register_()->set_name("n1");
  reg.mutable_register_()->set_instance_id("impostor");
  stream->Write(reg);
  v1::SchedulerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), DENIED);
  EXPECT_NE(st.error_message().find("certificate is for node \"n2\""),
            std::string::npos)
      << st.error_message();
}

// A certificate from the cluster's CA that was not made for a node (a
// server's, with both key usages) does not make its holder a node.
TEST_F(AuthMatrixTest, ACertificateNotMadeForANodeIsNoNode) {
  crypto::CertificateSubject both;
  both.common_name = "n4";
  both.client_auth = true;
  both.server_auth = true;
  Pki cert = Issue(both, ca_);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_.cert;
  ssl.pem_cert_chain = cert.cert;
  ssl.pem_private_key = cert.key;
  auto channel = grpc::CreateChannel(target_, grpc::SslCredentials(ssl));
  auto stub = v1::AgentService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->Connect(&ctx);
  v1::AgentMessage reg;
  reg.mutable_register_()->set_name("n4");
  reg.mutable_register_()->set_instance_id("n4");
  stream->Write(reg);
  v1::SchedulerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("not a node certificate"),
            std::string::npos)
      << st.error_message();
}

// A person's client certificate from the cluster's CA (clientAuth only,
// named "n5") is no node: only one marked xl-node:n5 is (security review
// F12). The JoinNode certificates carry the mark.
TEST_F(AuthMatrixTest, OnlyACertificateMarkedForANodeIsThatNode) {
  for (bool marked : {false, true}) {
    Pki cert = NodeCert("n5", ca_, marked);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_.cert;
    ssl.pem_cert_chain = cert.cert;
    ssl.pem_private_key = cert.key;
    auto stub = v1::AgentService::NewStub(
        grpc::CreateChannel(target_, grpc::SslCredentials(ssl)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    auto stream = stub->Connect(&ctx);
    v1::AgentMessage reg;
    reg.mutable_register_()->set_name("n5");
    reg.mutable_register_()->set_instance_id("n5");
    reg.mutable_register_()->mutable_inventory()->set_hostname("n5");
    reg.mutable_register_()->mutable_inventory()->set_cpus(1);
    stream->Write(reg);
    v1::SchedulerMessage m;
    const bool answered = stream->Read(&m);
    EXPECT_EQ(answered && m.has_register_ack(), marked) << m.DebugString();
    if (answered) {
      ctx.TryCancel();
      while (stream->Read(&m)) {
      }
    }
    grpc::Status st = stream->Finish();
    if (!marked) {
      EXPECT_EQ(st.error_code(), DENIED) << st.error_message();
      EXPECT_NE(st.error_message().find("URI:xl-node:n5"), std::string::npos)
          << st.error_message();
    }
  }
  const std::string issued = crypto::GeneratePrivateKeyPem().value();
  v1::AuthService::Stub auth(channel_[kNone]);
  v1::JoinNodeRequest join;
  join.set_join_token(join_token_[kOwner]);
  join.set_node_name("n6");
  join.set_public_key_pem(crypto::PublicKeyPem(issued).value());
  v1::JoinNodeResponse resp;
  auto ctx = Context(kNone);
  ASSERT_TRUE(auth.JoinNode(ctx.get(), join, &resp).ok());
  auto use = crypto::DescribeCertificate(resp.certificate_pem());
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->uris, std::vector<std::string>{"xl-node:n6"});
}

// With TLS, a Register must carry the agent's instance id (an empty one
// would push a live session of the same node aside).
TEST_F(AuthMatrixTest, RegisterWithoutInstanceIdIsRefused) {
  v1::AgentService::Stub stub(channel_[kNode]);
  grpc::ClientContext ctx;
  auto stream = stub.Connect(&ctx);
  v1::AgentMessage reg;
  reg.mutable_register_()->set_name("n3");
  stream->Write(reg);
  v1::SchedulerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  EXPECT_EQ(stream->Finish().error_code(), StatusCode::INVALID_ARGUMENT);
}

// A join whose public key is no key, or whose name is taken, does not spend
// the token: it still works for a proper join.
TEST_F(AuthMatrixTest, AFailedJoinDoesNotSpendTheToken) {
  ConnectN1();
  v1::AuthService::Stub stub(channel_[kNone]);
  v1::JoinNodeRequest req;
  req.set_join_token(join_token_[kNone]);
  req.set_node_name("fresh");
  req.set_public_key_pem("-----BEGIN PUBLIC KEY-----\nnot a key\n");
  v1::JoinNodeResponse resp;
  {
    auto ctx = Context(kNone);
    EXPECT_FALSE(stub.JoinNode(ctx.get(), req, &resp).ok());
  }
  req.set_node_name("n1");  // known, and the token is not bound to it
  req.set_public_key_pem(*crypto::PublicKeyPem(*crypto::GeneratePrivateKeyPem()));
  {
    auto ctx = Context(kNone);
    grpc::Status st = stub.JoinNode(ctx.get(), req, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::ALREADY_EXISTS) << st.error_message();
  }
  req.set_node_name("fresh");
  auto ctx = Context(kNone);
  grpc::Status st = stub.JoinNode(ctx.get(), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(AuthMatrixTest, AJoinTokenWorksOnce) {
  v1::AuthService::Stub stub(channel_[kNone]);
  auto key = crypto::GeneratePrivateKeyPem();
  v1::JoinNodeRequest req;
  req.set_join_token(join_token_[kNone]);
  req.set_node_name("fresh");
  req.set_public_key_pem(*crypto::PublicKeyPem(*key));
  v1::JoinNodeResponse resp;
  {
    auto ctx = Context(kNone);
    ASSERT_TRUE(stub.JoinNode(ctx.get(), req, &resp).ok());
  }
  auto ctx = Context(kNone);
  req.set_node_name("fresh2");
  grpc::Status st = stub.JoinNode(ctx.get(), req, &resp);
  EXPECT_EQ(st.error_code(), UNAUTH);
  EXPECT_NE(st.error_message().find("already used"), std::string::npos)
      << st.error_message();
}

// A token made for a node names an agent that was given no name (its
// hostname differs), and records that node as its user; one name gets one
// certificate from unbound tokens, even before that node registers.
TEST_F(AuthMatrixTest, ATokenForANodeNamesItAndANameIsIssuedOnce) {
  v1::AuthService::Stub admin(channel_[kAdmin]);
  v1::CreateTokenRequest make;
  make.set_join(true);
  make.set_user("gpu-9");
  v1::CreateTokenResponse made;
  {
    auto ctx = Context(kAdmin);
    ASSERT_TRUE(admin.CreateToken(ctx.get(), make, &made).ok());
  }
  v1::AuthService::Stub stub(channel_[kNone]);
  const std::string pub =
      *crypto::PublicKeyPem(*crypto::GeneratePrivateKeyPem());
  v1::JoinNodeRequest req;
  req.set_join_token(made.token());
  req.set_node_name("host-17");
  req.set_public_key_pem(pub);
  v1::JoinNodeResponse resp;
  {
    // Given that name explicitly, the agent is refused.
    auto ctx = Context(kNone);
    EXPECT_EQ(stub.JoinNode(ctx.get(), req, &resp).error_code(),
              StatusCode::PERMISSION_DENIED);
  }
  req.set_name_is_default(true);
  {
    auto ctx = Context(kNone);
    grpc::Status st = stub.JoinNode(ctx.get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(*crypto::CertificateCommonName(resp.certificate_pem()), "gpu-9");
  v1::ListTokensResponse list;
  {
    auto ctx = Context(kAdmin);
    ASSERT_TRUE(admin.ListTokens(ctx.get(), v1::ListTokensRequest(), &list).ok());
  }
  bool seen = false;
  for (const v1::TokenInfo& t : list.tokens()) {
    if (t.id() != made.info().id()) continue;
    seen = true;
    EXPECT_EQ(t.used_by(), "gpu-9");
  }
  EXPECT_TRUE(seen);

  // Two unbound tokens, one new name: the second is refused, not spent.
  v1::JoinNodeRequest first;
  first.set_join_token(join_token_[kOwner]);
  first.set_node_name("twin");
  first.set_public_key_pem(pub);
  {
    auto ctx = Context(kNone);
    ASSERT_TRUE(stub.JoinNode(ctx.get(), first, &resp).ok());
  }
  v1::JoinNodeRequest second = first;
  second.set_join_token(join_token_[kOtherUser]);
  {
    auto ctx = Context(kNone);
    grpc::Status st = stub.JoinNode(ctx.get(), second, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::ALREADY_EXISTS) << st.error_message();
  }
  second.set_node_name("twin2");
  auto ctx = Context(kNone);
  grpc::Status st = stub.JoinNode(ctx.get(), second, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

}  // namespace
}  // namespace xl
