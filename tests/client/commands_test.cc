// Tests of the xlctl commands against a fake JobService and NodeService that
// run in the test process on 127.0.0.1:0 (real gRPC, no scheduler): retries
// and idempotency keys, identity and deadlines, paging, logs, wait and the
// exit codes of failures.
#include "client/commands.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/exit_code.h"
#include "common/duration.h"
#include "common/identity.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string UserOf(const grpc::ServerContext* context) {
  auto it = context->client_metadata().find(xl::kUserMetadataKey);
  if (it == context->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class FakeJobService final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    submits_.push_back(*request);
    if (submit_unavailable_ > 0) {
      --submit_unavailable_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "store busy");
    }
    if (submit_error_.error_code() != grpc::StatusCode::OK)
      return submit_error_;
    response->set_job_id("17");
    response->set_created(true);
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request, v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    ++get_calls_;
    if (request->job_id() != job_.id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no job " + request->job_id());
    }
    *job = job_;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    lists_.push_back(*request);
    if (!listed_.empty()) {
      for (const v1::Job& job : listed_) *response->add_jobs() = job;
      return grpc::Status::OK;
    }
    // Two pages: jobs 3 and 2, then job 1.
    if (request->page_token().empty()) {
      response->add_jobs()->set_id("3");
      response->add_jobs()->set_id("2");
      response->set_next_page_token("page-2");
    } else {
      response->add_jobs()->set_id("1");
    }
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    cancel_reason_ = request->reason();
    response->mutable_job()->set_id(request->job_id());
    response->mutable_job()->set_state(v1::CANCELLED);
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    std::vector<v1::JobEvent> events;
    bool block;
    {
      absl::MutexLock lock(&mu_);
      ++watch_calls_;
      events = events_;
      block = block_watch_;
    }
    for (const v1::JobEvent& event : events) {
      if (event.seq() > request->after_seq()) writer->Write(event);
    }
    if (block) {
      // A job that never ends: hold the stream until the client gives up.
      while (!context->IsCancelled()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return grpc::Status::CANCELLED;
    }
    absl::MutexLock lock(&mu_);
    if (!events.empty()) job_.set_state(events.back().to_state());
    return grpc::Status::OK;
  }

  grpc::Status StreamLogs(grpc::ServerContext* context,
                          const v1::StreamLogsRequest* request,
                          grpc::ServerWriter<v1::LogChunk>* writer) override {
    std::vector<v1::LogChunk> chunks;
    {
      absl::MutexLock lock(&mu_);
      Record(context);
      logs_request_ = *request;
      chunks = chunks_;
    }
    for (const v1::LogChunk& chunk : chunks) {
      if (request->all_ranks() || chunk.rank() == request->rank()) {
        writer->Write(chunk);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status GetQueue(grpc::ServerContext* context,
                        const v1::GetQueueRequest*,
                        v1::GetQueueResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    response->add_queues()->set_queue("default");
    response->set_total_gpus(16);
    return grpc::Status::OK;
  }

  grpc::Status GetJobMetrics(grpc::ServerContext* context,
                             const v1::GetJobMetricsRequest* request,
                             v1::GetJobMetricsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    if (request->job_id() != job_.id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no job " + request->job_id());
    }
    *response = metrics_;
    return grpc::Status::OK;
  }

  void Record(const grpc::ServerContext* context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    users_.push_back(UserOf(context));
    deadlines_.push_back(absl::FromChrono(context->deadline()) - absl::Now());
  }

  absl::Mutex mu_;
  int submit_unavailable_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status submit_error_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitJobRequest> submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListJobsRequest> lists_ ABSL_GUARDED_BY(mu_);
  // When set, ListJobs returns these on one page.
  std::vector<v1::Job> listed_ ABSL_GUARDED_BY(mu_);
  v1::GetJobMetricsResponse metrics_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> users_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> deadlines_ ABSL_GUARDED_BY(mu_);
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  int get_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int watch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
  bool block_watch_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::LogChunk> chunks_ ABSL_GUARDED_BY(mu_);
  v1::StreamLogsRequest logs_request_ ABSL_GUARDED_BY(mu_);
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
};

class FakeNodeService final : public v1::NodeService::Service {
 public:
  // Two pages of one node each, as a fleet larger than a page.
  grpc::Status ListNodes(grpc::ServerContext*,
                         const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override {
    const bool first = request->page_token().empty();
    v1::Node* node = response->add_nodes();
    node->set_name(first ? "node-1" : "node-2");
    node->set_state(v1::READY);
    node->mutable_inventory()->add_gpus()->set_model("NVIDIA H200");
    if (first) response->set_next_page_token("node-1");
    return grpc::Status::OK;
  }
  grpc::Status GetNode(grpc::ServerContext*, const v1::GetNodeRequest* request,
                       v1::Node* node) override {
    if (request->name() != "node-1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no node " + request->name());
    }
    node->set_name("node-1");
    return grpc::Status::OK;
  }
  grpc::Status DrainNode(grpc::ServerContext*,
                         const v1::DrainNodeRequest* request,
                         v1::Node* node) override {
    node->set_name(request->name());
    node->set_state(v1::DRAINED);
    node->set_state_reason("drained by alice: " + request->reason());
    return grpc::Status::OK;
  }
  grpc::Status ResumeNode(grpc::ServerContext*,
                          const v1::ResumeNodeRequest* request,
                          v1::Node* node) override {
    node->set_name(request->name());
    node->set_state(v1::READY);
    return grpc::Status::OK;
  }
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&jobs_);
    builder.RegisterService(&nodes_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.server = absl::StrCat("127.0.0.1:", port_);
    options_.user = "alice";
    options_.timeout = absl::Seconds(10);
    connection_ = std::make_unique<SchedulerConnection>(
        options_, grpc::CreateChannel(options_.server,
                                      grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  // Commands printing in `format`, pausing for nothing but recording pauses.
  std::unique_ptr<Commands> Make(OutputFormat format = OutputFormat::kTable) {
    out_.str("");
    err_.str("");
    auto commands =
        std::make_unique<Commands>(connection_.get(), format, &out_, &err_);
    commands->set_sleep([this](absl::Duration d) { sleeps_.push_back(d); });
    commands->set_zone(absl::UTCTimeZone());
    return commands;
  }

  void SetJob(const std::string& id, v1::JobState state, int world_size = 1) {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.job_.set_id(id);
    jobs_.job_.set_state(state);
    jobs_.job_.set_world_size(world_size);
  }

  SubmitOptions CommandOnly() {
    SubmitOptions options;
    options.overrides.nodes = 2;
    options.overrides.command = {"/usr/bin/python3", "train.py"};
    return options;
  }

  FakeJobService jobs_;
  FakeNodeService nodes_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ConnectionOptions options_;
  std::unique_ptr<SchedulerConnection> connection_;
  std::ostringstream out_, err_;
  std::vector<absl::Duration> sleeps_;
};

TEST_F(CommandsTest, SubmitPrintsOnlyTheIdAndSendsSpecUserAndDeadline) {
  ASSERT_TRUE(Make()->Submit(CommandOnly()).ok());
  EXPECT_EQ(out_.str(), "17\n");
  EXPECT_EQ(err_.str(), "");
  absl::MutexLock lock(&jobs_.mu_);
  ASSERT_EQ(jobs_.submits_.size(), 1u);
  const v1::SubmitJobRequest& request = jobs_.submits_[0];
  EXPECT_THAT(request.spec().command(),
              ElementsAre("/usr/bin/python3", "train.py"));
  EXPECT_EQ(request.spec().resources().nodes(), 2);
  EXPECT_THAT(request.idempotency_key(), StartsWith("xlctl-"));
  EXPECT_EQ(request.idempotency_key().size(), 6u + 32u);
  EXPECT_THAT(jobs_.users_, ElementsAre("alice"));
  // The call carried a deadline of about --timeout. gRPC rounds the
  // grpc-timeout header up (to 100 ms here), so the server may see a bit
  // more than 10 s.
  EXPECT_GT(jobs_.deadlines_[0], absl::Seconds(5));
  EXPECT_LE(jobs_.deadlines_[0], absl::Seconds(10) + absl::Milliseconds(200));
}

TEST_F(CommandsTest, SubmitRetriesUnavailableWithTheSameKey) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.submit_unavailable_ = 2;
  }
  ASSERT_TRUE(Make()->Submit(CommandOnly()).ok());
  EXPECT_EQ(out_.str(), "17\n");
  absl::MutexLock lock(&jobs_.mu_);
  ASSERT_EQ(jobs_.submits_.size(), 3u);
  EXPECT_EQ(jobs_.submits_[1].idempotency_key(),
            jobs_.submits_[0].idempotency_key());
  EXPECT_EQ(jobs_.submits_[2].idempotency_key(),
            jobs_.submits_[0].idempotency_key());
  EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(500), absl::Seconds(1)));
}

TEST_F(CommandsTest, SubmitGivesUpAfterThreeRetries) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.submit_unavailable_ = 100;
  }
  absl::Status status = Make()->Submit(CommandOnly());
  EXPECT_EQ(ExitCodeFor(status), kExitUnreachable);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("is xl-scheduler running?"));
  EXPECT_EQ(out_.str(), "");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.submits_.size(), 1u + kSubmitRetries);
}

TEST_F(CommandsTest, EachSubmitGetsItsOwnKeyUnlessGiven) {
  ASSERT_TRUE(Make()->Submit(CommandOnly()).ok());
  ASSERT_TRUE(Make()->Submit(CommandOnly()).ok());
  SubmitOptions keyed = CommandOnly();
  keyed.idempotency_key = "my-key";
  ASSERT_TRUE(Make()->Submit(keyed).ok());
  absl::MutexLock lock(&jobs_.mu_);
  ASSERT_EQ(jobs_.submits_.size(), 3u);
  EXPECT_NE(jobs_.submits_[0].idempotency_key(),
            jobs_.submits_[1].idempotency_key());
  EXPECT_EQ(jobs_.submits_[2].idempotency_key(), "my-key");
}

TEST_F(CommandsTest, SubmitJsonPrintsTheResponse) {
  ASSERT_TRUE(Make(OutputFormat::kJson)->Submit(CommandOnly()).ok());
  v1::SubmitJobResponse response;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &response).ok())
      << out_.str();
  EXPECT_EQ(response.job_id(), "17");
  EXPECT_TRUE(response.created());
}

TEST_F(CommandsTest, SubmitRejectedByTheSchedulerIsExitTwo) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.submit_error_ = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       "resources.nodes: must be at least 1");
  }
  absl::Status status = Make()->Submit(CommandOnly());
  EXPECT_EQ(ExitCodeFor(status), kExitUsage);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("resources.nodes: must be at least 1"));
}

TEST_F(CommandsTest, BadJobFileNeverReachesTheScheduler) {
  SubmitOptions options;
  options.job_file = ::testing::TempDir() + "/absent.yaml";
  EXPECT_EQ(ExitCodeFor(Make()->Submit(options)), kExitUsage);
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_TRUE(jobs_.submits_.empty());
}

TEST_F(CommandsTest, GetUnknownJobIsExitThree) {
  SetJob("5", v1::RUNNING);
  absl::Status status = Make()->Get("404");
  EXPECT_EQ(ExitCodeFor(status), kExitNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no job 404"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("xlctl list"));
}

TEST_F(CommandsTest, GetPrintsTheJob) {
  SetJob("5", v1::RUNNING);
  ASSERT_TRUE(Make()->Get("5").ok());
  EXPECT_THAT(out_.str(), HasSubstr("RUNNING"));
  ASSERT_TRUE(Make(OutputFormat::kYaml)->Get("5").ok());
  EXPECT_THAT(out_.str(), HasSubstr("id: 5"));
}

TEST_F(CommandsTest, ListOnePageOrAll) {
  ListOptions options;
  options.states = {"running", "PENDING"};
  options.user = "bob";
  options.limit = 2;
  ASSERT_TRUE(Make(OutputFormat::kJson)->List(options).ok());
  v1::ListJobsResponse first;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &first).ok());
  EXPECT_EQ(first.jobs_size(), 2);
  EXPECT_EQ(first.next_page_token(), "page-2");

  options.all_pages = true;
  ASSERT_TRUE(Make(OutputFormat::kJson)->List(options).ok());
  v1::ListJobsResponse all;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &all).ok());
  ASSERT_EQ(all.jobs_size(), 3);
  EXPECT_EQ(all.jobs(2).id(), "1");
  EXPECT_EQ(all.next_page_token(), "");

  absl::MutexLock lock(&jobs_.mu_);
  ASSERT_EQ(jobs_.lists_.size(), 3u);
  EXPECT_THAT(jobs_.lists_[0].states(), ElementsAre(v1::RUNNING, v1::PENDING));
  EXPECT_EQ(jobs_.lists_[0].user(), "bob");
  EXPECT_EQ(jobs_.lists_[0].page_size(), 2);
  EXPECT_EQ(jobs_.lists_[2].page_token(), "page-2");
}

TEST_F(CommandsTest, ListTableMentionsMorePages) {
  ASSERT_TRUE(Make()->List(ListOptions()).ok());
  EXPECT_THAT(out_.str(), StartsWith("ID"));
  EXPECT_THAT(err_.str(), HasSubstr("--all-pages"));
}

TEST_F(CommandsTest, ListBadStateIsUsageErrorWithoutACall) {
  ListOptions options;
  options.states = {"sleeping"};
  EXPECT_EQ(ExitCodeFor(Make()->List(options)), kExitUsage);
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_TRUE(jobs_.lists_.empty());
}

void AddChunk(FakeJobService& jobs, int rank, const std::string& data) {
  absl::MutexLock lock(&jobs.mu_);
  v1::LogChunk chunk;
  chunk.set_job_id("5");
  chunk.set_rank(rank);
  chunk.set_stream(v1::STDOUT);
  chunk.set_data(data);
  jobs.chunks_.push_back(chunk);
}

TEST_F(CommandsTest, LogsOfSeveralRanksArePrefixed) {
  SetJob("5", v1::RUNNING, /*world_size=*/2);
  AddChunk(jobs_, 0, "loss 2.0\n");
  AddChunk(jobs_, 1, "loss 2.1\nloss");
  AddChunk(jobs_, 1, " 1.9\n");
  ASSERT_TRUE(Make()->Logs("5", LogsOptions()).ok());
  EXPECT_EQ(out_.str(),
            "[rank 0] loss 2.0\n[rank 1] loss 2.1\n[rank 1] loss 1.9\n");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_TRUE(jobs_.logs_request_.all_ranks());
  EXPECT_EQ(jobs_.logs_request_.rank(), -1);
  EXPECT_FALSE(jobs_.logs_request_.follow());
}

TEST_F(CommandsTest, LogsOfOneRankAreRawBytes) {
  SetJob("5", v1::RUNNING, /*world_size=*/2);
  AddChunk(jobs_, 0, "zero\n");
  AddChunk(jobs_, 1, "one\npartial");
  LogsOptions options;
  options.rank = 1;
  options.follow = true;
  ASSERT_TRUE(Make()->Logs("5", options).ok());
  EXPECT_EQ(out_.str(), "one\npartial");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_FALSE(jobs_.logs_request_.all_ranks());
  EXPECT_EQ(jobs_.logs_request_.rank(), 1);
  EXPECT_TRUE(jobs_.logs_request_.follow());
}

TEST_F(CommandsTest, LogsOfASingleRankJobAreNotPrefixed) {
  SetJob("5", v1::RUNNING, /*world_size=*/1);
  AddChunk(jobs_, 0, "hello\n");
  ASSERT_TRUE(Make()->Logs("5", LogsOptions()).ok());
  EXPECT_EQ(out_.str(), "hello\n");
}

TEST_F(CommandsTest, LogsRankOutOfRangeIsUsageError) {
  SetJob("5", v1::RUNNING, /*world_size=*/2);
  LogsOptions options;
  options.rank = 2;
  EXPECT_EQ(ExitCodeFor(Make()->Logs("5", options)), kExitUsage);
}

void AddEvent(FakeJobService& jobs, int64_t seq, v1::JobState from,
              v1::JobState to, const std::string& reason) {
  absl::MutexLock lock(&jobs.mu_);
  v1::JobEvent event;
  event.set_job_id("5");
  event.set_seq(seq);
  *event.mutable_time() =
      xl::ToProtoTime(absl::FromUnixSeconds(1700000000 + seq));
  event.set_from_state(from);
  event.set_to_state(to);
  event.set_attempt(1);
  event.set_reason(reason);
  jobs.events_.push_back(event);
}

TEST_F(CommandsTest, WatchPrintsOneLinePerEvent) {
  AddEvent(jobs_, 1, v1::JOB_STATE_UNSPECIFIED, v1::PENDING, "submitted");
  AddEvent(jobs_, 2, v1::PENDING, v1::RUNNING, "");
  AddEvent(jobs_, 3, v1::RUNNING, v1::SUCCEEDED, "all ranks exited 0");
  ASSERT_TRUE(Make()->Watch("5").ok());
  EXPECT_EQ(out_.str(),
            "2023-11-14 22:13:21  - -> PENDING  attempt 1  submitted\n"
            "2023-11-14 22:13:22  PENDING -> RUNNING  attempt 1\n"
            "2023-11-14 22:13:23  RUNNING -> SUCCEEDED  attempt 1  all ranks "
            "exited 0\n");
}

TEST_F(CommandsTest, WaitSucceeded) {
  SetJob("5", v1::RUNNING);
  AddEvent(jobs_, 1, v1::RUNNING, v1::SUCCEEDED, "all ranks exited 0");
  ASSERT_TRUE(Make()->Wait("5", std::nullopt).ok());
  EXPECT_EQ(out_.str(), "job 5 SUCCEEDED\n");
}

TEST_F(CommandsTest, WaitOnAFinishedJobReturnsAtOnce) {
  SetJob("5", v1::SUCCEEDED);
  ASSERT_TRUE(Make()->Wait("5", absl::Seconds(1)).ok());
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.watch_calls_, 0);
}

TEST_F(CommandsTest, WaitFailedIsExitOne) {
  SetJob("5", v1::RUNNING);
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.job_.set_reason("rank 1 exited with code 3");
    jobs_.job_.set_exit_code(3);
  }
  AddEvent(jobs_, 1, v1::RUNNING, v1::FAILED, "rank 1 exited with code 3");
  absl::Status status = Make()->Wait("5", std::nullopt);
  EXPECT_EQ(ExitCodeFor(status), kExitFailed);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("ended FAILED (exit code 3)"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("xlctl logs 5"));
}

TEST_F(CommandsTest, WaitCancelledIsExitOne) {
  SetJob("5", v1::RUNNING);
  AddEvent(jobs_, 1, v1::RUNNING, v1::CANCELLED, "cancelled by alice");
  EXPECT_EQ(ExitCodeFor(Make()->Wait("5", std::nullopt)), kExitFailed);
}

TEST_F(CommandsTest, WaitTimeoutIsExitFive) {
  SetJob("5", v1::RUNNING);
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.block_watch_ = true;
  }
  absl::Status status = Make()->Wait("5", absl::Milliseconds(200));
  EXPECT_EQ(ExitCodeFor(status), kExitWaitTimeout);
  EXPECT_THAT(std::string(status.message()), HasSubstr("still RUNNING"));
}

TEST_F(CommandsTest, WaitUnknownJobIsExitThree) {
  SetJob("5", v1::RUNNING);
  EXPECT_EQ(ExitCodeFor(Make()->Wait("6", std::nullopt)), kExitNotFound);
}

TEST_F(CommandsTest, CancelSendsTheReason) {
  ASSERT_TRUE(Make()->Cancel("5", "wrong data").ok());
  EXPECT_EQ(out_.str(), "job 5 CANCELLED\n");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.cancel_reason_, "wrong data");
}

TEST_F(CommandsTest, QueueAndNodes) {
  ASSERT_TRUE(Make()->Queue().ok());
  EXPECT_THAT(out_.str(), HasSubstr("TOTAL"));
  ASSERT_TRUE(Make()->Nodes().ok());
  EXPECT_THAT(out_.str(), HasSubstr("node-1  READY  0/1   NVIDIA H200"));
  EXPECT_THAT(out_.str(), HasSubstr("node-2  READY  0/1   NVIDIA H200"));
  ASSERT_TRUE(Make(OutputFormat::kJson)->Nodes().ok());
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_EQ(nodes.nodes(0).name(), "node-1");
  EXPECT_TRUE(nodes.next_page_token().empty());
  EXPECT_EQ(ExitCodeFor(Make()->Node("node-9")), kExitNotFound);
  ASSERT_TRUE(Make()->Drain("node-1", "disk swap").ok());
  EXPECT_EQ(
      out_.str(),
      "node node-1 drained; state DRAINED (drained by alice: disk swap)\n");
  ASSERT_TRUE(Make()->Resume("node-1").ok());
  EXPECT_EQ(out_.str(), "node node-1 resumed; state READY\n");
}

v1::TrainMetrics Metrics(int64_t step, double loss) {
  v1::TrainMetrics m;
  m.set_job_id("5");
  m.set_attempt(1);
  m.set_step(step);
  m.set_total_steps(100);
  m.set_loss(loss);
  m.set_samples_per_second(2048);
  m.set_step_seconds(0.125);
  m.set_compute_seconds(0.1);
  m.set_allreduce_seconds(0.02);
  m.set_data_wait_seconds(0.001);
  m.set_allreduce_bus_gbps(87.5);
  m.set_peak_memory_bytes(3ull << 30);
  *m.mutable_time() = xl::ToProtoTime(absl::FromUnixSeconds(1700000000));
  return m;
}

// A training job with metrics (5) and a job that reports none (6).
void ListTwoRunningJobs(FakeJobService& jobs) {
  absl::MutexLock lock(&jobs.mu_);
  v1::Job training;
  training.set_id("5");
  training.set_user("alice");
  training.set_state(v1::RUNNING);
  training.set_world_size(8);
  training.mutable_spec()->set_name("mlp");
  training.mutable_spec()->mutable_resources()->set_nodes(2);
  *training.mutable_metrics() = Metrics(40, 1.25);
  v1::Job plain = training;
  plain.set_id("6");
  plain.mutable_spec()->set_name("script");
  plain.clear_metrics();
  jobs.listed_ = {training, plain};
}

std::vector<std::string> Words(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

TEST_F(CommandsTest, TopOnceAsksForScheduledAndRunningJobs) {
  ListTwoRunningJobs(jobs_);
  TopOptions options;
  options.once = true;
  options.queue = "research";
  options.user = "bob";
  ASSERT_TRUE(Make()->Top(options).ok());
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], StartsWith("ID  NAME    USER   STATE    NODES  RANKS"));
  EXPECT_THAT(
      Words(lines[1]),
      ElementsAre("5", "mlp", "alice", "RUNNING", "2", "8", "40/100", "1.2500",
                  "2048.0", "125.00", "20.00", "87.50", "3", "GiB", "-"));
  EXPECT_THAT(Words(lines[2]),
              ElementsAre("6", "script", "alice", "RUNNING", "2", "8", "-", "-",
                          "-", "-", "-", "-", "-", "-"));
  EXPECT_EQ(out_.str().find('\x1b'), std::string::npos);
  absl::MutexLock lock(&jobs_.mu_);
  ASSERT_EQ(jobs_.lists_.size(), 1u);
  EXPECT_THAT(jobs_.lists_[0].states(),
              ElementsAre(v1::SCHEDULED, v1::RUNNING));
  EXPECT_EQ(jobs_.lists_[0].queue(), "research");
  EXPECT_EQ(jobs_.lists_[0].user(), "bob");
}

TEST_F(CommandsTest, TopReadsEveryPage) {
  TopOptions options;
  options.once = true;
  ASSERT_TRUE(Make()->Top(options).ok());
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CommandsTest, TopIntoAPipePrintsOnceWithoutOnce) {
  ListTwoRunningJobs(jobs_);
  ASSERT_TRUE(Make()->Top(TopOptions()).ok());
  EXPECT_THAT(out_.str(), StartsWith("ID "));
  EXPECT_TRUE(sleeps_.empty());
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.lists_.size(), 1u);
}

TEST_F(CommandsTest, TopOnATerminalRedrawsUntilSigint) {
  ListTwoRunningJobs(jobs_);
  auto commands = Make();
  commands->set_terminal(true);
  // The third refresh's pause ends with Ctrl-C.
  int pauses = 0;
  commands->set_sleep([&](absl::Duration d) {
    sleeps_.push_back(d);
    if (++pauses == 25) std::raise(SIGINT);
  });
  TopOptions options;
  options.interval = absl::Seconds(1);
  ASSERT_TRUE(commands->Top(options).ok());
  const std::string out = out_.str();
  // Three frames, each starting with a clear screen and a header.
  EXPECT_THAT(out, StartsWith("\x1b[H\x1b[2Jxlctl top: 2 jobs scheduled or "
                              "running at "));
  size_t frames = 0;
  for (size_t at = out.find("\x1b[H\x1b[2J"); at != std::string::npos;
       at = out.find("\x1b[H\x1b[2J", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 3u) << out;
  EXPECT_THAT(out, HasSubstr("every 1s; Ctrl-C quits"));
  EXPECT_THAT(out, HasSubstr("40/100"));
  // Slept in short slices, so Ctrl-C ends the pause at once.
  EXPECT_EQ(sleeps_.size(), 25u);
  EXPECT_EQ(sleeps_[0], absl::Milliseconds(100));
  {
    absl::MutexLock lock(&jobs_.mu_);
    EXPECT_EQ(jobs_.lists_.size(), 3u);
  }
  // SIGINT is back to what it was (the default) once top returns.
  struct sigaction action = {};
  sigaction(SIGINT, nullptr, &action);
  EXPECT_EQ(action.sa_handler, SIG_DFL);
}

TEST_F(CommandsTest, TopWithAnIntervalIntoAPipeAppendsTables) {
  ListTwoRunningJobs(jobs_);
  auto commands = Make();
  int pauses = 0;
  commands->set_sleep([&](absl::Duration) {
    if (++pauses == 3) std::raise(SIGINT);
  });
  TopOptions options;
  options.interval = absl::Milliseconds(200);
  options.interval_given = true;
  ASSERT_TRUE(commands->Top(options).ok());
  const std::string out = out_.str();
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_THAT(out, StartsWith("xlctl top: 2 jobs"));
  EXPECT_THAT(out, HasSubstr("\n\nxlctl top: 2 jobs"));
}

TEST_F(CommandsTest, TopJsonPrintsTheListOnce) {
  ListTwoRunningJobs(jobs_);
  ASSERT_TRUE(Make(OutputFormat::kJson)->Top(TopOptions()).ok());
  v1::ListJobsResponse response;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &response).ok())
      << out_.str();
  ASSERT_EQ(response.jobs_size(), 2);
  EXPECT_EQ(response.jobs(0).metrics().step(), 40);
  EXPECT_FALSE(response.jobs(1).has_metrics());
}

TEST_F(CommandsTest, TopBadIntervalIsUsageError) {
  TopOptions options;
  options.interval = absl::ZeroDuration();
  EXPECT_EQ(ExitCodeFor(Make()->Top(options)), kExitUsage);
}

TEST_F(CommandsTest, MetricsTableAndJson) {
  SetJob("5", v1::RUNNING);
  {
    absl::MutexLock lock(&jobs_.mu_);
    *jobs_.metrics_.add_points() = Metrics(10, 2.5);
    *jobs_.metrics_.add_points() = Metrics(20, 1.75);
  }
  ASSERT_TRUE(Make()->Metrics("5").ok());
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], StartsWith("TIME                 ATTEMPT  STEP"));
  EXPECT_THAT(
      Words(lines[2]),
      ElementsAre("2023-11-14", "22:13:20", "1", "20/100", "1.7500", "2048.0",
                  "125.00", "20.00", "1.00", "87.50", "3", "GiB"));

  ASSERT_TRUE(Make(OutputFormat::kJson)->Metrics("5").ok());
  v1::GetJobMetricsResponse response;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &response).ok());
  ASSERT_EQ(response.points_size(), 2);
  EXPECT_EQ(response.points(1).step(), 20);
  EXPECT_DOUBLE_EQ(response.points(1).loss(), 1.75);
}

TEST_F(CommandsTest, MetricsAsCsvCarryEveryFieldInFull) {
  SetJob("5", v1::RUNNING);
  {
    absl::MutexLock lock(&jobs_.mu_);
    v1::TrainMetrics m = Metrics(20, 1.0 / 3);
    m.set_mfu(0.625);
    m.set_batch_per_rank(64);
    m.set_accumulation_steps(4);
    m.set_global_batch(2048);
    m.set_precision(v1::BF16);
    m.set_peak_tflops(989);
    *jobs_.metrics_.add_points() = Metrics(10, 2.5);
    *jobs_.metrics_.add_points() = m;
  }
  ASSERT_TRUE(Make(OutputFormat::kCsv)->Metrics("5").ok());
  std::vector<std::string> lines =
      absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_EQ(lines[0],
            "time,attempt,rank,step,total_steps,loss,samples_per_second,"
            "step_seconds,compute_seconds,allreduce_seconds,"
            "data_wait_seconds,allreduce_bus_gbps,mfu,peak_memory_bytes,"
            "batch_per_rank,accumulation_steps,global_batch,precision,"
            "peak_tflops");
  EXPECT_EQ(lines[2],
            "2023-11-14T22:13:20Z,1,0,20,100,0.33333333333333331,2048,0.125,"
            "0.10000000000000001,0.02,0.001,87.5,0.625,3221225472,64,4,2048,"
            "BF16,989");
  EXPECT_TRUE(err_.str().empty()) << err_.str();
}

TEST_F(CommandsTest, MetricsOfAJobWithoutAnySaysSo) {
  SetJob("5", v1::RUNNING);
  ASSERT_TRUE(Make()->Metrics("5").ok());
  EXPECT_THAT(out_.str(), StartsWith("TIME"));
  EXPECT_THAT(err_.str(), HasSubstr("no training metrics"));
  absl::Status status = Make()->Metrics("404");
  EXPECT_EQ(ExitCodeFor(status), kExitNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no job 404"));
}

TEST_F(CommandsTest, GetShowsTheTrainingSection) {
  SetJob("5", v1::RUNNING, /*world_size=*/8);
  {
    absl::MutexLock lock(&jobs_.mu_);
    *jobs_.job_.mutable_metrics() = Metrics(40, 1.25);
  }
  ASSERT_TRUE(Make()->Get("5").ok());
  EXPECT_THAT(out_.str(), HasSubstr("Training:\n  Step:"));
  EXPECT_THAT(out_.str(), HasSubstr("40/100 (40%)"));
  EXPECT_THAT(out_.str(), HasSubstr("87.50 Gbit/s"));
}

TEST_F(CommandsTest, RunTopOnceAndMetricsThroughTheCommandLine) {
  ListTwoRunningJobs(jobs_);
  SetJob("5", v1::RUNNING);
  CommandLine top;
  std::ostringstream out, err;
  ASSERT_EQ(
      top.Parse({"--server", options_.server, "top", "--once", "--queue", "q"},
                out, err),
      std::nullopt);
  EXPECT_EQ(RunInvocation(top.invocation(), out, err), kExitOk) << err.str();
  EXPECT_THAT(out.str(), StartsWith("ID "));
  EXPECT_THAT(out.str(), HasSubstr("40/100"));

  CommandLine metrics;
  std::ostringstream out2, err2;
  ASSERT_EQ(
      metrics.Parse({"--server", options_.server, "metrics", "5", "-o", "yaml"},
                    out2, err2),
      std::nullopt);
  EXPECT_EQ(RunInvocation(metrics.invocation(), out2, err2), kExitOk);

  CommandLine bad;
  std::ostringstream out3, err3;
  ASSERT_EQ(
      bad.Parse({"--server", options_.server, "top", "--interval", "soon"},
                out3, err3),
      std::nullopt);
  EXPECT_EQ(RunInvocation(bad.invocation(), out3, err3), kExitUsage);
  EXPECT_THAT(err3.str(), StartsWith("xlctl: top --interval"));
}

TEST_F(CommandsTest, RunPrintsPrefixedErrorsAndExitCodes) {
  SetJob("5", v1::RUNNING);
  CommandLine command_line;
  std::ostringstream out, err;
  ASSERT_EQ(command_line.Parse(
                {"--server", options_.server, "--user", "zed", "get", "404"},
                out, err),
            std::nullopt);
  EXPECT_EQ(RunInvocation(command_line.invocation(), out, err), kExitNotFound);
  EXPECT_THAT(err.str(), StartsWith("xlctl: job 404: no job 404"));

  CommandLine ok_line;
  std::ostringstream out2, err2;
  ASSERT_EQ(ok_line.Parse({"--server", options_.server, "--user", "zed", "get",
                           "5", "-o", "json"},
                          out2, err2),
            std::nullopt);
  EXPECT_EQ(RunInvocation(ok_line.invocation(), out2, err2), kExitOk);
  v1::Job job;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out2.str(), &job).ok());
  EXPECT_EQ(job.id(), "5");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.users_.back(), "zed");
}

}  // namespace
}  // namespace xl::client
