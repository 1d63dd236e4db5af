// Mlp: fp32 forward/backward through CBLAS. Single-threaded by contract.
#include "agent/worker/model/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "agent/worker/data/data.h"

namespace xl::worker {

std::vector<LayerSpan> LayerSpans(const TrainConfig& config) {
  std::vector<int> w = config.Widths();
  std::vector<LayerSpan> spans;
  int64_t off = 0;
  for (size_t l = 1; l < w.size(); ++l) {
    LayerSpan s;
    s.in = w[l - 1];
    s.out = w[l];
    s.w_offset = off;
    s.w_size = static_cast<int64_t>(s.out) * s.in;
    s.b_offset = off + s.w_size;
    s.b_size = s.out;
    off = s.b_offset + s.b_size;
    spans.push_back(s);
  }
  return spans;
}

float SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                          int classes, float* dlogits) {
  double total = 0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * classes;
    float mx = z[0];
    for (int c = 1; c < classes; ++c) mx = std::max(mx, z[c]);
    float sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - mx);
    const float log_sum = std::log(sum);
    total += static_cast<double>(log_sum - (z[labels[i]] - mx));
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<size_t>(i) * classes;
      for (int c = 0; c < classes; ++c) {
        float p = std::exp(z[c] - mx - log_sum);
        d[c] = (p - (c == labels[i] ? 1.0f : 0.0f)) * inv_batch;
      }
    }
  }
  return static_cast<float>(total / batch);
}

Mlp::Mlp(const TrainConfig& config)
    : config_(config), layers_(LayerSpans(config)) {
  params_.assign(config.ParamCount(), 0.0f);
  grads_.assign(config.ParamCount(), 0.0f);
  EnsureBatch(config.batch_per_rank);
}

void Mlp::Init() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerSpan& s = layers_[l];
    float* w = params_.data() + s.w_offset;
    for (int64_t i = 0; i < s.w_size; ++i) {
      w[i] = InitWeight(config_.seed, static_cast<int>(l) + 1, i, s.in);
    }
    std::fill_n(params_.data() + s.b_offset, s.b_size, 0.0f);
  }
}

void Mlp::EnsureBatch(int batch) {
  if (batch <= max_batch_) return;
  max_batch_ = batch;
  acts_.resize(layers_.size());
  int widest = config_.classes;
  for (size_t l = 0; l < layers_.size(); ++l) {
    acts_[l].assign(static_cast<size_t>(batch) * layers_[l].in, 0.0f);
    widest = std::max(widest, layers_[l].in);
  }
  logits_.assign(static_cast<size_t>(batch) * config_.classes, 0.0f);
  dlogits_.assign(logits_.size(), 0.0f);
  dz_a_.assign(static_cast<size_t>(batch) * widest, 0.0f);
  dz_b_.assign(dz_a_.size(), 0.0f);
}

void Mlp::Forward(const float* x, int batch) {
  EnsureBatch(batch);
  std::memcpy(acts_[0].data(), x,
              sizeof(float) * static_cast<size_t>(batch) * layers_[0].in);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerSpan& s = layers_[l];
    const bool last = l + 1 == layers_.size();
    float* out = last ? logits_.data() : acts_[l + 1].data();
    // out [B x out] = in [B x in] * W^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, s.out, s.in,
                1.0f, acts_[l].data(), s.in, params_.data() + s.w_offset, s.in,
                0.0f, out, s.out);
    const float* b = params_.data() + s.b_offset;
    for (int i = 0; i < batch; ++i) {
      float* row = out + static_cast<size_t>(i) * s.out;
      if (last) {
        for (int j = 0; j < s.out; ++j) row[j] += b[j];
      } else {
        for (int j = 0; j < s.out; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
      }
    }
  }
}

float Mlp::Loss(const float* x, const int32_t* labels, int batch) {
  Forward(x, batch);
  return SoftmaxCrossEntropy(logits_.data(), labels, batch, config_.classes,
                             nullptr);
}

float Mlp::ForwardBackward(const float* x, const int32_t* labels, int batch,
                           bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  Forward(x, batch);
  const float loss = SoftmaxCrossEntropy(logits_.data(), labels, batch,
                                         config_.classes, dlogits_.data());
  // dz: gradient w.r.t. the pre-activation of the current layer.
  const float* dz = dlogits_.data();
  for (size_t li = layers_.size(); li-- > 0;) {
    const LayerSpan& s = layers_[li];
    const float* a = acts_[li].data();
    // dW [out x in] = dz^T [out x B] * a [B x in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.out, s.in, batch,
                1.0f, dz, s.out, a, s.in, beta, grads_.data() + s.w_offset,
                s.in);
    float* db = grads_.data() + s.b_offset;
    if (!accumulate) std::fill_n(db, s.out, 0.0f);
    for (int i = 0; i < batch; ++i) {
      const float* row = dz + static_cast<size_t>(i) * s.out;
      for (int j = 0; j < s.out; ++j) db[j] += row[j];
    }
    if (li == 0) break;
    // da [B x in] = dz [B x out] * W [out x in]; then the ReLU mask of a.
    float* da = (dz == dz_a_.data()) ? dz_b_.data() : dz_a_.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, s.in, s.out,
                1.0f, dz, s.out, params_.data() + s.w_offset, s.in, 0.0f, da,
                s.in);
    const size_t n = static_cast<size_t>(batch) * s.in;
    for (size_t k = 0; k < n; ++k) {
      if (!(a[k] > 0.0f)) da[k] = 0.0f;
    }
    dz = da;
  }
  return loss;
}

uint64_t Mlp::allocated_bytes() const {
  uint64_t n = params_.capacity() + grads_.capacity() + logits_.capacity() +
               dlogits_.capacity() + dz_a_.capacity() + dz_b_.capacity();
  for (const auto& a : acts_) n += a.capacity();
  return n * sizeof(float);
}

uint64_t ProcessPeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
  }
  return 0;
}

}  // namespace xl::worker
