// Tests of `xlctl plan`: the flags (counts with suffixes, errors that name
// the flag, exit 2), the offline plan rendered for people, and the online
// path against a fake JobService whose PlanResources calls the planner with a
// fleet (real gRPC on 127.0.0.1:0), plus the fallback when the scheduler is
// unreachable.
#include "client/plan_command.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/exit_code.h"
#include "common/planner/planner.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int code = -1;
  std::string out, err;
};

// Parses and runs an xlctl command line as main() does.
Result Xlctl(std::vector<std::string> args) {
  CommandLine command_line;
  std::ostringstream out, err;
  Result r;
  if (std::optional<int> code = command_line.Parse(std::move(args), out, err)) {
    r.code = *code;
  } else {
    r.code = RunInvocation(command_line.invocation(), out, err);
  }
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(PlanCountTest, AcceptsSuffixes) {
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "7.5e9"), 7.5e9);
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "7.5B"), 7.5e9);
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "70B"), 70e9);
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "2T"), 2e12);
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "1.5M"), 1.5e6);
  EXPECT_DOUBLE_EQ(*ParseCount("--params", "512k"), 512e3);
  EXPECT_DOUBLE_EQ(*ParseCount("--seq", "4096"), 4096);
  absl::StatusOr<double> bad = ParseCount("--params", "7.5Q");
  EXPECT_EQ(ExitCodeFor(bad.status()), kExitUsage);
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith("--params: \"7.5Q\""));
  EXPECT_FALSE(ParseCount("--params", "-3").ok());
  EXPECT_FALSE(ParseCount("--params", "").ok());
}

TEST(PlanFlagsTest, FlagsBecomeTheModelSpec) {
  CommandLine command_line;
  std::ostringstream out, err;
  ASSERT_EQ(command_line.Parse({"plan",
                                "--layers",
                                "32",
                                "--hidden",
                                "4096",
                                "--heads",
                                "32",
                                "--vocab",
                                "32K",
                                "--seq",
                                "4096",
                                "--precision",
                                "fp16",
                                "--optimizer",
                                "sgd",
                                "--fsdp",
                                "--tp",
                                "2",
                                "--pp",
                                "2",
                                "--micro-batch",
                                "4",
                                "--global-batch",
                                "1024",
                                "--recompute",
                                "selective",
                                "--sequence-parallel",
                                "--dataset-tokens",
                                "2T",
                                "--dataset-bytes",
                                "4T",
                                "--gpu",
                                "H100-80GB",
                                "--mfu",
                                "0.5",
                                "--gpus",
                                "64",
                                "--gpus-per-node",
                                "4",
                                "--checkpoints",
                                "3",
                                "--comm-share",
                                "0.2",
                                "--offline"},
                               out, err),
            std::nullopt)
      << err.str();
  const Invocation& inv = command_line.invocation();
  EXPECT_EQ(inv.command, "plan");
  absl::StatusOr<PlanOptions> options = BuildPlanOptions(inv.plan);
  ASSERT_TRUE(options.ok()) << options.status();
  const v1::ModelSpec& m = options->model;
  EXPECT_TRUE(options->offline);
  EXPECT_EQ(m.transformer().layers(), 32);
  EXPECT_EQ(m.transformer().vocab_size(), 32000);
  EXPECT_EQ(m.transformer().sequence_length(), 4096);
  EXPECT_EQ(m.precision(), v1::FP16);
  EXPECT_EQ(m.optimizer(), v1::SGD_MOMENTUM);
  EXPECT_EQ(m.sharding(), v1::ZERO_3);
  EXPECT_EQ(m.tensor_parallel(), 2);
  EXPECT_EQ(m.pipeline_parallel(), 2);
  EXPECT_EQ(m.micro_batch_size(), 4);
  EXPECT_EQ(m.global_batch_size(), 1024);
  EXPECT_EQ(m.recompute(), v1::SELECTIVE);
  EXPECT_TRUE(m.sequence_parallel());
  EXPECT_DOUBLE_EQ(m.dataset_tokens(), 2e12);
  EXPECT_DOUBLE_EQ(m.dataset_bytes(), 4e12);
  EXPECT_EQ(m.gpu_model(), "H100-80GB");
  EXPECT_DOUBLE_EQ(m.mfu(), 0.5);
  EXPECT_EQ(m.gpus(), 64);
  EXPECT_EQ(m.gpus_per_node(), 4);
  EXPECT_EQ(m.checkpoints_kept(), 3);
  EXPECT_DOUBLE_EQ(m.comm_share(), 0.2);
  // Flags not given stay unset: the planner's defaults apply.
  absl::StatusOr<PlanOptions> bare = BuildPlanOptions([] {
    PlanFlags f;
    f.counts["--params"] = "1B";
    return f;
  }());
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->model.has_transformer());
  EXPECT_EQ(bare->model.sharding(), v1::SHARDING_UNSPECIFIED);
  EXPECT_EQ(bare->model.mfu(), 0);
}

TEST(PlanFlagsTest, BadFlagsExitTwoNamingTheFlag) {
  Result r = Xlctl({"plan", "--params", "7.5Q", "--offline"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--params: \"7.5Q\" is not a count"));

  r = Xlctl({"plan", "--params", "1B", "--zero", "5"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--zero"));

  r = Xlctl({"plan", "--params", "1B", "--zero", "1", "--fsdp"});
  EXPECT_EQ(r.code, kExitUsage);

  r = Xlctl({"plan", "--layers", "2", "--hidden", "10", "--heads", "3",
             "--vocab", "5", "--seq", "4", "--offline"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err,
              HasSubstr("--heads: must divide hidden_size 10 (3 does not) "
                        "(model.transformer.heads)"));

  r = Xlctl({"plan", "--params", "1B", "--mfu", "2", "--offline"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--mfu"));

  r = Xlctl({"plan", "--offline"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("give the model: --params N"));

  r = Xlctl({"plan", "--params", "1B", "--gpu", "B300", "--offline"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--gpu: unknown GPU \"B300\""));
}

TEST(PlanOfflineTest, ModelStatesOf7_5BAre120GB) {
  Result r = Xlctl({"plan", "--params", "7.5e9", "--precision", "bf16",
                    "--optimizer", "adamw", "--offline"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Model states:  120.0 GB in all (16 bytes per "
                               "parameter)"));
  EXPECT_THAT(r.out,
              HasSubstr("model states = 16 B/param x 7.5e9 params = 120.0 GB"));
  EXPECT_THAT(r.out, HasSubstr("Memory per GPU:"));
  EXPECT_THAT(r.out, HasSubstr("Arithmetic"));
  EXPECT_EQ(r.err, "");  // --offline: nothing to say about the scheduler
}

TEST(PlanOfflineTest, Zero3On64GpusIsAbout1_9GBPerGpu) {
  Result r = Xlctl({"plan", "--params", "7.5B", "--zero", "3", "--gpus", "64",
                    "--gpu", "A100-80GB", "--offline"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("120.0 GB in all (16 bytes per parameter), "
                               "1.9 GB per GPU"));
  EXPECT_THAT(r.out, HasSubstr("64 = data-parallel 64 x tensor 1 x pipeline "
                               "1, on 8 nodes of 8 GPUs"));
}

// A V100 is still planned (for a program of one's own), and its row says
// that xl-train cannot run there and why.
TEST(PlanOfflineTest, SaysXlTrainCannotRunOnAV100) {
  Result r = Xlctl({"plan", "--params", "1e9", "--precision", "fp16", "--gpu",
                    "V100", "--offline"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Memory per GPU:"));
  EXPECT_THAT(r.out, HasSubstr("V100-32GB  32.0 GiB           125  yes"));
  EXPECT_THAT(r.out,
              HasSubstr("xl-train cannot run on it: compute capability 7.0 "
                        "(Volta): CUDA 13, which xl-train is built with, "
                        "dropped Volta and older GPUs (7.2 and below)"));
  Result a100 =
      Xlctl({"plan", "--params", "1e9", "--gpu", "A100-80GB", "--offline"});
  ASSERT_EQ(a100.code, 0) << a100.err;
  EXPECT_THAT(a100.out, Not(HasSubstr("xl-train cannot run")));
}

TEST(PlanOfflineTest, JsonPrintsThePlanMessage) {
  Result r = Xlctl({"plan", "--params", "7.5B", "--zero", "3", "--gpus", "64",
                    "--offline", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  v1::Plan plan;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &plan).ok())
      << r.out;
  EXPECT_EQ(plan.gpus(), 64);
  EXPECT_EQ(plan.memory_per_gpu().optimizer_bytes(), 937'500'000u);
  EXPECT_GT(plan.arithmetic_size(), 5);
}

TEST(PlanOfflineTest, UnreachableSchedulerFallsBackAndSaysSo) {
  Result r = Xlctl({"--server", "127.0.0.1:1", "--timeout", "2s", "plan",
                    "--params", "7.5B"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("planning offline with the built-in GPU "
                               "catalogue"));
  EXPECT_THAT(r.out, HasSubstr("120.0 GB in all"));
}

// PlanResources as the scheduler answers it: the planner over a fleet.
class FakePlanService final : public v1::JobService::Service {
 public:
  grpc::Status PlanResources(grpc::ServerContext*,
                             const v1::PlanResourcesRequest* request,
                             v1::Plan* plan) override {
    absl::StatusOr<v1::Plan> p = planner::MakePlan(
        request->model(), {{"NVIDIA H100 80GB HBM3", 81559ull << 20, 16, 8},
                           {"NVIDIA A100-SXM4-40GB", 40ull << 30, 32, 8}});
    if (!p.ok()) return ToGrpcStatus(p.status());
    *plan = *p;
    return grpc::Status::OK;
  }
};

class PlanOnlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.server = absl::StrCat("127.0.0.1:", port_);
    options_.timeout = absl::Seconds(10);
    connection_ = std::make_unique<SchedulerConnection>(
        options_, grpc::CreateChannel(options_.server,
                                      grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  FakePlanService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ConnectionOptions options_;
  std::unique_ptr<SchedulerConnection> connection_;
  std::ostringstream out_, err_;
};

TEST_F(PlanOnlineTest, PlansAgainstTheLiveFleet) {
  Commands commands(connection_.get(), OutputFormat::kTable, &out_, &err_);
  PlanOptions options;
  options.model.set_parameters(7.5e9);
  options.model.set_sharding(v1::ZERO_3);
  options.model.set_gpus(64);
  ASSERT_TRUE(commands.Plan(options).ok());
  EXPECT_EQ(err_.str(), "");
  EXPECT_THAT(out_.str(), HasSubstr("GPUs from the live fleet of 127.0.0.1:"));
  EXPECT_THAT(out_.str(), HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(out_.str(), HasSubstr("needs 64 GPUs but the fleet has"));
}

TEST_F(PlanOnlineTest, ServerValidationErrorIsExitTwo) {
  // The scheduler's INVALID_ARGUMENT (a spec this client did not check).
  Commands commands(connection_.get(), OutputFormat::kTable, &out_, &err_);
  PlanOptions options;
  options.model.set_parameters(1e9);
  options.model.set_mfu(3);
  absl::Status st = commands.Plan(options);
  EXPECT_EQ(ExitCodeFor(st), kExitUsage);
  EXPECT_THAT(std::string(st.message()), HasSubstr("mfu"));
}

}  // namespace
}  // namespace xl::client
