// AdamW update (see adamw.h for the exact float arithmetic). Single owner.
#include "agent/worker/adamw.h"

#include <cmath>

namespace xl::worker {

AdamW::AdamW(std::vector<uint8_t> decay_mask, double learning_rate,
             double weight_decay)
    : mask_(std::move(decay_mask)),
      lr_(learning_rate),
      wd_(weight_decay),
      m_(mask_.size(), 0.0f),
      v_(mask_.size(), 0.0f) {}

std::vector<uint8_t> AdamW::WeightMask(const std::vector<LayerSpan>& layers,
                                       int64_t count) {
  std::vector<uint8_t> mask(count, 0);
  for (const LayerSpan& s : layers) {
    for (int64_t i = 0; i < s.w_size; ++i) mask[s.w_offset + i] = 1;
  }
  return mask;
}

void AdamW::Step(float* params, const float* grads) {
  ++t_;
  const float bc1 =
      static_cast<float>(1.0 - std::pow(0.9, static_cast<double>(t_)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(0.999, static_cast<double>(t_)));
  const float lr = static_cast<float>(lr_);
  const float decay = static_cast<float>(lr_ * wd_);
  const size_t n = m_.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    float m = 0.9f * m_[i] + 0.1f * g;
    float v = 0.999f * v_[i] + 0.001f * (g * g);
    m_[i] = m;
    v_[i] = v;
    float w = params[i];
    if (mask_[i]) w = w - decay * w;
    w = w - lr * (m / bc1) / (std::sqrt(v / bc2) + 1e-8f);
    params[i] = w;
  }
}

}  // namespace xl::worker
