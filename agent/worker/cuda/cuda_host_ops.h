// Host-array entry points into xl-train's CUDA kernels, CudaMlp and NCCL,
// for the GPU tests only (xl-train's interface is cuda_trainer.h). Each runs
// on the calling thread on device 0 unless stated, copies inputs to the GPU,
// runs the named kernels in `precision` (inputs rounded to bf16/fp16 where
// the GPU path stores them so), and copies results back as fp32. No CUDA
// headers here: the tests compile with the host compiler.
#ifndef XL_AGENT_WORKER_CUDA_CUDA_HOST_OPS_H_
#define XL_AGENT_WORKER_CUDA_CUDA_HOST_OPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/worker/comm/rendezvous.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

// y = relu?(z + bias), z [rows x cols].
absl::Status CudaBiasActivationForTest(const std::vector<float>& z,
                                       const std::vector<float>& bias, int rows,
                                       int cols, bool relu,
                                       v1::Precision precision,
                                       std::vector<float>* y);
// dz = dy * (y > 0) (no mask when y is empty), db = column sums of dz.
absl::Status CudaReluBackwardForTest(const std::vector<float>& dy,
                                     const std::vector<float>& y, int rows,
                                     int cols, v1::Precision precision,
                                     std::vector<float>* dz,
                                     std::vector<float>* db);
// Mean loss and dlogits of softmax cross-entropy (zero bias).
absl::Status CudaSoftmaxCrossEntropyForTest(const std::vector<float>& logits,
                                            const std::vector<int32_t>& labels,
                                            int rows, int cols,
                                            v1::Precision precision,
                                            float* loss,
                                            std::vector<float>* dlogits);
// One AdamW step of the model of `config` through CudaMlp::Step: params, m,
// v in/out, grads in, adam_t in/out (steps done before; +1 after).
absl::Status CudaAdamWStepForTest(const TrainConfig& config,
                                  std::vector<float>* params,
                                  const std::vector<float>& grads,
                                  std::vector<float>* m, std::vector<float>* v,
                                  int64_t* adam_t);
// One step's ForwardBackward of CudaMlp with the given params over `batch`
// samples, as `micro_batches` accumulated micro-batches of batch /
// micro_batches (which must divide): mean loss, grads.
absl::Status CudaForwardBackwardForTest(
    const TrainConfig& config, const std::vector<float>& params,
    const std::vector<float>& x, const std::vector<int32_t>& labels, int batch,
    float* loss, std::vector<float>* grads, int micro_batches = 1);
// Rank `rank` of `world` on `device`: NcclCollective over `rendezvous`
// (key `key`), data copied to the device, AllReduceMean, copied back.
absl::Status CudaAllReduceForTest(int device, int rank, int world,
                                  Rendezvous* rendezvous,
                                  const std::string& key,
                                  std::vector<float>* data);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_CUDA_CUDA_HOST_OPS_H_
