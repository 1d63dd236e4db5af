// The planner's memory prediction for xl-train's MLP against the real
// xl-train (CPU path, one rank, --rendezvous-dir): its reported
// peak_memory_bytes (the bytes it allocates: XL_METRICS_FD JSON lines) and
// its peak RSS growth, measured as the VmHWM in its "done" line minus the
// VmHWM of the same binary at a tiny shape (the process baseline: code,
// libraries, Gloo, BLAS buffers).
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/planner/planner.h"
#include "xl/v1/job.pb.h"

namespace {

namespace fs = std::filesystem;

struct TrainRun {
  uint64_t peak_memory_bytes = 0;  // from the metrics
  double peak_rss_bytes = 0;       // from the "done" line (VmHWM)
  long ru_maxrss_kib = 0;          // wait4's, for the log
  int exit_code = -1;
};

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) s.append(buf, n);
  ::close(fd);
  return s;
}

// "190.7 MiB" -> bytes.
double ParseHumanBytes(absl::string_view text) {
  std::vector<std::string> parts = absl::StrSplit(text, ' ');
  double v = 0;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &v)) return 0;
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  for (int i = 0; i < 5; ++i) {
    if (parts[1] == units[i]) return v * std::pow(1024.0, i);
  }
  return 0;
}

TrainRun RunXlTrain(const std::string& spec_json, const fs::path& rdv) {
  int metrics[2], out[2];
  EXPECT_EQ(::pipe(metrics), 0);
  EXPECT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(metrics[0]);
    ::close(out[0]);
    ::dup2(metrics[1], 9);
    ::dup2(out[1], 1);
    std::vector<std::string> args = {XL_TRAIN_BINARY, "--spec-json", spec_json,
                                     "--rendezvous-dir", rdv.string()};
    std::vector<std::string> env = {"XL_METRICS_FD=9", "RANK=0", "WORLD_SIZE=1",
                                    "OPENBLAS_NUM_THREADS=1",
                                    "OMP_NUM_THREADS=1"};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    ::execve(XL_TRAIN_BINARY, argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(metrics[1]);
  ::close(out[1]);
  // xl-train writes little; read stdout first, then the metrics pipe.
  const std::string stdout_text = ReadAll(out[0]);
  const std::string metrics_text = ReadAll(metrics[0]);
  TrainRun run;
  int status = 0;
  struct rusage usage = {};
  ::wait4(pid, &status, 0, &usage);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.ru_maxrss_kib = usage.ru_maxrss;
  for (absl::string_view line : absl::StrSplit(metrics_text, '\n')) {
    if (line.empty()) continue;
    xl::v1::TrainMetrics m;
    auto st =
        google::protobuf::util::JsonStringToMessage(std::string(line), &m);
    EXPECT_TRUE(st.ok()) << line;
    run.peak_memory_bytes =
        std::max(run.peak_memory_bytes, m.peak_memory_bytes());
  }
  const std::string marker = "peak RSS ";
  const size_t at = stdout_text.rfind(marker);
  EXPECT_NE(at, std::string::npos) << stdout_text;
  if (at != std::string::npos) {
    std::string rest = stdout_text.substr(at + marker.size());
    rest = rest.substr(0, rest.find('\n'));
    run.peak_rss_bytes = ParseHumanBytes(rest);
  }
  return run;
}

struct Shape {
  int input, hidden, layers, classes, batch;
};

std::string SpecJson(const Shape& s) {
  return absl::StrCat("{\"inputDim\": ", s.input, ", \"hiddenDim\": ", s.hidden,
                      ", \"hiddenLayers\": ", s.layers,
                      ", \"classes\": ", s.classes,
                      ", \"batchPerRank\": ", s.batch,
                      ", \"steps\": 2, \"metricsEvery\": 1, \"device\": "
                      "\"cpu\"}");
}

xl::v1::Plan PlanFor(const Shape& s) {
  xl::v1::ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(s.input);
  spec.mutable_mlp()->set_hidden_dim(s.hidden);
  spec.mutable_mlp()->set_hidden_layers(s.layers);
  spec.mutable_mlp()->set_classes(s.classes);
  spec.set_micro_batch_size(s.batch);
  spec.set_gpu_model(xl::planner::kCpuDevice);
  absl::StatusOr<xl::v1::Plan> plan = xl::planner::MakePlan(spec, {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : xl::v1::Plan();
}

class PlannerMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat(
               "xl-planner-memory-", ::getpid(), "-",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainRun RunShape(const Shape& s, const std::string& tag) {
    fs::path rdv = dir_ / tag;
    fs::create_directories(rdv);
    TrainRun r = RunXlTrain(SpecJson(s), rdv);
    EXPECT_EQ(r.exit_code, 0) << tag;
    return r;
  }

  fs::path dir_;
};

TEST_F(PlannerMemoryTest, PredictionMatchesXlTrainWithinTenPercent) {
  const Shape tiny = {8, 8, 1, 2, 1};
  const TrainRun base = RunShape(tiny, "tiny");
  ASSERT_GT(base.peak_rss_bytes, 0);
  std::printf("baseline (tiny shape): peak RSS %.1f MiB (ru_maxrss %.1f MiB)\n",
              base.peak_rss_bytes / 1048576.0, base.ru_maxrss_kib / 1024.0);

  const std::vector<Shape> shapes = {
      {512, 1024, 2, 16, 64},    // 1.6M params, ~27 MB
      {1024, 2048, 2, 32, 256},  // 6.4M params, ~110 MB
      {1024, 2048, 4, 32, 128},  // 14.7M params, ~255 MB
  };
  int i = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(SpecJson(s));
    const xl::v1::Plan plan = PlanFor(s);
    const double predicted =
        static_cast<double>(plan.memory_per_gpu().total_bytes());
    const TrainRun run = RunShape(s, absl::StrCat("shape", i++));
    const double measured = run.peak_rss_bytes - base.peak_rss_bytes;
    std::printf(
        "MLP %d->%dx%d->%d batch %d: params %.0f, predicted %.0f B (%.1f "
        "MiB), xl-train peak_memory_bytes %llu, peak RSS %.1f MiB - "
        "baseline = %.1f MiB (%+.1f%%)\n",
        s.input, s.hidden, s.layers, s.classes, s.batch, plan.parameters(),
        predicted, predicted / 1048576.0,
        static_cast<unsigned long long>(run.peak_memory_bytes),
        run.peak_rss_bytes / 1048576.0, measured / 1048576.0,
        100 * (predicted - measured) / measured);
    // The allocated bytes xl-train reports are exactly what the planner
    // counts, buffer by buffer.
    EXPECT_EQ(run.peak_memory_bytes, plan.memory_per_gpu().total_bytes());
    EXPECT_NEAR(predicted, measured, 0.10 * measured);
  }
}

}  // namespace
