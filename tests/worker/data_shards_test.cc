// Shard files: write, read back through the prefetching reader, rank
// striding, wrap-around, bad files; and that training on shards of the
// teacher data equals training on the synthetic source bit for bit.
#include "agent/worker/data/data_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "agent/worker/data/data.h"
#include "rank_threads.h"

namespace xl::worker {
namespace {

namespace fs = std::filesystem;

class ShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-shards-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    c_.input_dim = 3;
    c_.classes = 1000;  // so that labels (= sample numbers) fit
    c_.batch_per_rank = 4;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Shards where sample n has x = {n, n + 0.5, -n} and label n, split
  // into files of 7, 7 and 6 samples.
  void WriteNumbered(uint64_t total) {
    for (uint64_t first = 0, f = 0; first < total; first += 7, ++f) {
      uint64_t n = std::min<uint64_t>(7, total - first);
      std::vector<float> x;
      std::vector<int32_t> l;
      for (uint64_t i = first; i < first + n; ++i) {
        x.insert(x.end(), {float(i), float(i) + 0.5f, -float(i)});
        l.push_back(static_cast<int32_t>(i));
      }
      ASSERT_TRUE(WriteShard(dir_ + "/part-" + std::to_string(f) + ".xls", 3,
                             1000, x.data(), l.data(), n)
                      .ok());
    }
  }

  std::string dir_;
  TrainConfig c_;
};

TEST_F(ShardsTest, FormatIsAsDocumented) {
  float x[3] = {1.5f, -2, 3};
  int32_t l = 9;
  ASSERT_TRUE(WriteShard(dir_ + "/a.xls", 3, 10, x, &l, 1).ok());
  EXPECT_EQ(fs::file_size(dir_ + "/a.xls"), kShardHeaderBytes + 16);
  std::FILE* f = std::fopen((dir_ + "/a.xls").c_str(), "rb");
  unsigned char b[36];
  ASSERT_EQ(std::fread(b, 1, 36, f), 36u);
  std::fclose(f);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(b), 4), "XLS1");
  EXPECT_EQ(b[4], 3);   // input_dim, little-endian
  EXPECT_EQ(b[8], 10);  // classes
  EXPECT_EQ(b[12], 1);  // count
  float x1;
  std::memcpy(&x1, b + 20, 4);
  EXPECT_EQ(x1, 1.5f);
  EXPECT_EQ(b[32], 9);  // label
}

TEST_F(ShardsTest, RanksStrideAndWrapAround) {
  WriteNumbered(20);  // 20 samples, 5 batches of 4
  const int world = 2;
  for (int rank = 0; rank < world; ++rank) {
    auto r = ShardReader::Open(dir_ + "/part-*.xls", c_, rank, world,
                               /*first_step=*/1, /*depth=*/2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->total_samples(), 20u);
    std::vector<float> x(12);
    std::vector<int32_t> l(4);
    for (int64_t step = 1; step < 6; ++step) {
      ASSERT_TRUE((*r)->Next(x.data(), l.data()).ok());
      const uint64_t g = step * world + rank;  // global batch
      for (int i = 0; i < 4; ++i) {
        const uint64_t n = (g * 4 + i) % 20;
        EXPECT_EQ(l[i], static_cast<int32_t>(n)) << "step " << step;
        EXPECT_EQ(x[i * 3 + 1], float(n) + 0.5f);
        EXPECT_EQ(x[i * 3 + 2], -float(n));
      }
    }
  }
}

TEST_F(ShardsTest, BadFilesAreNamed) {
  auto none = ShardReader::Open(dir_ + "/nothing-*.xls", c_, 0, 1, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  WriteNumbered(7);
  TrainConfig other = c_;
  other.input_dim = 4;
  auto bad = ShardReader::Open(dir_ + "/part-*.xls", other, 0, 1, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("part-0.xls"), std::string::npos);
  EXPECT_NE(bad.status().message().find("input_dim"), std::string::npos);
  // Labels out of range come back from Next, naming the file.
  TrainConfig few = c_;
  few.classes = 3;
  ASSERT_TRUE(WriteShard(dir_ + "/few.xls", 3, 3,
                         std::vector<float>(12, 0).data(),
                         std::vector<int32_t>{0, 1, 2, 7}.data(), 4)
                  .ok());
  auto r = ShardReader::Open(dir_ + "/few.xls", few, 0, 1, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> x(12);
  std::vector<int32_t> l(4);
  absl::Status st = (*r)->Next(x.data(), l.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("few.xls"), std::string::npos);
}

TEST_F(ShardsTest, TrainingOnTeacherShardsEqualsSynthetic) {
  TrainConfig c;
  c.input_dim = 6;
  c.hidden_dim = 12;
  c.hidden_layers = 1;
  c.classes = 3;
  c.batch_per_rank = 5;
  c.steps = 6;
  c.metrics_every = 1;
  const int world = 2;
  auto paths = WriteSyntheticShards(dir_ + "/teacher", c,
                                    c.steps * world * c.batch_per_rank, 13);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(paths->size(), 5u);  // 60 samples, 13 per file
  auto synthetic = testing::Train(c, world, "");
  TrainConfig from_files = c;
  from_files.shards = dir_ + "/teacher/shard-*.xls";
  auto shards = testing::Train(from_files, world, "");
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(synthetic.status[r].ok()) << synthetic.status[r];
    ASSERT_TRUE(shards.status[r].ok()) << shards.status[r];
  }
  EXPECT_EQ(synthetic.params[0], shards.params[0]);
  ASSERT_EQ(synthetic.reports.size(), shards.reports.size());
  for (size_t i = 0; i < shards.reports.size(); ++i) {
    EXPECT_EQ(synthetic.reports[i].loss(), shards.reports[i].loss());
  }
}

}  // namespace
}  // namespace xl::worker
