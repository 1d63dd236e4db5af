// The pieces of xl-train's TensorBoard event files that a reader checks:
// CRC-32C (the iSCSI test vectors), the record framing and the Event bytes.
// tests/worker/test_tensorboard.py reads a real run's file back with
// Python's protobuf and a CRC of its own.
#include "agent/worker/loop/tensorboard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace xl::worker {
namespace {

TEST(TensorBoardTest, Crc32cMatchesTheKnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
}

TEST(TensorBoardTest, ARecordIsLengthCrcDataCrc) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t length_crc, data_crc;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 15, 4);
  EXPECT_EQ(length_crc, MaskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, MaskedCrc32c("abc"));
  // Masked: rotated right by 15 and offset.
  const uint32_t crc = Crc32c("abc");
  EXPECT_EQ(MaskedCrc32c("abc"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardTest, AScalarEventHasItsStepTagAndValue) {
  const std::string event = ScalarEvent(1.5, 300, {{"train/loss", 0.25f}});
  // wall_time (field 1, fixed64), step (field 2, varint 300 = ac 02).
  ASSERT_GE(event.size(), 12u);
  EXPECT_EQ(static_cast<unsigned char>(event[0]), 0x09);
  double wall;
  std::memcpy(&wall, event.data() + 1, 8);
  EXPECT_EQ(wall, 1.5);
  EXPECT_EQ(event.substr(9, 3), std::string("\x10\xac\x02", 3));
  EXPECT_NE(event.find("train/loss"), std::string::npos);
  float value = 0.25f;
  EXPECT_NE(event.find(std::string("\x15", 1) +
                       std::string(reinterpret_cast<char*>(&value), 4)),
            std::string::npos);
}

}  // namespace
}  // namespace xl::worker
