// AdamW as train_config.h fixes it: beta1 0.9, beta2 0.999, eps 1e-8,
// bias-corrected, constant lr, decoupled weight decay on W only. Per element,
// in float (bc1 = 1 - 0.9^t, bc2 = 1 - 0.999^t computed in double, then
// rounded to float; t counts steps from 1):
//   m = 0.9f*m + 0.1f*g;  v = 0.999f*v + 0.001f*(g*g);
//   if decay: w = w - float(lr*wd) * w;
//   w = w - float(lr) * (m / bc1) / (sqrtf(v / bc2) + 1e-8f);
// Not thread-safe: one owner.
#ifndef XL_AGENT_WORKER_MODEL_ADAMW_H_
#define XL_AGENT_WORKER_MODEL_ADAMW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "agent/worker/model/mlp.h"

namespace xl::worker {

class AdamW {
 public:
  // decay_mask[i] is 1 where weight decay applies (the W of every layer).
  AdamW(std::vector<uint8_t> decay_mask, double learning_rate,
        double weight_decay);

  // 1 for every element of a W, 0 for biases.
  static std::vector<uint8_t> WeightMask(const std::vector<LayerSpan>& layers,
                                         int64_t count);

  // One update of params[0..n) with grads[0..n); t += 1 first. params and
  // grads must not overlap (the update is vectorized on that promise).
  void Step(float* params, const float* grads);

  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  int64_t t() const { return t_; }
  void set_t(int64_t t) { t_ = t; }
  uint64_t allocated_bytes() const {
    return (m_.capacity() + v_.capacity()) * sizeof(float) + mask_.capacity();
  }

 private:
  // Maximal runs of equal mask_ values: the update runs branch-free (and
  // vectorized) within each.
  struct Run {
    size_t begin;
    size_t end;
    bool decay;
  };

  std::vector<uint8_t> mask_;
  std::vector<Run> runs_;
  double lr_;
  double wd_;
  std::vector<float> m_;
  std::vector<float> v_;
  int64_t t_ = 0;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_MODEL_ADAMW_H_
