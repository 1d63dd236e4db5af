// AdamW update (see adamw.h for the exact float arithmetic). Single owner.
#include "agent/worker/model/adamw.h"

#include <cmath>
#include <cstddef>

#include "agent/worker/clones.h"

namespace xl::worker {
namespace {

struct Coefficients {
  float bc1;
  float bc2;
  float lr;
  float decay;
};

// One run of elements that all decay or all do not. Built for AVX-512 and
// AVX2 too where the CPU has them (chosen at run time); every clone computes
// the bits adamw.h defines: adamw.cc is built with -ffp-contract=off (no
// fused multiply-add in any clone), lanes never combine, and division and
// square root are correctly rounded at every width.
template <bool kDecay>
XL_CLONES_AVX512_AVX2 void UpdateRun(float* __restrict params,
                                     const float* __restrict grads,
                                     float* __restrict m_, float* __restrict v_,
                                     size_t n, Coefficients c) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float m = 0.9f * m_[i] + 0.1f * g;
    const float v = 0.999f * v_[i] + 0.001f * (g * g);
    m_[i] = m;
    v_[i] = v;
    float w = params[i];
    if (kDecay) w = w - c.decay * w;
    w = w - c.lr * (m / c.bc1) / (std::sqrt(v / c.bc2) + 1e-8f);
    params[i] = w;
  }
}

}  // namespace

AdamW::AdamW(std::vector<uint8_t> decay_mask, double learning_rate,
             double weight_decay)
    : mask_(std::move(decay_mask)),
      lr_(learning_rate),
      wd_(weight_decay),
      m_(mask_.size(), 0.0f),
      v_(mask_.size(), 0.0f) {
  for (size_t i = 0; i < mask_.size();) {
    size_t end = i + 1;
    while (end < mask_.size() && (mask_[end] != 0) == (mask_[i] != 0)) ++end;
    runs_.push_back(Run{i, end, mask_[i] != 0});
    i = end;
  }
}

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
  Coefficients c;
  c.bc1 = static_cast<float>(1.0 - std::pow(0.9, static_cast<double>(t_)));
  c.bc2 = static_cast<float>(1.0 - std::pow(0.999, static_cast<double>(t_)));
  c.lr = static_cast<float>(lr_);
  c.decay = static_cast<float>(lr_ * wd_);
  for (const Run& r : runs_) {
    const size_t n = r.end - r.begin;
    if (r.decay) {
      UpdateRun<true>(params + r.begin, grads + r.begin, m_.data() + r.begin,
                      v_.data() + r.begin, n, c);
    } else {
      UpdateRun<false>(params + r.begin, grads + r.begin, m_.data() + r.begin,
                       v_.data() + r.begin, n, c);
    }
  }
}

}  // namespace xl::worker
