// Tests of the files xl-agent and xl-rank-shim share (rank_shim.h): the spec
// the agent writes and the shim (root, before it changes user) reads, and the
// status the shim writes and the agent reads. No processes.
#include "agent/shim/rank_shim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace xl::agent::shim {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Values no line-based format would carry: newlines, a field header inside
// a value, NUL and bytes that are not UTF-8, spaces at both ends.
const std::string kAwkward =
    std::string("a\nb\n\nend 0\n\n") + '\0' + "\xff\xfe  x y  ";

Spec FullSpec() {
  Spec spec;
  spec.job_id = "job-1 " + kAwkward;
  spec.attempt = std::numeric_limits<int>::max();
  spec.rank = -3;
  spec.lease_file = "/state/lease\n";
  spec.grace_ms = std::numeric_limits<int64_t>::max();
  spec.dirs = {{"/work/jobs", 0711, false, "jobs directory", "; fix a"},
               {"/work/jobs/j", 07777, true, kAwkward, ""},
               {"", 0, false, "", kAwkward}};
  spec.dir = "/work/jobs/j/1";
  spec.program = "python3";
  spec.search_path = "/usr/bin:/bin";
  spec.argv = {"python3", "", kAwkward, "arg 3\n"};
  spec.env = {"A=1", "EMPTY=", "NL=" + kAwkward, ""};
  spec.change_user = true;
  spec.uid = std::numeric_limits<uint32_t>::max();
  spec.gid = 1002;
  spec.groups = {0, 27, std::numeric_limits<uint32_t>::max()};
  spec.user_name = "alice";
  spec.cgroup_procs = {"/sys/fs/cgroup/cpu/xl/j-1/cgroup.procs",
                       "/sys/fs/cgroup/memory/xl/j-1/cgroup.procs"};
  spec.cgroup_dir = "/sys/fs/cgroup/cpu/xl/j-1";
  spec.checkpoint_dir = "/shared/ckpt/" + kAwkward;
  spec.open_files = std::numeric_limits<uint64_t>::max();
  spec.record = "job j\nattempt 1\n";
  return spec;
}

void ExpectSameSpec(const Spec& got, const Spec& want) {
  EXPECT_EQ(got.job_id, want.job_id);
  EXPECT_EQ(got.attempt, want.attempt);
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.lease_file, want.lease_file);
  EXPECT_EQ(got.grace_ms, want.grace_ms);
  ASSERT_EQ(got.dirs.size(), want.dirs.size());
  for (size_t i = 0; i < want.dirs.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("dir ", i));
    EXPECT_EQ(got.dirs[i].path, want.dirs[i].path);
    EXPECT_EQ(got.dirs[i].mode, want.dirs[i].mode);
    EXPECT_EQ(got.dirs[i].give_to_user, want.dirs[i].give_to_user);
    EXPECT_EQ(got.dirs[i].what, want.dirs[i].what);
    EXPECT_EQ(got.dirs[i].fix, want.dirs[i].fix);
  }
  EXPECT_EQ(got.dir, want.dir);
  EXPECT_EQ(got.program, want.program);
  EXPECT_EQ(got.search_path, want.search_path);
  EXPECT_EQ(got.argv, want.argv);
  EXPECT_EQ(got.env, want.env);
  EXPECT_EQ(got.change_user, want.change_user);
  EXPECT_EQ(got.uid, want.uid);
  EXPECT_EQ(got.gid, want.gid);
  EXPECT_EQ(got.groups, want.groups);
  EXPECT_EQ(got.user_name, want.user_name);
  EXPECT_EQ(got.cgroup_procs, want.cgroup_procs);
  EXPECT_EQ(got.cgroup_dir, want.cgroup_dir);
  EXPECT_EQ(got.checkpoint_dir, want.checkpoint_dir);
  EXPECT_EQ(got.open_files, want.open_files);
  EXPECT_EQ(got.record, want.record);
}

// Decodes `data`, expecting a refusal whose words contain `why`.
void ExpectRefused(const std::string& data, const std::string& why) {
  Spec spec;
  std::string error;
  EXPECT_FALSE(DecodeSpec(data, &spec, &error)) << data;
  EXPECT_THAT(error, HasSubstr(why)) << data;
}

// The encoding of FullSpec() with the value of the field `name` (its first
// occurrence) replaced by `value`.
std::string WithField(const std::string& name, const std::string& value) {
  std::string data = EncodeSpec(FullSpec());
  const std::string header = name + " ";
  const size_t at = data.compare(0, header.size(), header) == 0
                        ? 0
                        : data.find("\n" + header) + 1;
  const size_t nl = data.find('\n', at);
  const size_t length = std::stoul(data.substr(at + header.size()));
  data.replace(at, nl + 1 + length - at,
               absl::StrCat(header, value.size(), "\n", value));
  return data;
}

TEST(RankShimSpecTest, EveryFieldComesBackAsItWas) {
  const Spec want = FullSpec();
  const std::string data = EncodeSpec(want);
  Spec got;
  std::string error;
  ASSERT_TRUE(DecodeSpec(data, &got, &error)) << error;
  ExpectSameSpec(got, want);
  // One encoding for one spec: what comes back encodes to the same bytes.
  EXPECT_EQ(EncodeSpec(got), data);
}

TEST(RankShimSpecTest, ADefaultSpecWithACommandComesBack) {
  Spec want;
  want.dir = "/";
  want.program = "true";
  want.argv = {"true"};
  Spec got;
  std::string error;
  ASSERT_TRUE(DecodeSpec(EncodeSpec(want), &got, &error)) << error;
  ExpectSameSpec(got, want);
}

TEST(RankShimSpecTest, DecodingReplacesWhatTheSpecHeld) {
  Spec got = FullSpec();
  Spec want;
  want.dir = "/";
  want.program = "true";
  want.argv = {"true"};
  std::string error;
  ASSERT_TRUE(DecodeSpec(EncodeSpec(want), &got, &error)) << error;
  ExpectSameSpec(got, want);
}

// A newer agent's fields do not stop an older shim.
TEST(RankShimSpecTest, FieldsItDoesNotKnowAreSkipped) {
  std::string data = EncodeSpec(FullSpec());
  data.insert(0, "future.field 8\nend 0\n\nx\n");
  data.insert(data.rfind("end 0\n"), "dir.future 2\nab\n");
  Spec got;
  std::string error;
  ASSERT_TRUE(DecodeSpec(data, &got, &error)) << error;
  ExpectSameSpec(got, FullSpec());
}

// The shim reads the file the agent wrote and renamed into place; a spec
// cut anywhere (a disk that lost its end) is refused, never half run.
TEST(RankShimSpecTest, EveryCutOfASpecIsRefused) {
  const std::string data = EncodeSpec(FullSpec());
  for (size_t size = 0; size < data.size(); ++size) {
    Spec spec;
    std::string error;
    ASSERT_FALSE(DecodeSpec(data.substr(0, size), &spec, &error)) << size;
    EXPECT_THAT(error, Not(IsEmpty())) << size;
  }
}

TEST(RankShimSpecTest, BrokenFramingIsRefused) {
  ExpectRefused("job 100\nabc\nend 0\n\n", "bad field header \"job 100\"");
  ExpectRefused("job 3\nabcXend 0\n\n", "bad field header \"job 3\"");
  ExpectRefused("job\nabc\nend 0\n\n", "bad field header \"job\"");
  ExpectRefused("job x\nabc\nend 0\n\n", "bad field header \"job x\"");
  ExpectRefused("job -1\nabc\nend 0\n\n", "bad field header \"job -1\"");
  ExpectRefused("job 3", "cut short");
  ExpectRefused("", "cut short");
  // A header's bytes are escaped in the words.
  ExpectRefused(std::string("j\x01\xff 99\n"),
                "bad field header \"j\\x01\\xff 99\"");
}

// A length so large that adding the header's size to it wraps around: an
// unchecked sum skips just the header (2^64 - 1 here) and reads the rest
// again as fields, or skips nothing and loops for ever (2^64 - 24).
TEST(RankShimSpecTest, ALengthThatWouldWrapAroundIsRefused) {
  const uint64_t length = std::numeric_limits<uint64_t>::max();
  const std::string data =
      absl::StrCat("x ", length, "\n", EncodeSpec(FullSpec()));
  ExpectRefused(data, "bad field header");
}

TEST(RankShimSpecTest, NumbersOutOfTheirFieldsRangeAreRefused) {
  const struct {
    const char* name;
    const char* value;
  } kBad[] = {
      {"attempt", "2147483648"},
      {"attempt", "x"},
      {"rank", "-2147483649"},
      {"rank", ""},
      {"grace_ms", "-1"},
      {"grace_ms", "9223372036854775808"},
      {"dir.mode", "-1"},
      {"dir.mode", "4096"},
      {"uid", "-1"},
      {"uid", "4294967296"},
      {"gid", "4294967296"},
      {"group", "-1"},
      {"group", "1 2"},
      {"open_files", "-1"},
      {"open_files", "18446744073709551616"},
      {"version", "2"},
      {"change_user", "yes"},
      {"dir.give", "2"},
  };
  for (const auto& bad : kBad) {
    SCOPED_TRACE(absl::StrCat(bad.name, " ", bad.value));
    ExpectRefused(WithField(bad.name, bad.value),
                  absl::StrCat("bad value for ", bad.name));
  }
  // The edges themselves are values (FullSpec has the others).
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"attempt", "-2147483648"},
           {"dir.mode", "0"},
           {"uid", "0"},
           {"grace_ms", "0"},
           {"change_user", "0"}}) {
    Spec spec;
    std::string error;
    EXPECT_TRUE(DecodeSpec(WithField(name, value), &spec, &error))
        << name << " " << value << ": " << error;
  }
}

TEST(RankShimSpecTest, ADirectoryFieldBeforeItsDirectoryIsRefused) {
  ExpectRefused("dir.mode 3\n448\nend 0\n\n", "bad value for dir.mode");
}

TEST(RankShimSpecTest, ASpecWithoutACommandOrWorkingDirectoryIsRefused) {
  for (const char* field : {"cwd", "program"}) {
    ExpectRefused(WithField(field, ""),
                  "the spec has no command or working directory");
  }
  Spec no_argv = FullSpec();
  no_argv.argv.clear();
  ExpectRefused(EncodeSpec(no_argv),
                "the spec has no command or working directory");
}

TEST(RankShimSpecTest, ASpecOverTheLimitIsRefusedAndOneAtItIsRead) {
  Spec spec = FullSpec();
  spec.record.clear();
  const size_t rest = EncodeSpec(spec).size();
  spec.record.assign(kMaxSpecBytes - rest, 'r');
  std::string data = EncodeSpec(spec);
  // The record's length has more digits than the empty one's "0".
  const size_t extra = data.size() - kMaxSpecBytes;
  spec.record.resize(spec.record.size() - extra);
  data = EncodeSpec(spec);
  ASSERT_EQ(data.size(), kMaxSpecBytes);
  Spec got;
  std::string error;
  EXPECT_TRUE(DecodeSpec(data, &got, &error)) << error;
  EXPECT_EQ(got.record.size(), spec.record.size());

  spec.record.push_back('r');
  ExpectRefused(EncodeSpec(spec),
                absl::StrCat("the spec is ", kMaxSpecBytes + 1,
                             " bytes; at most ", kMaxSpecBytes, " are read"));
}

Status FullStatus(Status::Phase phase) {
  Status status;
  status.phase = phase;
  status.pid = 4242;
  status.node_fault = true;
  status.wait_status = 0x8b;
  status.stdout_bytes = std::numeric_limits<int64_t>::max();
  status.stderr_bytes = 7;
  status.stdout_dropped = 11;
  status.stderr_dropped = 13;
  status.lease_stop = true;
  status.message = "cannot chdir to \"/a\nb\": No such file\\dir " + kAwkward;
  return status;
}

TEST(RankShimStatusTest, EveryFieldOfEveryPhaseComesBack) {
  for (Status::Phase phase :
       {Status::kStarting, Status::kRunning, Status::kFailed, Status::kExited,
        Status::kDone}) {
    SCOPED_TRACE(phase);
    const Status want = FullStatus(phase);
    const std::string data = EncodeStatus(want);
    Status got;
    ASSERT_TRUE(DecodeStatus(data, &got)) << data;
    EXPECT_EQ(got.phase, want.phase);
    EXPECT_EQ(got.pid, want.pid);
    EXPECT_EQ(got.node_fault, want.node_fault);
    EXPECT_EQ(got.wait_status, want.wait_status);
    EXPECT_EQ(got.stdout_bytes, want.stdout_bytes);
    EXPECT_EQ(got.stderr_bytes, want.stderr_bytes);
    EXPECT_EQ(got.stdout_dropped, want.stdout_dropped);
    EXPECT_EQ(got.stderr_dropped, want.stderr_dropped);
    EXPECT_EQ(got.lease_stop, want.lease_stop);
    EXPECT_EQ(got.message, want.message);
    // One line per field: the message's newlines are escaped.
    EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 10);
  }
}

TEST(RankShimStatusTest, AStatusWithoutAPhaseOrARanRankWithoutAPidIsRefused) {
  Status status;
  EXPECT_FALSE(DecodeStatus("", &status));
  EXPECT_FALSE(DecodeStatus("pid 4242\n", &status));
  EXPECT_FALSE(DecodeStatus("phase sleeping\npid 4242\n", &status));
  EXPECT_FALSE(DecodeStatus("phase Running\npid 4242\n", &status));
  // A signal to pid 0 or 1 would hit the agent's group or init.
  for (const char* phase : {"running", "exited", "done"}) {
    SCOPED_TRACE(phase);
    EXPECT_FALSE(DecodeStatus(absl::StrCat("phase ", phase, "\n"), &status));
    EXPECT_FALSE(
        DecodeStatus(absl::StrCat("phase ", phase, "\npid 1\n"), &status));
    EXPECT_FALSE(
        DecodeStatus(absl::StrCat("phase ", phase, "\npid -5\n"), &status));
    EXPECT_FALSE(
        DecodeStatus(absl::StrCat("phase ", phase, "\npid x\n"), &status));
    EXPECT_TRUE(
        DecodeStatus(absl::StrCat("phase ", phase, "\npid 2\n"), &status));
  }
  EXPECT_TRUE(DecodeStatus("phase starting\n", &status));
  EXPECT_TRUE(DecodeStatus("phase failed\nmessage no\n", &status));
  EXPECT_EQ(status.message, "no");
}

// Another version's shim may write fewer keys or more: what is missing or
// unreadable is 0, what is unknown is skipped.
TEST(RankShimStatusTest, MissingAndUnknownKeysAreReadLeniently) {
  Status status;
  ASSERT_TRUE(
      DecodeStatus("phase exited\npid 99\nwait_status 256\nstdout x\nfuture 5\n"
                   "message bad escape \\q\n",
                   &status));
  EXPECT_EQ(status.phase, Status::kExited);
  EXPECT_EQ(status.pid, 99);
  EXPECT_EQ(status.wait_status, 256);
  EXPECT_EQ(status.stdout_bytes, 0);
  EXPECT_EQ(status.stderr_bytes, 0);
  EXPECT_FALSE(status.lease_stop);
  EXPECT_EQ(status.message, "bad escape \\q");  // Taken as it is.
}

TEST(RankShimStatusTest, DecodingReplacesWhatTheStatusHeld) {
  Status status = FullStatus(Status::kExited);
  ASSERT_TRUE(DecodeStatus("phase starting\n", &status));
  EXPECT_EQ(status.pid, 0);
  EXPECT_FALSE(status.node_fault);
  EXPECT_EQ(status.stdout_bytes, 0);
  EXPECT_EQ(status.message, "");
}

TEST(RankShimLinesTest, ParseLinesAndInt) {
  const auto lines = ParseLines("a 1\nb two words \n\nflag\na 3\nn -7\n");
  EXPECT_EQ(lines.at("a"), "3");  // The last one.
  EXPECT_EQ(lines.at("b"), "two words ");
  EXPECT_EQ(lines.at("flag"), "");
  EXPECT_EQ(Int(lines, "a"), 3);
  EXPECT_EQ(Int(lines, "n"), -7);
  EXPECT_EQ(Int(lines, "b", 5), 5);
  EXPECT_EQ(Int(lines, "missing", 10000), 10000);
}

TEST(RankShimLeaseTest, LeaseIsANumberOrNone) {
  EXPECT_EQ(EncodeLease(-1), "none\n");
  EXPECT_EQ(EncodeLease(0), "0\n");
  EXPECT_EQ(EncodeLease(123456789012), "123456789012\n");
}

}  // namespace
}  // namespace xl::agent::shim
