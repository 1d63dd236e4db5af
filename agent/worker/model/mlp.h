// Mlp: the fp32 CPU model of xl-train (see train_config.h for the math):
// flat parameter and gradient buffers, forward/backward through CBLAS GEMMs
// with fused bias+ReLU loops, softmax cross-entropy. Not thread-safe: one
// owner thread (BLAS itself may use threads inside a call).
#ifndef XL_AGENT_WORKER_MODEL_MLP_H_
#define XL_AGENT_WORKER_MODEL_MLP_H_

#include <cstdint>
#include <vector>

#include "agent/worker/loop/train_config.h"

namespace xl::worker {

// Where layer l (0-based here; layer l+1 in train_config.h) lives in the
// flat buffers: W [out x in] at w_offset, then b [out] at b_offset =
// w_offset + out * in. Layers are contiguous and in order.
struct LayerSpan {
  int in = 0;
  int out = 0;
  int64_t w_offset = 0;
  int64_t w_size = 0;
  int64_t b_offset = 0;
  int64_t b_size = 0;
};

// The layer spans of `config`'s model.
std::vector<LayerSpan> LayerSpans(const TrainConfig& config);

// Mean softmax cross-entropy of logits [batch x classes] against labels;
// when dlogits is not null, writes d(mean loss)/d(logits) there
// ((softmax - onehot) / batch). Row max is subtracted; exp/log in float,
// the sum over the batch in double.
float SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                          int classes, float* dlogits);

class Mlp {
 public:
  // Allocates params and grads; activation buffers grow to the largest batch
  // seen. Call Init() before training.
  explicit Mlp(const TrainConfig& config);

  // W_l from the counter RNG keyed (seed, kInitStream + l, i), b_l = 0.
  void Init();
  // Sizes the activation buffers for batches up to `batch` now (they also
  // grow on demand); for a batch chosen after construction.
  void ReserveBatch(int batch) { EnsureBatch(batch); }

  // Mean loss over the batch; fills grads() (overwriting, or adding to
  // them when `accumulate`, for micro-batches) and keeps the activations of
  // this batch. labels in [0, classes).
  float ForwardBackward(const float* x, const int32_t* labels, int batch,
                        bool accumulate = false);
  // Mean loss over the batch, forward only; grads untouched.
  float Loss(const float* x, const int32_t* labels, int batch);

  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }
  const std::vector<LayerSpan>& layers() const { return layers_; }
  int64_t param_count() const { return static_cast<int64_t>(params_.size()); }
  // d(loss)/d(logits) of the last ForwardBackward ([batch x classes]).
  const std::vector<float>& logits_grad() const { return dlogits_; }
  // Bytes this model holds now: params, grads, activations, scratch.
  uint64_t allocated_bytes() const;

 private:
  void EnsureBatch(int batch);
  // Runs the forward pass into acts_/logits_.
  void Forward(const float* x, int batch);

  TrainConfig config_;
  std::vector<LayerSpan> layers_;
  std::vector<float> params_;
  std::vector<float> grads_;
  int max_batch_ = 0;
  // acts_[l]: input of layer l (acts_[0] a copy of x; then post-ReLU).
  std::vector<std::vector<float>> acts_;
  std::vector<float> logits_;
  std::vector<float> dlogits_;
  std::vector<float> dz_a_, dz_b_;  // ping-pong gradient scratch
};

// Peak resident set of this process (VmHWM of /proc/self/status), in bytes;
// 0 when unavailable.
uint64_t ProcessPeakRssBytes();

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_MODEL_MLP_H_
