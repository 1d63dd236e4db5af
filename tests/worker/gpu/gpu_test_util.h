// Helpers of the GPU tests: skip without a device, compare float arrays.
#ifndef XL_TESTS_WORKER_GPU_GPU_TEST_UTIL_H_
#define XL_TESTS_WORKER_GPU_GPU_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "agent/worker/cuda/cuda_trainer.h"

// Skips the test when no CUDA device is visible (CI, laptops).
#define XL_SKIP_WITHOUT_GPU()                                     \
  do {                                                            \
    if (::xl::worker::CudaDeviceCount() == 0) {                   \
      GTEST_SKIP() << "no CUDA device visible; GPU test skipped"; \
    }                                                             \
  } while (0)

namespace xl::worker::testing {

// max |a - b| / max(max |b|, tiny): an error relative to the array's scale,
// which stays meaningful for elements near zero.
inline double ScaledMaxError(const std::vector<float>& a,
                             const std::vector<float>& b) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return err / scale;
}

// Cosine of the angle between a and b as vectors: 1 when they point the
// same way. For low-precision gradients, where a pre-activation within
// rounding of 0 flips its ReLU mask and moves single elements by a whole
// term while the array as a whole still agrees.
inline double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / (std::sqrt(aa * bb) + 1e-300);
}

}  // namespace xl::worker::testing

#endif  // XL_TESTS_WORKER_GPU_GPU_TEST_UTIL_H_
