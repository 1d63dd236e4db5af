// The capacity planner: what a training needs (memory per GPU, GPUs, nodes,
// checkpoint and NVMe bytes, storage read rate, network, step time), computed
// from the model with the arithmetic shown. Pure: no I/O, no clock, no gRPC;
// every function is stateless and safe from any thread.
//
// Units: bytes are exact integers in the Plan. In the text "GB" is 1e9 bytes
// (as the ZeRO and Megatron papers count) and "GiB" is 2^30 (GPU capacities).
// Ψ is the parameter count; t, p, Nd the tensor-, pipeline- and data-parallel
// degrees; s sequence length, b micro-batch, h hidden, a heads, L layers, V
// vocabulary, f ffn hidden size (default 4h).
//
// Parameters.
//   transformer (GPT-style, learned positions, biases, 2 layer norms/layer):
//     Ψ = L·(4h² + 2hf + 9h + f) + V·h + s·h + 2h
//       = L·(12h² + 13h) + V·h + s·h + 2h            with f = 4h
//     (the 12·L·h² + V·h of Narayanan et al. 2021 plus the small terms; the
//     output layer shares the embedding).
//   xl-train MLP: Ψ = Σ_l (d_{l-1}·d_l + d_l), d_0 input, d_L classes.
//
// Model states, bytes per parameter (Rajbhandari et al. 2020, "ZeRO"):
//   mixed bf16/fp16 + AdamW: weights 2 + gradients 2 + master fp32 4 + m 4 +
//     v 4 = 16 (MemoryBreakdown: optimizer_bytes = m + v = 8Ψ,
//     master_weights_bytes = 4Ψ).
//   fp32 + AdamW: weights 4 + gradients 4 + m,v 8 = 16.
//   SGD with momentum: momentum 4 (fp32); mixed adds the 4 B master: 12 both.
//   Adafactor (no first moment, factored second moment): 4 bytes × Σ over
//     weight matrices of (rows + cols), plus a full fp32 second moment for
//     vectors (biases, norms); mixed adds the 4 B master. With only a
//     parameter count the matrices are taken as square 4096 × 4096: second
//     moment ≈ 4Ψ·2/4096 bytes (stated in the arithmetic).
//   Tensor and pipeline parallelism divide every state by t·p first. ZeRO over
//   Nd: stage 1 divides optimizer states and master weights by Nd, stage 2
//   also gradients, stage 3 also weights (FSDP full shard = stage 3).
//
// Activations per GPU (Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", 16-bit activations), per layer:
//   no parallelism:        s·b·h·(34 + 5·a·s/h)
//   tensor parallel t:     s·b·h·(10 + 24/t + 5·a·s/(h·t))
//   + sequence parallel:   s·b·h/t·(34 + 5·a·s/h)
//   selective recompute:   s·b·h·(10 + 24/t), with SP s·b·h·34/t
//   full recompute:        2·s·b·h (the layer input), with SP 2·s·b·h/t
//   generalised for f: the 24 is (8h + 4f)/h (attention 8sbh, MLP 4sbf).
//   Times L layers: with the 1F1B pipeline schedule the first stage holds p
//   micro-batches of L/p layers, so L·(per layer) for any p (the paper's
//   result, no interleaving). Plus the fp32 logits of the loss, 4·s·b·V/t
//   (the paper's output-layer terms are smaller and left out).
//   xl-train MLP: exactly the buffers xl-train allocates (see MlpMemory).
//
// Workspace (GPU): cuBLAS workspace, the CUDA context and allocator
//   fragmentation: max(1 GiB, 5% of model states + activations). CPU: 0.
//
// Fit: states(Nd) + b·A1 + workspace ≤ GPU memory, i.e. states(Nd) + b·A1 ≤
//   min(M − 1 GiB, M / 1.05). Solved for b (largest micro-batch) and for the
//   smallest Nd (ZeRO ≥ 1 shrinks states with Nd); GPUs = Nd·t·p (or the
//   fixed `gpus`), nodes = ceil(GPUs / gpus_per_node).
//
// Checkpoint: what a resumable checkpoint holds, weights at the training
//   precision + fp32 master weights + optimizer states (Megatron and
//   DeepSpeed layout): 14Ψ for mixed AdamW, 12Ψ for fp32 AdamW (xl-train:
//   params, m, v), gradients never. NVMe per node: a full copy of the dataset
//   on every node (any rank may read any sample) + checkpoints_kept
//   checkpoints: sharded across nodes when the states are sharded (ZeRO ≥ 1
//   or t·p > 1: each rank writes its shard), whole on every node otherwise
//   (rank 0 writes it, and after a requeue rank 0 may be on any node).
//
// Time: FLOPs per token = 6Ψ + 12·L·h·s (the attention term of Narayanan et
//   al. 2021; 6Ψ alone for a parameter count or the MLP, where a token is a
//   sample). Recomputation is not counted (model FLOPs, as MFU is defined).
//   step = FLOPs/token × tokens/step / (GPUs × peak × MFU), tokens/step =
//   global batch × s; time to train = train tokens / tokens per second.
//
// Storage read rate per node = bytes per sample × global batch / nodes /
//   step time, bytes per sample = dataset_bytes / (dataset_tokens / s) (MLP:
//   4·input + 4, xl-train's shard record).
//
// Network: gradient bytes per replica G = Ψ/(t·p) × (2 mixed, 4 fp32; the
//   MLP all-reduces fp32). Ring all-reduce sends 2(Nd−1)/Nd·G per GPU; ZeRO-2
//   (reduce-scatter + all-gather of weights) the same; ZeRO-3 3(Nd−1)/Nd·G
//   (weights gathered in forward and backward). NCCL orders each ring by
//   node, so a data-parallel group's ring crosses a node's NICs once, and a
//   node holds min(GPUs per node, t·p) groups (one per model-parallel rank),
//   which share the node's NICs: NIC Gbit/s per node = per-GPU ring bytes ×
//   min(GPUs per node, t·p) × 8 / (comm_share × step) / 1e9; 0 on one node
//   (NVLink/PCIe). (A flat model where every GPU's ring traffic leaves the
//   node would be GPUs-per-node / (t·p) times higher.)
#ifndef XL_COMMON_PLANNER_PLANNER_H_
#define XL_COMMON_PLANNER_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xl/v1/plan.pb.h"

namespace xl::planner {

// One GPU model of the live fleet (summed over its nodes).
struct FleetGpu {
  std::string model;  // NVML name, as the agents report it
  uint64_t memory_bytes = 0;
  int count = 0;          // GPUs of this model in the fleet
  int gpus_per_node = 0;  // the most on one node
};

// The `gpu_model` that plans xl-train's CPU path (host memory, no workspace).
inline constexpr char kCpuDevice[] = "cpu";

// Returns OK or INVALID_ARGUMENT naming the field as "model.<field>: ..."
// with what to do ("model.transformer.heads: must divide hidden_size 4096").
absl::Status ValidateModelSpec(const v1::ModelSpec& model);

// Returns `model` with the defaults of plan.proto filled in (BF16 — FP32 for
// the MLP on the CPU —, AdamW, no sharding, t = p = 1, micro-batch 1, mfu
// 0.4, 8 GPUs per node, 2 checkpoints, comm share 0.25, train tokens =
// dataset tokens, ffn = 4h). Does not validate.
v1::ModelSpec WithDefaults(const v1::ModelSpec& model);

// Plans `model` on the GPUs of `fleet` (empty: the offline catalogue).
// INVALID_ARGUMENT as ValidateModelSpec, or when gpu_model names no
// catalogue entry and no fleet GPU. Never fails for a model that does not
// fit: the Plan says so in `warnings`.
absl::StatusOr<v1::Plan> MakePlan(const v1::ModelSpec& model,
                                  const std::vector<FleetGpu>& fleet);

// The building blocks, for tests and for the submit path.

// Ψ of a transformer (formula above); ffn_hidden_size 0 means 4h.
double TransformerParameters(const v1::TransformerShape& shape);
// Ψ of xl-train's MLP (exact).
int64_t MlpParameters(const v1::MlpShape& shape);

// Per-GPU model-state bytes (weights, gradients, optimizer, master weights)
// for `parameters` at the given settings, ZeRO over `data_parallel` ranks.
// Other MemoryBreakdown fields are 0. Adafactor uses the square-matrix
// approximation; MakePlan refines it with the transformer shape.
v1::MemoryBreakdown ModelStateBytes(double parameters, v1::Precision precision,
                                    v1::Optimizer optimizer,
                                    v1::Sharding sharding, int tensor_parallel,
                                    int pipeline_parallel, int data_parallel);

// Activation bytes of ONE transformer layer on one GPU (Korthikanti et al.
// 2022, formulas above) for micro-batch `micro_batch`.
double LayerActivationBytes(const v1::TransformerShape& shape, int micro_batch,
                            int tensor_parallel, bool sequence_parallel,
                            v1::Recompute recompute);

// xl-train's memory for the MLP at `batch` samples per rank, buffer by
// buffer as it allocates them. CPU (`cpu`): fp32 params, grads, AdamW m and
// v, the 1-byte weight-decay mask per parameter (counted in
// optimizer_bytes), activations = acts (input copy + every hidden layer's
// input), logits, dlogits, two ping-pong gradient buffers of the widest
// layer, and two batches' x and labels (the one in use and the next, made
// ahead by the producer thread); total = xl-train's
// peak_memory_bytes. CUDA: fp32 params (master), grads, m, v, a 16-bit copy
// of the weights at BF16/FP16, activations at the compute precision (no
// input copy at FP32), logits, ping-pong buffers, per-sample loss; the bias
// gradient scratch and 256-byte rounding are left out. workspace_bytes is 0.
v1::MemoryBreakdown MlpMemory(const v1::MlpShape& shape, int batch,
                              v1::Precision precision, bool cpu);

// What model states and activations may use of a GPU's `memory` bytes, the
// rest kept for the workspace (cuBLAS, NCCL, the CUDA context's growth):
// min(memory - 1 GiB, memory / 1.05), as every plan counts it.
double GpuUsableBytes(double memory);

}  // namespace xl::planner

#endif  // XL_COMMON_PLANNER_PLANNER_H_
