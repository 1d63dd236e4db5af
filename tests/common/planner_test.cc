// Tests of the capacity planner against published figures (the ZeRO paper's
// Figure 1, Megatron's activation formulas, GPT-3's parameter count) and
// hand-computed arithmetic, plus validation and the fitting rules.
#include "common/planner/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/planner/gpu_catalogue.h"
#include "common/planner/xl_train_gpus.h"

namespace xl::planner {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kGB = 1e9;

v1::TransformerShape Gpt3Shape() {
  v1::TransformerShape t;
  t.set_layers(96);
  t.set_hidden_size(12288);
  t.set_heads(96);
  t.set_vocab_size(50257);
  t.set_sequence_length(2048);
  return t;
}

// ZeRO (Rajbhandari et al. 2020), section 3 and Figure 1: Ψ = 7.5B, mixed
// precision Adam, K = 12, Nd = 64.
TEST(PlannerZeroPaper, MixedAdamIsSixteenBytesPerParameter) {
  v1::MemoryBreakdown m =
      ModelStateBytes(7.5e9, v1::BF16, v1::ADAMW, v1::NO_SHARDING, 1, 1, 64);
  EXPECT_EQ(m.weights_bytes(), 15'000'000'000u);
  EXPECT_EQ(m.gradients_bytes(), 15'000'000'000u);
  EXPECT_EQ(m.master_weights_bytes(), 30'000'000'000u);  // fp32 copy 4Ψ
  EXPECT_EQ(m.optimizer_bytes(), 60'000'000'000u);       // m + v = 8Ψ
  EXPECT_EQ(m.total_bytes(), 120'000'000'000u);          // 16Ψ = 120 GB
}

TEST(PlannerZeroPaper, Figure1PerDeviceMemoryOn64Gpus) {
  auto total = [](v1::Sharding s) {
    return ModelStateBytes(7.5e9, v1::BF16, v1::ADAMW, s, 1, 1, 64)
               .total_bytes() /
           kGB;
  };
  EXPECT_NEAR(total(v1::NO_SHARDING), 120.0, 0.05);
  EXPECT_NEAR(total(v1::ZERO_1), 31.4, 0.05);  // 4Ψ + 12Ψ/Nd
  EXPECT_NEAR(total(v1::ZERO_2), 16.6, 0.05);  // 2Ψ + 14Ψ/Nd
  EXPECT_NEAR(total(v1::ZERO_3), 1.9, 0.05);   // 16Ψ/Nd
}

TEST(PlannerZeroPaper, PlanShowsTheArithmetic) {
  v1::ModelSpec spec;
  spec.set_parameters(7.5e9);
  spec.set_sharding(v1::ZERO_3);
  spec.set_gpus(64);
  spec.set_gpu_model("H100-80GB");
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->arithmetic(),
              Contains(HasSubstr(
                  "model states = 16 B/param x 7.5e9 params = 120.0 GB")));
  const v1::MemoryBreakdown& m = plan->memory_per_gpu();
  EXPECT_EQ(m.weights_bytes() + m.gradients_bytes() + m.optimizer_bytes() +
                m.master_weights_bytes(),
            1'875'000'000u);
  EXPECT_EQ(m.total_bytes(), m.weights_bytes() + m.gradients_bytes() +
                                 m.optimizer_bytes() +
                                 m.master_weights_bytes() +
                                 m.activations_bytes() + m.workspace_bytes());
  EXPECT_EQ(plan->gpus(), 64);
  EXPECT_EQ(plan->data_parallel(), 64);
  EXPECT_EQ(plan->nodes(), 8);
}

TEST(PlannerStates, TensorAndPipelineDivideBeforeZero) {
  // 16Ψ / (t·p) with t = 8, p = 2, then ZeRO-1 over 4.
  v1::MemoryBreakdown m =
      ModelStateBytes(16e9, v1::BF16, v1::ADAMW, v1::ZERO_1, 8, 2, 4);
  EXPECT_EQ(m.weights_bytes(), 2'000'000'000u);         // 2Ψ/16
  EXPECT_EQ(m.gradients_bytes(), 2'000'000'000u);       // 2Ψ/16
  EXPECT_EQ(m.optimizer_bytes(), 2'000'000'000u);       // 8Ψ/16/4
  EXPECT_EQ(m.master_weights_bytes(), 1'000'000'000u);  // 4Ψ/16/4
}

TEST(PlannerStates, OtherPrecisionsAndOptimizers) {
  EXPECT_EQ(ModelStateBytes(1e9, v1::FP32, v1::ADAMW, v1::NO_SHARDING, 1, 1, 1)
                .total_bytes(),
            16'000'000'000u);  // 4 + 4 + 8
  EXPECT_EQ(
      ModelStateBytes(1e9, v1::FP32, v1::SGD_MOMENTUM, v1::NO_SHARDING, 1, 1, 1)
          .total_bytes(),
      12'000'000'000u);  // 4 + 4 + 4
  EXPECT_EQ(
      ModelStateBytes(1e9, v1::FP16, v1::SGD_MOMENTUM, v1::NO_SHARDING, 1, 1, 1)
          .total_bytes(),
      12'000'000'000u);  // 2 + 2 + master 4 + momentum 4
  // Adafactor, square 4096² matrices: 4Ψ·2/4096 of second moment.
  v1::MemoryBreakdown a = ModelStateBytes(
      4096.0 * 4096, v1::BF16, v1::ADAFACTOR, v1::NO_SHARDING, 1, 1, 1);
  EXPECT_EQ(a.optimizer_bytes(), 4u * 2 * 4096);
  EXPECT_EQ(a.master_weights_bytes(), 4u * 4096 * 4096);
}

// Korthikanti et al. 2022, GPT-3 175B shape, t = 8: sbh = 2048·12288.
TEST(PlannerMegatron, ActivationFormulasForGpt3) {
  const v1::TransformerShape t = Gpt3Shape();
  const double sbh = 2048.0 * 12288;
  // 5as/(ht) = 5·96·2048 / (12288·8) = 10, so 10 + 24/8 + 10 = 23.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 8, false, v1::NO_RECOMPUTE),
                   23 * sbh);
  EXPECT_DOUBLE_EQ(23 * sbh, 578'813'952.0);
  // Sequence parallel: sbh/t·(34 + 5as/h) = sbh/8·(34 + 80).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 8, true, v1::NO_RECOMPUTE),
                   sbh / 8 * 114);
  EXPECT_DOUBLE_EQ(sbh / 8 * 114, 358'612'992.0);
  // Selective recompute with SP: sbh·34/t.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 8, true, v1::SELECTIVE),
                   106'954'752.0);
  // Selective without SP: sbh·(10 + 24/t).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 8, false, v1::SELECTIVE),
                   13 * sbh);
  // No parallelism: sbh·(34 + 5as/h); full recompute: 2sbh.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 1, false, v1::NO_RECOMPUTE),
                   114 * sbh);
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 1, 1, false, v1::FULL), 2 * sbh);
  // Linear in the micro-batch.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(t, 4, 8, false, v1::NO_RECOMPUTE),
                   4 * 23 * sbh);
}

TEST(PlannerMegatron, PlanActivationsAreLayersTimesPerLayerPlusLogits) {
  v1::ModelSpec spec;
  *spec.mutable_transformer() = Gpt3Shape();
  spec.set_tensor_parallel(8);
  spec.set_pipeline_parallel(8);
  spec.set_sharding(v1::ZERO_1);
  spec.set_gpu_model("H100-80GB");
  spec.set_recompute(v1::SELECTIVE);
  spec.set_sequence_parallel(true);
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const double expected = 96 * 106'954'752.0 + 4.0 * 2048 * 50257 / 8;
  EXPECT_EQ(plan->memory_per_gpu().activations_bytes(),
            static_cast<uint64_t>(std::llround(expected)));
}

TEST(PlannerParameters, Gpt3Is175B) {
  const double p = TransformerParameters(Gpt3Shape());
  EXPECT_NEAR(p / 174.6e9, 1.0, 0.01);
  // 12·L·h² + V·h is the bulk; the rest is biases, norms, positions.
  const double bulk = 12.0 * 96 * 12288 * 12288 + 50257.0 * 12288;
  EXPECT_GT(p, bulk);
  EXPECT_LT(p - bulk, 0.001 * p);
}

TEST(PlannerParameters, FfnGeneralises) {
  v1::TransformerShape t;
  t.set_layers(2);
  t.set_hidden_size(8);
  t.set_heads(2);
  t.set_vocab_size(10);
  t.set_sequence_length(4);
  t.set_ffn_hidden_size(20);
  // per layer 4h² + 2hf + 9h + f = 256 + 320 + 72 + 20 = 668.
  EXPECT_DOUBLE_EQ(TransformerParameters(t), 2 * 668 + 80 + 32 + 16);
  t.set_ffn_hidden_size(0);  // 4h = 32: 12h² + 13h = 768 + 104 = 872
  EXPECT_DOUBLE_EQ(TransformerParameters(t), 2 * 872 + 80 + 32 + 16);
}

TEST(PlannerMlp, ParametersExact) {
  v1::MlpShape s;
  s.set_input_dim(256);
  s.set_hidden_dim(1024);
  s.set_hidden_layers(2);
  s.set_classes(16);
  EXPECT_EQ(MlpParameters(s),
            256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 16 + 16);
  s.set_hidden_layers(0);  // logistic regression
  EXPECT_EQ(MlpParameters(s), 256 * 16 + 16);
}

TEST(PlannerMlp, CpuMemoryIsXlTrainsBuffers) {
  v1::MlpShape s;
  s.set_input_dim(256);
  s.set_hidden_dim(1024);
  s.set_hidden_layers(2);
  s.set_classes(16);
  const uint64_t p = static_cast<uint64_t>(MlpParameters(s));
  v1::MemoryBreakdown m = MlpMemory(s, 64, v1::FP32, /*cpu=*/true);
  EXPECT_EQ(m.weights_bytes(), 4 * p);
  EXPECT_EQ(m.gradients_bytes(), 4 * p);
  EXPECT_EQ(m.optimizer_bytes(), 9 * p);  // m, v, 1-byte decay mask
  // acts (256 + 1024 + 1024) + logits 16 + dlogits 16 + 2 x widest 1024 +
  // two batches' x 2 x 256, floats per sample; two labels of 4 B per sample
  // (the batch in use and the next, made ahead).
  EXPECT_EQ(m.activations_bytes(),
            64u * 4 * (256 + 1024 + 1024 + 16 + 16 + 2 * 1024 + 2 * 256) +
                64 * 8);
  EXPECT_EQ(m.total_bytes(), 17 * p + m.activations_bytes());
}

TEST(PlannerTime, StepTimeArithmetic) {
  v1::ModelSpec spec;
  spec.set_parameters(7.5e9);
  spec.mutable_transformer()->set_sequence_length(2048);
  spec.set_sharding(v1::ZERO_3);
  spec.set_gpus(64);
  spec.set_global_batch_size(512);
  spec.set_gpu_model("H100-80GB");
  spec.set_dataset_tokens(1e12);
  spec.set_dataset_bytes(2e12);
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 6Ψ x 512·2048 tokens / (64 x 989e12 x 0.4)
  const double step = 6 * 7.5e9 * 512 * 2048 / (64 * 989e12 * 0.4);
  EXPECT_NEAR(plan->step_seconds(), step, 1e-9 * step);
  EXPECT_NEAR(plan->tokens_per_second(), 512 * 2048 / step, 1e-6);
  EXPECT_NEAR(plan->train_seconds(), 1e12 / (512 * 2048 / step), 1e-3);
  // 2 bytes/token x 2048 tokens x 512 samples / 8 nodes / step.
  EXPECT_NEAR(plan->read_bytes_per_second_per_node(),
              2.0 * 2048 * 512 / 8 / step, 1e-3);
  // ZeRO-3: 3(Nd-1)/Nd x 2Ψ per GPU; t·p = 1: one data-parallel group,
  // whose node-ordered rings cross each node's NICs once.
  EXPECT_EQ(plan->allreduce_bytes_per_step(), 15'000'000'000u);
  const double nic = 3.0 * 63 / 64 * 15e9 * 8 / (0.25 * step) / 1e9;
  EXPECT_NEAR(plan->nic_gbps_needed(), nic, 1e-6 * nic);
  EXPECT_THAT(plan->warnings(), Contains(HasSubstr("exceeds 400 Gbit/s")));
  // Checkpoint: bf16 weights + fp32 master + m + v = 14Ψ, sharded on 8 nodes.
  EXPECT_EQ(plan->checkpoint_bytes(), 105'000'000'000u);
  EXPECT_EQ(plan->nvme_bytes_per_node(),
            2'000'000'000'000u + 2 * 105'000'000'000u / 8);
}

TEST(PlannerFit, LargestMicroBatchGrowsWithMemoryAndIsTight) {
  v1::ModelSpec spec;
  v1::TransformerShape* t = spec.mutable_transformer();
  t->set_layers(24);
  t->set_hidden_size(2048);
  t->set_heads(16);
  t->set_vocab_size(50257);
  t->set_sequence_length(2048);
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::pair<uint64_t, int>> by_memory;
  for (const v1::GpuFit& g : plan->gpus_that_fit()) {
    by_memory.emplace_back(g.memory_bytes(), g.max_micro_batch());
  }
  std::sort(by_memory.begin(), by_memory.end());
  for (size_t i = 1; i < by_memory.size(); ++i) {
    EXPECT_GE(by_memory[i].second, by_memory[i - 1].second)
        << "memory " << by_memory[i].first;
  }
  // On an A100-80GB the largest micro-batch fits and one more does not.
  spec.set_gpu_model("A100-80GB");
  plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok());
  const int max_b = plan->gpus_that_fit(0).max_micro_batch();
  ASSERT_GT(max_b, 1);
  spec.set_micro_batch_size(max_b);
  plan = MakePlan(spec, {});
  EXPECT_TRUE(plan->gpus_that_fit(0).fits());
  EXPECT_LE(plan->memory_per_gpu().total_bytes(), 80ull << 30);
  spec.set_micro_batch_size(max_b + 1);
  plan = MakePlan(spec, {});
  EXPECT_FALSE(plan->gpus_that_fit(0).fits());
}

TEST(PlannerFit, SmallestDataParallelThatFitsWithZero) {
  // 7.5B on 80 GiB: 120 GB never fits whole; ZeRO-3 needs ceil(120 GB /
  // usable) GPUs where usable = 80 GiB/1.05 less activations.
  v1::ModelSpec spec;
  spec.set_parameters(7.5e9);
  spec.set_gpu_model("H100-80GB");
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->gpus_that_fit(0).fits());
  EXPECT_THAT(plan->warnings(),
              Contains(HasSubstr("does not fit on H100-SXM-80GB")));
  spec.set_sharding(v1::ZERO_3);
  plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->gpus_that_fit(0).fits());
  EXPECT_EQ(plan->data_parallel(), 2);  // 60 GB per GPU
  EXPECT_EQ(plan->nodes(), 1);
}

TEST(PlannerFit, Says40GiBGpusNeedZero3) {
  v1::ModelSpec spec;
  spec.set_parameters(30e9);  // 2Ψ = 60 GB of weights alone
  spec.set_gpu_model("A100-40GB");
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->warnings(),
              Contains(HasSubstr(
                  "does not fit on A100-40GB (40.0 GiB) GPUs without ZeRO-3")));
}

TEST(PlannerFleet, UsesTheFleetAndWarnsWhenShort) {
  v1::ModelSpec spec;
  spec.set_parameters(7.5e9);
  spec.set_sharding(v1::ZERO_3);
  spec.set_gpus(64);
  std::vector<FleetGpu> fleet = {
      {"NVIDIA H100 80GB HBM3", 81559ull << 20, 16, 8},
      {"NVIDIA H100 80GB HBM3", 81559ull << 20, 8, 8},
      {"Mystery GPU 9000", 96ull << 30, 8, 4}};
  absl::StatusOr<v1::Plan> plan = MakePlan(spec, fleet);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->gpus_that_fit_size(), 2);
  EXPECT_THAT(plan->warnings(),
              Contains(HasSubstr("needs 64 GPUs but the fleet has")));
  bool saw_unknown = false;
  for (const v1::GpuFit& g : plan->gpus_that_fit()) {
    if (g.model() == "NVIDIA H100 80GB HBM3") {
      EXPECT_EQ(g.in_fleet(), 24);
      EXPECT_DOUBLE_EQ(g.peak_tflops(), 989);
    } else {
      saw_unknown = true;
      EXPECT_EQ(g.memory_bytes(), 96ull << 30);
      EXPECT_EQ(g.peak_tflops(), 0);
      EXPECT_THAT(g.note(), HasSubstr("peak TFLOP/s unknown"));
    }
  }
  EXPECT_TRUE(saw_unknown);
}

TEST(PlannerValidation, ErrorsNameTheField) {
  auto error = [](const v1::ModelSpec& spec) {
    absl::Status st = ValidateModelSpec(spec);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  v1::ModelSpec empty;
  EXPECT_THAT(error(empty), HasSubstr("model.parameters: required"));

  v1::ModelSpec s;
  *s.mutable_transformer() = Gpt3Shape();
  s.mutable_transformer()->set_heads(100);
  EXPECT_THAT(error(s),
              HasSubstr("model.transformer.heads: must divide hidden_size"));
  s.mutable_transformer()->set_heads(96);
  s.set_tensor_parallel(7);
  EXPECT_THAT(error(s), HasSubstr("model.tensor_parallel: must divide "
                                  "transformer.heads 96"));
  s.set_tensor_parallel(8);
  s.set_mfu(1.5);
  EXPECT_THAT(error(s), HasSubstr("model.mfu: must be in (0, 1]"));
  s.set_mfu(0.5);
  s.set_gpus(12);
  EXPECT_THAT(error(s), HasSubstr("model.gpus: must be a multiple"));
  s.set_gpus(16);
  EXPECT_TRUE(ValidateModelSpec(s).ok());
  s.mutable_transformer()->set_vocab_size(0);
  EXPECT_THAT(error(s), HasSubstr("model.transformer.vocab_size"));

  v1::ModelSpec both;
  both.set_parameters(1e9);
  both.mutable_mlp()->set_input_dim(4);
  EXPECT_THAT(error(both), HasSubstr("not several"));

  v1::ModelSpec mlp;
  mlp.mutable_mlp()->set_input_dim(4);
  mlp.mutable_mlp()->set_classes(2);
  mlp.set_sharding(v1::ZERO_2);
  EXPECT_THAT(error(mlp), HasSubstr("model.sharding"));

  v1::ModelSpec gpu;
  gpu.set_parameters(1e9);
  gpu.set_gpu_model("B300");
  absl::StatusOr<v1::Plan> plan = MakePlan(gpu, {});
  EXPECT_THAT(plan.status().message(), HasSubstr("model.gpu_model: unknown"));
}

TEST(GpuCatalogue, FindsShortAndNvmlNames) {
  EXPECT_EQ(std::string(FindGpu("NVIDIA H100 80GB HBM3")->name),
            "H100-SXM-80GB");
  EXPECT_EQ(std::string(FindGpu("h100-80gb")->name), "H100-SXM-80GB");
  EXPECT_EQ(std::string(FindGpu("NVIDIA A100-SXM4-40GB")->name), "A100-40GB");
  EXPECT_EQ(std::string(FindGpu("NVIDIA A100-SXM4-80GB")->name), "A100-80GB");
  EXPECT_EQ(std::string(FindGpu("NVIDIA H200")->name), "H200-141GB");
  EXPECT_EQ(std::string(FindGpu("NVIDIA L40S")->name), "L40S-48GB");
  EXPECT_EQ(std::string(FindGpu("H200")->name), "H200-141GB");
  EXPECT_FALSE(FindGpu("NVIDIA GeForce GTX 1080").has_value());
  const GpuSpec v100 = *FindGpu("Tesla V100-SXM2-32GB");
  EXPECT_EQ(v100.PeakTflops(v1::BF16), 0);  // unsupported
  EXPECT_EQ(v100.PeakTflops(v1::FP16), 125);
  const GpuSpec a100 = *FindGpu("A100-40GB");
  EXPECT_EQ(a100.PeakTflops(v1::BF16), 312);
  EXPECT_EQ(a100.tf32_tflops, 156);
  EXPECT_EQ(a100.PeakTflops(v1::FP32), 19.5);
}

TEST(GpuCatalogue, CarriesNvidiasComputeCapabilities) {
  struct Want {
    const char* name;
    int major, minor;
  };
  for (const Want& w :
       {Want{"H200", 9, 0}, Want{"H100-SXM-80GB", 9, 0},
        Want{"H100-PCIe-80GB", 9, 0}, Want{"A100-80GB", 8, 0},
        Want{"A100-40GB", 8, 0}, Want{"L40S", 8, 9}, Want{"A40", 8, 6},
        Want{"A30", 8, 0}, Want{"L4", 8, 9}, Want{"V100", 7, 0}}) {
    const GpuSpec g = *FindGpu(w.name);
    EXPECT_EQ(g.compute_major, w.major) << w.name;
    EXPECT_EQ(g.compute_minor, w.minor) << w.name;
  }
  for (const GpuSpec& g : GpuCatalogue())
    EXPECT_GT(g.compute_major, 0) << g.name;
}

// xl-train's CUDA 13 build: SASS for 8.0, 8.6, 8.9, 9.0 (8.0 runs on every
// 8.x) and PTX that 10.0 and newer compile; nothing for 7.x and below.
TEST(XlTrainGpus, RunsOnAmpereAndNewerOnly) {
  for (auto [major, minor] : std::vector<std::pair<int, int>>{
           {8, 0}, {8, 6}, {8, 7}, {8, 9}, {9, 0}, {10, 0}, {12, 0}}) {
    std::string why = "untouched";
    EXPECT_TRUE(XlTrainSupportsComputeCapability(major, minor, &why))
        << major << "." << minor;
    EXPECT_EQ(why, "untouched");
  }
  std::string why;
  EXPECT_FALSE(XlTrainSupportsComputeCapability(7, 0, &why));
  EXPECT_EQ(why,
            "compute capability 7.0 (Volta): CUDA 13, which xl-train is built "
            "with, dropped Volta and older GPUs (7.2 and below); xl-train "
            "needs 8.0 or newer (A100, A30, A40, L4, L40S, H100, H200, B200); "
            "a program of your own can still run here if built with CUDA 12");
  // Turing is still a CUDA 13 target, just not one xl-train is built for.
  EXPECT_FALSE(XlTrainSupportsComputeCapability(7, 5, &why));
  EXPECT_THAT(why, HasSubstr("compute capability 7.5 (Turing): xl-train's "
                             "CUDA 13 build has code for 8.0, 8.6, 8.9 and "
                             "9.0"));
  EXPECT_THAT(why, Not(HasSubstr("dropped")));
  EXPECT_FALSE(XlTrainSupportsComputeCapability(6, 0, &why));
  EXPECT_THAT(why, HasSubstr("6.0 (Pascal): CUDA 13"));
  EXPECT_FALSE(XlTrainSupportsComputeCapability(0, 0, &why));
  EXPECT_THAT(why, HasSubstr("not a compute capability"));
  EXPECT_FALSE(XlTrainSupportsComputeCapability(7, 0, nullptr));
}

// The plan still covers a V100 (for a program of one's own), and says on
// its row that xl-train cannot run there and why; an A100 row says nothing
// of the kind. A plan for xl-train's MLP on a V100 warns.
TEST(XlTrainGpus, PlanSaysWhichGpusCannotRunXlTrain) {
  v1::ModelSpec m;
  m.set_parameters(1e9);
  absl::StatusOr<v1::Plan> plan = MakePlan(m, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  bool saw_v100 = false;
  for (const v1::GpuFit& g : plan->gpus_that_fit()) {
    if (g.model() == "V100-32GB") {
      saw_v100 = true;
      EXPECT_THAT(g.note(),
                  HasSubstr("xl-train cannot run on it: compute capability "
                            "7.0 (Volta): CUDA 13, which xl-train is built "
                            "with, dropped Volta"));
    } else {
      EXPECT_THAT(g.note(), Not(HasSubstr("xl-train"))) << g.model();
    }
  }
  EXPECT_TRUE(saw_v100);
  for (const std::string& w : plan->warnings()) {
    EXPECT_THAT(w, Not(HasSubstr("xl-train"))) << "not an xl-train plan";
  }

  // A fleet of V100s (NVML's name): planned, and said.
  absl::StatusOr<v1::Plan> fleet =
      MakePlan(m, {{"Tesla V100-SXM2-32GB", 32ull << 30, 16, 8}});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  ASSERT_EQ(fleet->gpus_that_fit_size(), 1);
  EXPECT_THAT(fleet->gpus_that_fit(0).note(),
              HasSubstr("xl-train cannot run on it: compute capability 7.0"));

  v1::ModelSpec mlp;
  mlp.mutable_mlp()->set_input_dim(256);
  mlp.mutable_mlp()->set_hidden_dim(1024);
  mlp.mutable_mlp()->set_hidden_layers(2);
  mlp.mutable_mlp()->set_classes(16);
  mlp.set_precision(v1::FP16);
  mlp.set_gpu_model("V100");
  absl::StatusOr<v1::Plan> on_v100 = MakePlan(mlp, {});
  ASSERT_TRUE(on_v100.ok()) << on_v100.status();
  EXPECT_EQ(on_v100->gpu_model(), "V100-32GB");
  EXPECT_THAT(on_v100->warnings(),
              Contains(HasSubstr("xl-train (the MLP's worker) cannot run on "
                                 "V100-32GB: compute capability 7.0 (Volta)")));
  mlp.set_gpu_model("A100-40GB");
  absl::StatusOr<v1::Plan> on_a100 = MakePlan(mlp, {});
  ASSERT_TRUE(on_a100.ok()) << on_a100.status();
  for (const std::string& w : on_a100->warnings()) {
    EXPECT_THAT(w, Not(HasSubstr("xl-train")));
  }
}

}  // namespace
}  // namespace xl::planner
