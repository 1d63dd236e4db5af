// xl-train: the built-in data-parallel training worker. Reads its TrainSpec
// and the rank environment, meets its peers (scheduler rendezvous, or a
// shared directory without a scheduler), and trains on CPU (Gloo) or CUDA
// (NCCL). Exit codes: 0 done, 143 stopped by SIGTERM after a checkpoint,
// 2 usage/config errors, 1 other failures. Single-threaded main.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/worker/comm/file_rendezvous.h"
#include "agent/worker/comm/gloo_collective.h"
#include "agent/worker/comm/rendezvous.h"
#include "agent/worker/data/data_shards.h"
#include "agent/worker/loop/metrics.h"
#include "agent/worker/loop/tensorboard.h"
#include "agent/worker/loop/train_config.h"
#include "agent/worker/loop/trainer.h"
#include "common/proto_text.h"
#ifdef XL_HAVE_CUDA
#include "agent/worker/cuda/cuda_trainer.h"
#endif

namespace xl::worker {
namespace {

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

int EnvInt(const char* name, int fallback) {
  int v;
  std::string s = Env(name);
  return !s.empty() && absl::SimpleAtoi(s, &v) ? v : fallback;
}

std::string Hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

int Fail(int rank, const std::string& msg, int code = 1) {
  std::cerr << "xl-train[rank " << rank << "@" << Hostname() << "]: " << msg
            << std::endl;
  return code;
}

bool NodeHasGpus() {
  std::string v = Env("CUDA_VISIBLE_DEVICES", "-");
  // Unset: assume the agent would have set it had it given us GPUs.
  return !(v == "-" || v.empty() || v == "-1" || v == "none" ||
           v == "NoDevFiles");
}

int Main(int argc, char** argv) {
  CLI::App app{
      "xl-train: xl's data-parallel training worker (an MLP classifier with "
      "AdamW; gradients all-reduced over Gloo on CPU or NCCL on CUDA).\n"
      "Environment: RANK, WORLD_SIZE (default 0 and 1), XL_JOB_ID, "
      "XL_ATTEMPT, XL_SCHEDULER + XL_RENDEZVOUS_TOKEN (rendezvous through the "
      "scheduler), XL_CHECKPOINT_DIR, XL_TENSORBOARD_DIR, XL_METRICS_FD (JSON "
      "metrics lines), "
      "XL_NODE_ADDRESS or MASTER_ADDR (the address peers reach this rank "
      "at), CUDA_VISIBLE_DEVICES.\n"
      "Exit: 0 done, 143 stopped by SIGTERM after writing a checkpoint, 2 "
      "bad usage or spec, 1 other errors."};
  std::string spec_json, spec_file, rdv_dir, ckpt_dir, shards_dir, tb_dir;
  uint64_t shard_count = 0, shard_per_file = 1 << 16;
  app.add_option("--spec-json", spec_json,
                 "the TrainSpec as JSON (protobuf JSON mapping), e.g. "
                 "'{\"hiddenDim\": 256, \"steps\": 50, \"device\": \"cpu\"}'");
  app.add_option("--spec", spec_file, "a YAML or JSON file holding a TrainSpec")
      ->check(CLI::ExistingFile);
  app.add_option(
      "--rendezvous-dir", rdv_dir,
      "without XL_SCHEDULER: a directory shared by all ranks to meet "
      "through (use a fresh one per run)");
  app.add_option("--checkpoint-dir", ckpt_dir,
                 "where rank 0 writes ckpt-<step>.xlc and resumes from "
                 "(default: XL_CHECKPOINT_DIR; none: no checkpoints)");
  app.add_option("--tensorboard-dir", tb_dir,
                 "where rank 0 writes TensorBoard event files (default: "
                 "XL_TENSORBOARD_DIR, else <checkpoint dir>/tensorboard; "
                 "\"none\": none)");
  app.add_option("--write-shards", shards_dir,
                 "write --count samples of the spec's synthetic teacher data "
                 "as shard files into this directory, then exit");
  app.add_option("--count", shard_count, "samples for --write-shards");
  app.add_option("--per-file", shard_per_file,
                 "samples per shard file for --write-shards (default 65536)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  const int rank = EnvInt("RANK", 0);
  const int world = EnvInt("WORLD_SIZE", 1);
  v1::TrainSpec spec;
  if (!spec_json.empty() && !spec_file.empty()) {
    return Fail(rank, "give --spec-json or --spec, not both", 2);
  }
  if (!spec_json.empty()) {
    absl::Status st = ParseYamlToMessage(spec_json, "--spec-json", &spec);
    if (!st.ok()) return Fail(rank, std::string(st.message()), 2);
  } else if (!spec_file.empty()) {
    absl::Status st = ReadYamlFileToMessage(spec_file, &spec);
    if (!st.ok()) return Fail(rank, std::string(st.message()), 2);
  }
  auto config = ResolveTrainSpec(spec, NodeHasGpus());
  if (!config.ok())
    return Fail(rank, std::string(config.status().message()), 2);

  if (!shards_dir.empty()) {
    if (shard_count == 0)
      return Fail(rank, "--write-shards needs --count N", 2);
    auto paths =
        WriteSyntheticShards(shards_dir, *config, shard_count, shard_per_file);
    if (!paths.ok()) return Fail(rank, std::string(paths.status().message()));
    std::printf("xl-train: wrote %llu samples in %zu shard(s) to %s\n",
                static_cast<unsigned long long>(shard_count), paths->size(),
                shards_dir.c_str());
    return 0;
  }

  if (world < 1 || rank < 0 || rank >= world) {
    return Fail(rank,
                absl::StrCat("RANK ", rank, " / WORLD_SIZE ", world,
                             " is not a valid rank"),
                2);
  }
  RankInfo info;
  info.rank = rank;
  info.world = world;
  info.job_id = Env("XL_JOB_ID", "local");
  info.attempt = EnvInt("XL_ATTEMPT", 0);
  if (ckpt_dir.empty()) ckpt_dir = Env("XL_CHECKPOINT_DIR");
  if (ckpt_dir.empty() && config->checkpoint_every > 0 && rank == 0) {
    std::cerr << "xl-train: warning: train.checkpoint_every is set but there "
                 "is no --checkpoint-dir or XL_CHECKPOINT_DIR; not saving\n";
  }

  std::unique_ptr<Rendezvous> rdv;
  const std::string scheduler = Env("XL_SCHEDULER");
  if (!scheduler.empty()) {
    rdv = NewSchedulerRendezvous(scheduler, info.job_id, info.attempt,
                                 Env("XL_RENDEZVOUS_TOKEN"));
  } else if (!rdv_dir.empty()) {
    rdv = std::make_unique<FileRendezvous>(
        rdv_dir, absl::StrCat(info.job_id, "-", info.attempt));
  } else if (world == 1) {
    rdv = std::make_unique<InMemoryRendezvous>();
  } else {
    return Fail(rank, "WORLD_SIZE > 1 needs XL_SCHEDULER or --rendezvous-dir",
                2);
  }

  InstallSigtermHandler();
  FdMetricsSink fd_sink = FdMetricsSink::FromEnv();
  // Rank 0 reports; its curves also go to TensorBoard.
  if (tb_dir.empty()) tb_dir = Env("XL_TENSORBOARD_DIR");
  if (tb_dir.empty() && !ckpt_dir.empty()) tb_dir = ckpt_dir + "/tensorboard";
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (rank == 0 && !tb_dir.empty() && tb_dir != "none") {
    auto opened = TensorBoardWriter::Open(tb_dir);
    if (opened.ok()) {
      tensorboard = *std::move(opened);
    } else {
      std::cerr << "xl-train: warning: " << opened.status().message()
                << "; no TensorBoard events\n";
    }
  }
  TensorBoardSink sink(std::move(tensorboard), config->learning_rate,
                       &fd_sink);
  absl::Status st;
  if (config->device == "cuda") {
#ifdef XL_HAVE_CUDA
    st = RunCudaTraining(*config, info, rdv.get(), &sink, ckpt_dir);
#else
    std::cerr << "xl-train: built without CUDA; set train.device: cpu\n";
    return 2;
#endif
  } else {
    GlooOptions gloo;
    if (config->collective_timeout > absl::ZeroDuration()) {
      gloo.timeout = config->collective_timeout;
    }
    auto coll = GlooCollective::Create(rank, world, rdv.get(), gloo);
    if (!coll.ok()) return Fail(rank, std::string(coll.status().message()));
    TrainOptions options;
    options.stop = SigtermFlag();
    st = RunTraining(*config, info, coll->get(), &sink, ckpt_dir, options);
  }
  if (st.code() == absl::StatusCode::kCancelled) {
    std::cerr << "xl-train[rank " << rank << "]: " << st.message() << "\n";
    return 143;
  }
  if (!st.ok()) return Fail(rank, std::string(st.message()));
  return 0;
}

}  // namespace
}  // namespace xl::worker

int main(int argc, char** argv) { return xl::worker::Main(argc, argv); }
