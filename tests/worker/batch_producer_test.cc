// BatchProducer: the batches it makes ahead, on any number of threads and
// slots and whatever the consumer's timing, are bitwise those of making each
// batch in the loop (synthetic and shards), from step 0 or a resumed step;
// a bad shard record surfaces at the Acquire of its step; misuse is refused;
// destruction never waits for a consumer.
#include "agent/worker/data/batch_producer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/worker/data/data.h"

namespace xl::worker {
namespace {

namespace fs = std::filesystem;

TrainConfig SmallConfig() {
  TrainConfig c;
  c.input_dim = 7;  // odd: the last normal of a row is half a pair
  c.classes = 5;
  c.batch_per_rank = 6;
  c.seed = 11;
  return c;
}

// Makes steps [first, end) through a producer and checks each against
// SyntheticData::Batch, sleeping a varying few hundred microseconds between
// steps so that the producer is sometimes ahead and sometimes behind.
void CheckSynthetic(const TrainConfig& c, int rank, int world, int64_t first,
                    int64_t end, int slots, int threads) {
  SCOPED_TRACE(testing::Message() << "slots " << slots << " threads "
                                  << threads << " first " << first);
  const size_t xn = static_cast<size_t>(c.batch_per_rank) * c.input_dim;
  std::vector<float> x(slots * xn);
  std::vector<int32_t> l(slots * static_cast<size_t>(c.batch_per_rank));
  std::vector<BatchSlot> s;
  for (int i = 0; i < slots; ++i) {
    s.push_back({x.data() + i * xn, l.data() + i * c.batch_per_rank});
  }
  auto p = BatchProducer::Start(c, rank, world, first, end, s, threads);
  ASSERT_TRUE(p.ok()) << p.status();
  SyntheticData data(c);
  std::vector<float> want_x(xn);
  std::vector<int32_t> want_l(c.batch_per_rank);
  for (int64_t step = first; step < end; ++step) {
    auto got = (*p)->Acquire(step);
    ASSERT_TRUE(got.ok()) << got.status();
    data.Batch(step, rank, world, want_x.data(), want_l.data());
    for (size_t i = 0; i < xn; ++i) {
      ASSERT_EQ(got->x[i], want_x[i]) << "step " << step << " element " << i;
    }
    for (int i = 0; i < c.batch_per_rank; ++i) {
      ASSERT_EQ(got->labels[i], want_l[i]) << "step " << step << " row " << i;
    }
    // Scribble over the slot: a producer that wrote into a held slot, or
    // handed out a stale one, would show in a later step's check.
    std::fill(got->x, got->x + xn, -1.0f);
    // Hold the slot for a varying while (busy work, no clock).
    volatile double spin = 0;
    for (int i = 0; i < (step * 7919) % 200000; ++i) spin = spin + i;
    (*p)->Release(step);
  }
}

TEST(BatchProducer, SyntheticEqualsInLoopWhateverThreadsAndSlots) {
  const TrainConfig c = SmallConfig();
  for (int slots : {1, 2, 3}) {
    for (int threads : {1, 2, 4, 6, 9}) {  // 9 > rows: capped at 6
      CheckSynthetic(c, /*rank=*/1, /*world=*/3, /*first=*/0, /*end=*/12,
                     slots, threads);
    }
  }
  // Resumed at step 5 of 9.
  CheckSynthetic(c, 0, 2, 5, 9, 2, 3);
}

TEST(BatchProducer, ShardsEqualTheReaderInOrder) {
  char tmpl[] = "/tmp/xl-producer-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  TrainConfig c = SmallConfig();
  ASSERT_TRUE(WriteSyntheticShards(dir, c, 200, 17).ok());
  c.shards = dir + "/*.xls";
  const size_t xn = static_cast<size_t>(c.batch_per_rank) * c.input_dim;
  std::vector<float> x(2 * xn);
  std::vector<int32_t> l(2 * c.batch_per_rank);
  auto p = BatchProducer::Start(
      c, 1, 2, 3, 20,
      {{x.data(), l.data()}, {x.data() + xn, l.data() + c.batch_per_rank}},
      /*threads=*/4);
  ASSERT_TRUE(p.ok()) << p.status();
  auto reader = ShardReader::Open(c.shards, c, 1, 2, 3);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<float> want_x(xn);
  std::vector<int32_t> want_l(c.batch_per_rank);
  for (int64_t step = 3; step < 20; ++step) {
    auto got = (*p)->Acquire(step);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE((*reader)->Next(want_x.data(), want_l.data()).ok());
    ASSERT_EQ(std::vector<float>(got->x, got->x + xn), want_x) << step;
    ASSERT_EQ(std::vector<int32_t>(got->labels, got->labels + 6), want_l);
    (*p)->Release(step);
  }
  p->reset();
  fs::remove_all(dir);
}

TEST(BatchProducer, MissingShardsFailAtStart) {
  TrainConfig c = SmallConfig();
  c.shards = "/nonexistent-xl-dir/*.xls";
  std::vector<float> x(42);
  std::vector<int32_t> l(6);
  auto p = BatchProducer::Start(c, 0, 1, 0, 5, {{x.data(), l.data()}}, 1);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
}

TEST(BatchProducer, StopsWithoutAConsumer) {
  // The producer fills both slots and waits; the destructor must end it.
  const TrainConfig c = SmallConfig();
  std::vector<float> x(2 * 42);
  std::vector<int32_t> l(12);
  auto p = BatchProducer::Start(c, 0, 1, 0, 1000000,
                                {{x.data(), l.data()}, {x.data() + 42, l.data() + 6}},
                                3);
  ASSERT_TRUE(p.ok());
  auto got = (*p)->Acquire(0);
  ASSERT_TRUE(got.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p->reset();  // returns: the test would time out otherwise
}

TEST(BatchProducer, ABadShardRecordSurfacesAtItsStep) {
  char tmpl[] = "/tmp/xl-producer-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  TrainConfig c = SmallConfig();
  c.batch_per_rank = 4;
  // 12 samples; sample 9's label is out of range (classes is 5).
  std::vector<float> x(12 * c.input_dim, 0.5f);
  std::vector<int32_t> l(12, 1);
  l[9] = 7;
  ASSERT_TRUE(WriteShard(dir + "/shard-00000.xls", c.input_dim, c.classes,
                         x.data(), l.data(), 12)
                  .ok());
  c.shards = dir + "/*.xls";
  std::vector<float> sx(2 * 4 * c.input_dim);
  std::vector<int32_t> sl(8);
  auto p = BatchProducer::Start(
      c, 0, 1, 0, 3,
      {{sx.data(), sl.data()}, {sx.data() + 4 * c.input_dim, sl.data() + 4}},
      1);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE((*p)->Acquire(step).ok()) << step;
    (*p)->Release(step);
  }
  absl::StatusOr<BatchSlot> bad = (*p)->Acquire(2);  // samples 8..11
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shard-00000.xls"), std::string::npos)
      << bad.status();
  p->reset();
  fs::remove_all(dir);
}

TEST(BatchProducer, MisuseIsRefusedNotADeadlock) {
  const TrainConfig c = SmallConfig();
  std::vector<float> x(2 * 42);
  std::vector<int32_t> l(12);
  auto p = BatchProducer::Start(
      c, 0, 1, 0, 3, {{x.data(), l.data()}, {x.data() + 42, l.data() + 6}}, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Acquire(1).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*p)->Acquire(0).ok());
  (*p)->Release(0);
  (*p)->Release(0);  // a duplicate: ignored
  (*p)->Release(5);  // never acquired: ignored
  ASSERT_TRUE((*p)->Acquire(1).ok());
  (*p)->Release(1);
  ASSERT_TRUE((*p)->Acquire(2).ok());
  (*p)->Release(2);
  EXPECT_EQ((*p)->Acquire(3).status().code(), absl::StatusCode::kOutOfRange)
      << "past the end";
}

TEST(BatchProducer, ThreadsLeaveTheLoopACore) {
  EXPECT_GE(ProducerThreads(16), 1);
  EXPECT_LE(ProducerThreads(16), 16);
  EXPECT_EQ(ProducerThreads(1), 1);
  // More ranks on the node than cores: still one thread each.
  ::setenv("LOCAL_WORLD_SIZE", "4096", 1);
  EXPECT_EQ(ProducerThreads(16), 1);
  ::unsetenv("LOCAL_WORLD_SIZE");
}

}  // namespace
}  // namespace xl::worker
