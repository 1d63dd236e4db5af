// NcclCollective on every visible GPU: ranks as threads of this process,
// one per GPU, meeting through an InMemoryRendezvous.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/worker/comm/rendezvous.h"
#include "agent/worker/cuda/cuda_host_ops.h"
#include "agent/worker/cuda/cuda_trainer.h"
#include "tests/worker/gpu/gpu_test_util.h"

namespace xl::worker {
namespace {

TEST(NcclCollective, AllReduceMeanOnAllGpus) {
  XL_SKIP_WITHOUT_GPU();
  const int world = CudaDeviceCount();
  const size_t count = (1 << 20) + 3;  // several NCCL chunks, odd tail
  InMemoryRendezvous rdv;
  std::vector<std::vector<float>> data(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    data[r].resize(count);
    for (size_t i = 0; i < count; ++i) {
      data[r][i] = static_cast<float>(r) + 0.5f * static_cast<float>(i % 97);
    }
    threads.emplace_back([&, r] {
      status[r] =
          CudaAllReduceForTest(r, r, world, &rdv, "nccl/test-mean", &data[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  const float rank_mean = (world - 1) / 2.0f;
  for (size_t i = 0; i < count; i += 4099) {
    EXPECT_NEAR(data[0][i], rank_mean + 0.5f * (i % 97), 1e-5) << i;
  }
  // The contract: bitwise the same on every rank.
  for (int r = 1; r < world; ++r) EXPECT_EQ(data[r], data[0]) << "rank " << r;
}

// A peer that never joins: rank 0 must not hang; the communicator is
// aborted after XL_NCCL_TIMEOUT_S and the error says so.
TEST(NcclCollective, MissingPeerTimesOutAndAborts) {
  XL_SKIP_WITHOUT_GPU();
  setenv("XL_NCCL_TIMEOUT_S", "5", 1);
  InMemoryRendezvous rdv;
  std::vector<float> data(16, 1.0f);
  absl::Status st =
      CudaAllReduceForTest(0, 0, 2, &rdv, "nccl/test-lonely", &data);
  unsetenv("XL_NCCL_TIMEOUT_S");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("aborted"), std::string::npos) << st;
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st;
}

}  // namespace
}  // namespace xl::worker
