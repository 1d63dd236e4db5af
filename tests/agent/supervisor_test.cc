// Tests of the process supervisor with real child processes. /bin/sh -c is
// used as the ranks' argv here only because argv is arbitrary; the
// supervisor itself never runs a shell.
#include "agent/supervisor/supervisor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/shim/rank_shim.h"
#include "common/clock.h"
#include "common/duration.h"
#include "tests/agent/recording_sink.h"

namespace xl::agent {
namespace {

// The supervisor as a single-user development agent runs it: ranks as the
// test's own user (root in CI) and no cgroups.
SupervisorOptions AgentUserOptions() {
  SupervisorOptions options;
  options.shim_binary = XL_RANK_SHIM;
  options.run_as = RunAs::kAgent;
  options.allow_root_jobs = true;
  return options;
}

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "xl-sup-test-XXXXXX")
            .string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool GroupGone(int pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

// Polls `pred` until it holds; false at the deadline.
template <typename Pred>
bool WaitUntil(Pred pred, absl::Duration timeout = kWait) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

// Polls until the process group is gone; false at the deadline.
bool WaitGroupGone(int pgid, absl::Duration timeout = kWait) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (GroupGone(pgid)) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return GroupGone(pgid);
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(supervisor_->Start().ok()); }

  SupervisorOptions Options() {
    SupervisorOptions options = AgentUserOptions();
    options.work_dir = dir_.path() + "/work";
    options.scratch_dir = dir_.path() + "/scratch";
    return options;
  }

  static v1::StartRanks Job(const std::string& job, int attempt,
                            std::vector<std::string> argv,
                            std::vector<int> ranks = {0}) {
    v1::StartRanks start;
    start.set_job_id(job);
    start.set_attempt(attempt);
    for (std::string& a : argv) start.add_argv(std::move(a));
    for (int r : ranks) {
      v1::RankLaunch* launch = start.add_ranks();
      launch->set_rank(r);
      (*launch->mutable_env())["RANK"] = std::to_string(r);
    }
    return start;
  }

  static v1::StartRanks Shell(const std::string& job, const std::string& script,
                              int attempt = 1) {
    return Job(job, attempt, {"/bin/sh", "-c", script});
  }

  static v1::StopJob Stop(const std::string& job, int attempt,
                          absl::Duration grace) {
    v1::StopJob stop;
    stop.set_job_id(job);
    stop.set_attempt(attempt);
    *stop.mutable_grace_period() = ToProtoDuration(grace);
    stop.set_reason("test");
    return stop;
  }

  TempDir dir_;
  RecordingSink sink_;
  std::unique_ptr<Supervisor> supervisor_ =
      std::make_unique<Supervisor>(Options(), &sink_);
};

TEST_F(SupervisorTest, EnvironmentIsExactlyTheGivenOnePlusCheckpointAndPath) {
  v1::StartRanks start = Job("envjob", 1, {"env"});
  (*start.mutable_ranks(0)->mutable_env())["FOO"] = "bar baz";
  (*start.mutable_ranks(0)->mutable_env())["HOME"] = "/home/rank";
  supervisor_->StartRanks(start);
  v1::RankStatus end = sink_.WaitEnd("envjob", 1, 0);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(end.exit_code(), 0);

  std::set<std::string> got;
  for (absl::string_view line : absl::StrSplit(
           sink_.Output("envjob", 0, v1::STDOUT), '\n', absl::SkipEmpty())) {
    got.insert(std::string(line));
  }
  const std::string checkpoints = dir_.path() + "/scratch/checkpoints/envjob";
  std::set<std::string> want = {"RANK=0", "FOO=bar baz", "HOME=/home/rank",
                                "XL_CHECKPOINT_DIR=" + checkpoints,
                                "XL_METRICS_FD=3",
                                "TMPDIR=" + dir_.path() + "/work/tmp/envjob-1"};
  for (const char* name : {"PATH", "LANG"}) {
    if (const char* v = getenv(name)) want.insert(absl::StrCat(name, "=", v));
  }
  EXPECT_EQ(got, want);
  EXPECT_TRUE(std::filesystem::is_directory(checkpoints));
}

// StartRanks.env is every rank's; a rank's own env adds to it and wins.
TEST_F(SupervisorTest, SharedEnvironmentUnderTheRanksOwn) {
  v1::StartRanks start = Job("shared", 1, {"env"}, {0, 1});
  (*start.mutable_env())["ONLY_SHARED"] = "job";
  (*start.mutable_env())["BOTH"] = "job";
  (*start.mutable_env())["RANK"] = "shared rank";
  (*start.mutable_ranks(1)->mutable_env())["BOTH"] = "rank 1";
  supervisor_->StartRanks(start);
  for (int rank : {0, 1}) {
    v1::RankStatus end = sink_.WaitEnd("shared", 1, rank);
    ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  }
  auto lines = [this](int rank) {
    std::set<std::string> got;
    for (absl::string_view line :
         absl::StrSplit(sink_.Output("shared", rank, v1::STDOUT), '\n',
                        absl::SkipEmpty())) {
      got.insert(std::string(line));
    }
    return got;
  };
  std::set<std::string> rank0 = lines(0);
  std::set<std::string> rank1 = lines(1);
  EXPECT_TRUE(rank0.count("ONLY_SHARED=job"));
  EXPECT_TRUE(rank0.count("BOTH=job"));
  EXPECT_TRUE(rank0.count("RANK=0"));
  EXPECT_FALSE(rank0.count("RANK=shared rank"));
  EXPECT_TRUE(rank1.count("ONLY_SHARED=job"));
  EXPECT_TRUE(rank1.count("BOTH=rank 1"));
  EXPECT_FALSE(rank1.count("BOTH=job"));
  EXPECT_TRUE(rank1.count("RANK=1"));
}

TEST_F(SupervisorTest, DefaultWorkingDirectoryIsUnderWorkDir) {
  supervisor_->StartRanks(Job("wd", 2, {"pwd"}));
  v1::RankStatus end = sink_.WaitEnd("wd", 2, 0);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(sink_.Output("wd", 0, v1::STDOUT),
            dir_.path() + "/work/jobs/wd/2\n");
}

TEST_F(SupervisorTest, MissingWorkingDirectoryFailsToStart) {
  v1::StartRanks start = Job("wd", 1, {"pwd"});
  start.set_working_dir(dir_.path() + "/does-not-exist");
  supervisor_->StartRanks(start);
  v1::RankStatus end = sink_.WaitEnd("wd", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("cannot change to working directory"));
  EXPECT_THAT(end.message(), HasSubstr("fix working_dir"));
}

TEST_F(SupervisorTest, MetricsLinesOnFd3BecomeTrainMetrics) {
  supervisor_->StartRanks(Shell(
      "metrics",
      "echo '{\"step\": \"5\", \"loss\": 0.5}' >&3; echo 'not json' >&3; "
      "printf '{\"step\": \"6\"}' >&$XL_METRICS_FD; echo >&3; echo done"));
  v1::RankStatus end = sink_.WaitEnd("metrics", 1, 0);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  auto got = sink_.metrics();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step(), 5);
  EXPECT_DOUBLE_EQ(got[0].loss(), 0.5);
  EXPECT_EQ(got[0].job_id(), "metrics");
  EXPECT_EQ(got[1].step(), 6);
  // Metrics are not log output.
  EXPECT_EQ(sink_.Output("metrics", 0, v1::STDOUT), "done\n");
}

// A descriptor the agent opened without O_CLOEXEC (a library's, say) does
// not reach the rank (security review F13): it sees 0-3 only.
TEST_F(SupervisorTest, ARankInheritsNoDescriptorBeyondItsFour) {
  const int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GT(leaked, 3);
  supervisor_->StartRanks(Shell(
      "fds", absl::StrCat("for fd in 0 1 2 3 ", leaked,
                          "; do [ -e /proc/self/fd/$fd ] && echo $fd; done")));
  v1::RankStatus end = sink_.WaitEnd("fds", 1, 0);
  ::close(leaked);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(sink_.Output("fds", 0, v1::STDOUT), "0\n1\n2\n3\n");
}

// A rank that writes points flat out sends about 10 a second, the latest
// kept (security review F2): 20,000 lines in well under a second become a
// few points, the last of them step 20000.
TEST_F(SupervisorTest, MetricsWrittenFlatOutAreThinnedToTheLatest) {
  supervisor_->StartRanks(Shell(
      "flood",
      "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); "
      "echo \"{\\\"step\\\": \\\"$i\\\"}\"; done >&3"));
  v1::RankStatus end = sink_.WaitEnd("flood", 1, 0);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  auto got = sink_.metrics();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().step(), 20000);
  EXPECT_EQ(got.front().step(), 1);
  // dash writes 20,000 lines in about 0.2 s here; allow a slow machine 10 s.
  EXPECT_LE(got.size(), 100u) << "metrics were not thinned";
}

TEST_F(SupervisorTest, ReportsRunningWithPidThenExitCode) {
  supervisor_->StartRanks(Shell("exit3", "exit 3"));
  v1::RankStatus end = sink_.WaitEnd("exit3", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_EXITED);
  EXPECT_EQ(end.exit_code(), 3);
  EXPECT_EQ(end.signal(), 0);
  std::vector<RecordingSink::Event> events = sink_.events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].status.state(), v1::RANK_RUNNING);
  EXPECT_GT(events[0].status.pid(), 0);
  EXPECT_EQ(events[0].status.pid(), end.pid());
  // Nothing of the group remained: one exit status, and only one.
  EXPECT_FALSE(end.processes_remaining());
  ASSERT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
  int exits = 0;
  for (const RecordingSink::Event& e : sink_.events()) {
    exits += e.is_status && e.status.state() == v1::RANK_EXITED;
  }
  EXPECT_EQ(exits, 1);
}

TEST_F(SupervisorTest, ReportsTheSignalThatEndedARank) {
  supervisor_->StartRanks(Shell("sig", "kill -USR1 $$"));
  v1::RankStatus end = sink_.WaitEnd("sig", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_EXITED);
  EXPECT_EQ(end.signal(), SIGUSR1);
  EXPECT_EQ(end.exit_code(), 128 + SIGUSR1);
  EXPECT_THAT(end.message(), HasSubstr("signal"));
}

// Output the shim could not spool (the node's disk was full) is said in the
// rank's log where it would have been, and the agent logs it: `xlctl logs`
// never shows a gap, or nothing, without a word.
TEST_F(SupervisorTest, OutputLostToAFullDiskIsSaidInTheLog) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts a small tmpfs: needs root";
  TempDir mnt;
  ASSERT_EQ(::mount("tmpfs", mnt.path().c_str(), "tmpfs", 0, "size=2m"), 0)
      << strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt.path()};
  RecordingSink sink;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = mnt.path() + "/work";
  options.scratch_dir = dir_.path() + "/scratch";
  supervisor_.reset();  // one per process
  auto supervisor = std::make_unique<Supervisor>(options, &sink);
  const absl::Status started = supervisor->Start();
  ASSERT_TRUE(started.ok()) << started;
  // The rank fills the disk, writes 64 KiB that cannot be spooled, frees
  // the disk and says one more line.
  const std::string fill = mnt.path() + "/fill";
  supervisor->StartRanks(Shell(
      "full", absl::StrCat("echo before; dd if=/dev/zero of=", fill,
                           " bs=4k 2>/dev/null; head -c 65536 /dev/zero | "
                           "tr '\\0' x; echo; rm ",
                           fill, "; echo after")));
  v1::RankStatus end = sink.WaitEnd("full", 1, 0);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  ASSERT_TRUE(sink.WaitOutput("full", 0, "after\n"));
  const std::string out = sink.Output("full", 0, v1::STDOUT);
  EXPECT_EQ(out.rfind("before\n", 0), 0u) << out.substr(0, 200);
  EXPECT_THAT(out, HasSubstr("bytes of this rank's stdout were lost"));
  supervisor.reset();
}

// A sink that takes at most `room` bytes of output until given more, as the
// session does when its queue to the scheduler is full.
class NarrowSink : public RecordingSink {
 public:
  void OnLogChunk(v1::LogChunk chunk) override {
    taken_ += chunk.data().size();
    RecordingSink::OnLogChunk(std::move(chunk));
  }
  size_t LogRoom() const override {
    const size_t room = room_.load();
    return taken_ >= room ? 0 : room - taken_.load();
  }
  void Widen(size_t room) { room_ = taken_ + room; }
  std::atomic<size_t> room_{64 << 10};
  std::atomic<size_t> taken_{0};
};

// Output the session cannot take yet stays in the spool, on disk, and the
// rank's exit waits for it: nothing is dropped, and the exit still comes
// after everything the rank wrote before it. A restarted agent with much
// output to send again (or a rank that writes a lot at its end) used to
// overflow the session's queue, which dropped the oldest output.
TEST_F(SupervisorTest, OutputTheSessionCannotTakeWaitsInTheSpool) {
  NarrowSink sink;
  supervisor_.reset();  // one per process
  auto supervisor = std::make_unique<Supervisor>(Options(), &sink);
  ASSERT_TRUE(supervisor->Start().ok());
  // 1,000,003 bytes: 10,000 lines of 99 x (the last without its newline) and
  // "end".
  supervisor->StartRanks(Shell(
      "narrow", "head -c 990000 /dev/zero | tr '\\0' x | fold -w 99; echo end"));
  ASSERT_TRUE(sink.WaitOutput("narrow", 0, "xxxx"));
  absl::SleepFor(absl::Milliseconds(300));  // the rank is long done
  // What the room allowed, no more.
  EXPECT_LE(sink.Output("narrow", 0, v1::STDOUT).size(), size_t{64 << 10});
  for (const auto& e : sink.events()) {
    EXPECT_FALSE(e.is_status && e.status.state() == v1::RANK_EXITED)
        << "the exit came before the output written before it";
  }
  // Room comes a piece at a time, as the session sends.
  for (int i = 0; i < 200 && sink.Output("narrow", 0, v1::STDOUT).size() <
                                 1000003; ++i) {
    sink.Widen(256 << 10);
    supervisor->LogRoomFreed();
    absl::SleepFor(absl::Milliseconds(10));
  }
  v1::RankStatus end = sink.WaitEnd("narrow", 1, 0);
  const std::string out = sink.Output("narrow", 0, v1::STDOUT);
  EXPECT_EQ(out.size(), 1000003u);
  EXPECT_EQ(out.substr(out.size() - 4), "end\n");
  EXPECT_EQ(end.stdout_bytes(), 1000003);
  supervisor.reset();
}

TEST_F(SupervisorTest, CapturesStdoutAndStderrInOrderBeforeTheExit) {
  supervisor_->StartRanks(
      Shell("out",
            "for i in 1 2 3; do echo out$i; echo err$i >&2; done; "
            "printf partial"));
  v1::RankStatus end = sink_.WaitEnd("out", 1, 0);
  EXPECT_EQ(end.exit_code(), 0);
  EXPECT_EQ(sink_.Output("out", 0, v1::STDOUT), "out1\nout2\nout3\npartial");
  EXPECT_EQ(sink_.Output("out", 0, v1::STDERR), "err1\nerr2\nerr3\n");
  // The exit status is the last event of the rank.
  std::vector<RecordingSink::Event> events = sink_.events();
  ASSERT_TRUE(events.back().is_status);
  EXPECT_EQ(events.back().status.state(), v1::RANK_EXITED);
  for (const RecordingSink::Event& e : events) {
    if (e.is_status) continue;
    EXPECT_EQ(e.chunk.job_id(), "out");
    EXPECT_EQ(e.chunk.attempt(), 1);
    EXPECT_TRUE(e.chunk.has_time());
  }
}

TEST_F(SupervisorTest, PartialLineIsSentWhileTheRankRuns) {
  supervisor_->StartRanks(Shell("partial", "printf abc; exec sleep 100"));
  EXPECT_TRUE(sink_.WaitOutput("partial", 0, "abc"));
  supervisor_->StopJob(Stop("partial", 1, absl::Seconds(1)));
  EXPECT_EQ(sink_.WaitEnd("partial", 1, 0).signal(), SIGTERM);
}

TEST_F(SupervisorTest, LongOutputIsCutIntoChunksOfAtMost64KiB) {
  supervisor_->StartRanks(
      Shell("big", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo tail"));
  sink_.WaitEnd("big", 1, 0);
  size_t total = 0;
  for (const RecordingSink::Event& e : sink_.events()) {
    if (e.is_status) continue;
    EXPECT_LE(e.chunk.data().size(), 64u * 1024);
    total += e.chunk.data().size();
  }
  EXPECT_EQ(total, 200000u + 1 + 5);
  EXPECT_EQ(sink_.Output("big", 0, v1::STDOUT).substr(200000), "\ntail\n");
}

TEST_F(SupervisorTest, ExecveFailureIsFailedToStartWithAClearMessage) {
  supervisor_->StartRanks(Job("nope", 1, {"/bin/nope", "x"}));
  v1::RankStatus end = sink_.WaitEnd("nope", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(),
              HasSubstr("cannot execute /bin/nope: No such file or directory; "
                        "fix command[0] in the job spec"));
}

TEST_F(SupervisorTest, ProgramNotInPathIsFailedToStart) {
  supervisor_->StartRanks(Job("nope", 1, {"xl-no-such-program"}));
  v1::RankStatus end = sink_.WaitEnd("nope", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(),
              HasSubstr("xl-no-such-program: not found in PATH"));
}

TEST_F(SupervisorTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  supervisor_->StartRanks(
      Shell("stubborn", "trap '' TERM; echo ready; exec sleep 100"));
  int pid = sink_.WaitRunning("stubborn", 1, 0);
  ASSERT_TRUE(sink_.WaitOutput("stubborn", 0, "ready"));
  const absl::Duration grace = absl::Milliseconds(300);
  absl::Time stop_time = absl::Now();
  supervisor_->StopJob(Stop("stubborn", 1, grace));
  v1::RankStatus end = sink_.WaitEnd("stubborn", 1, 0);
  EXPECT_EQ(end.signal(), SIGKILL);
  EXPECT_GE(absl::Now() - stop_time, grace);
  EXPECT_TRUE(WaitGroupGone(pid));
}

TEST_F(SupervisorTest, StopLeavesNoBackgroundChildBehind) {
  supervisor_->StartRanks(Shell("bg", "sleep 100 & echo ready; wait"));
  int pid = sink_.WaitRunning("bg", 1, 0);
  ASSERT_TRUE(sink_.WaitOutput("bg", 0, "ready"));
  ASSERT_FALSE(GroupGone(pid));
  supervisor_->StopJob(Stop("bg", 1, absl::Seconds(2)));
  EXPECT_EQ(sink_.WaitEnd("bg", 1, 0).signal(), SIGTERM);
  EXPECT_TRUE(WaitGroupGone(pid, absl::Seconds(1)));
}

TEST_F(SupervisorTest, BackgroundChildIgnoringSigtermIsKilledAfterTheGrace) {
  supervisor_->StartRanks(
      Shell("bg2", "(trap '' TERM; exec sleep 100) & echo ready; wait"));
  int pid = sink_.WaitRunning("bg2", 1, 0);
  ASSERT_TRUE(sink_.WaitOutput("bg2", 0, "ready"));
  supervisor_->StopJob(Stop("bg2", 1, absl::Milliseconds(300)));
  // The leader dies of SIGTERM; its child lives until the SIGKILL.
  EXPECT_EQ(sink_.WaitEnd("bg2", 1, 0).signal(), SIGTERM);
  EXPECT_TRUE(WaitGroupGone(pid));
}

TEST_F(SupervisorTest, ChildrenLeftByAnExitedRankAreStopped) {
  v1::StartRanks start = Shell("left", "sleep 100 & exit 0");
  *start.mutable_grace_period() = ToProtoDuration(absl::Milliseconds(200));
  supervisor_->StartRanks(start);
  v1::RankStatus end = sink_.WaitEnd("left", 1, 0);
  EXPECT_EQ(end.exit_code(), 0);
  EXPECT_TRUE(WaitGroupGone(end.pid()));
}

// The RANK_EXITED statuses of one rank, in order.
std::vector<RecordingSink::Event> Exits(
    const std::vector<RecordingSink::Event>& events, const std::string& job) {
  std::vector<RecordingSink::Event> exits;
  for (const RecordingSink::Event& e : events) {
    if (e.is_status && e.status.job_id() == job &&
        e.status.state() == v1::RANK_EXITED) {
      exits.push_back(e);
    }
  }
  return exits;
}

// The leader exits at once and leaves a child in its group: the exit is
// reported then (the job's outcome does not wait), with processes_remaining;
// the supervisor SIGTERMs the child, and once the group is gone the same
// exit is reported again without it.
TEST_F(SupervisorTest, ExitWithProcessesLeftIsReportedAgainWhenTheGroupIsGone) {
  supervisor_->StartRanks(Shell("rest", "sleep 2 & exit 0"));
  ASSERT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    return Exits(ev, "rest").size() >= 2;
  }));
  std::vector<RecordingSink::Event> exits = Exits(sink_.events(), "rest");
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].status.processes_remaining());
  EXPECT_TRUE(exits[0].group_existed);
  EXPECT_FALSE(exits[1].status.processes_remaining());
  EXPECT_FALSE(exits[1].group_existed);
  for (const RecordingSink::Event& e : exits) {
    EXPECT_EQ(e.status.exit_code(), 0);
    EXPECT_EQ(e.status.signal(), 0);
    EXPECT_EQ(e.status.pid(), exits[0].status.pid());
  }
  // Well before the child's 2 s: it was stopped, not waited for.
  EXPECT_LT(exits[1].time - exits[0].time, absl::Seconds(1));
  std::vector<v1::RankStatus> snapshot = supervisor_->Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].state(), v1::RANK_EXITED);
  EXPECT_FALSE(snapshot[0].processes_remaining());
}

// A leftover that ignores SIGTERM holds the rank's resources until its
// SIGKILL at the job's grace; Snapshot() says so meanwhile.
TEST_F(SupervisorTest, LeftoverIgnoringSigtermKeepsTheRankUntilItsSigkill) {
  // The child says "ready" once it ignores SIGTERM; the leader waits for
  // that on a pipe, then exits 3.
  v1::StartRanks start =
      Shell("stuck",
            "{ (trap '' TERM; echo ready; exec sleep 60 >/dev/null) & } | "
            "read line; exit 3");
  const absl::Duration grace = absl::Milliseconds(300);
  *start.mutable_grace_period() = ToProtoDuration(grace);
  supervisor_->StartRanks(start);
  ASSERT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    return Exits(ev, "stuck").size() >= 1;
  }));
  std::vector<v1::RankStatus> snapshot = supervisor_->Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].state(), v1::RANK_EXITED);
  EXPECT_TRUE(snapshot[0].processes_remaining());

  ASSERT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    return Exits(ev, "stuck").size() >= 2;
  }));
  std::vector<RecordingSink::Event> exits = Exits(sink_.events(), "stuck");
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].status.processes_remaining());
  EXPECT_TRUE(exits[0].group_existed);
  EXPECT_FALSE(exits[1].status.processes_remaining());
  EXPECT_FALSE(exits[1].group_existed);
  EXPECT_EQ(exits[0].status.exit_code(), 3);
  EXPECT_EQ(exits[1].status.exit_code(), 3);
  EXPECT_GE(exits[1].time - exits[0].time, grace - absl::Milliseconds(20));
  EXPECT_FALSE(supervisor_->Snapshot()[0].processes_remaining());
}

// StopAllRanks (the lease ran out) returns at once, stops every job with its
// own grace, and later starts still run.
TEST_F(SupervisorTest, StopAllRanksUsesEachJobsGraceAndDoesNotBlock) {
  v1::StartRanks quick =
      Shell("quick", "trap '' TERM; echo ready; exec sleep 60");
  *quick.mutable_grace_period() = ToProtoDuration(absl::Milliseconds(200));
  v1::StartRanks patient =
      Shell("patient", "trap '' TERM; echo ready; exec sleep 60");
  *patient.mutable_grace_period() = ToProtoDuration(absl::Milliseconds(1500));
  supervisor_->StartRanks(quick);
  supervisor_->StartRanks(patient);
  ASSERT_TRUE(sink_.WaitOutput("quick", 0, "ready"));
  ASSERT_TRUE(sink_.WaitOutput("patient", 0, "ready"));

  const absl::Time stop = absl::Now();
  supervisor_->StopAllRanks("lease expired");
  EXPECT_LT(absl::Now() - stop, absl::Milliseconds(100));
  v1::RankStatus quick_end = sink_.WaitEnd("quick", 1, 0);
  const absl::Time quick_time = absl::Now();
  v1::RankStatus patient_end = sink_.WaitEnd("patient", 1, 0);
  const absl::Time patient_time = absl::Now();
  EXPECT_EQ(quick_end.signal(), SIGKILL);
  EXPECT_EQ(patient_end.signal(), SIGKILL);
  // Not the jobs' doing: their exits say the agent stopped them, and why.
  EXPECT_TRUE(quick_end.stopped_by_agent());
  EXPECT_NE(quick_end.message().find("lease expired"), std::string::npos)
      << quick_end.message();
  EXPECT_GE(quick_time - stop, absl::Milliseconds(200));
  EXPECT_LT(quick_time - stop, absl::Milliseconds(1200));
  EXPECT_GE(patient_time - stop, absl::Milliseconds(1500));

  supervisor_->StartRanks(Shell("later", "exit 0"));
  v1::RankStatus later = sink_.WaitEnd("later", 1, 0);
  EXPECT_EQ(later.state(), v1::RANK_EXITED) << later.message();
  EXPECT_FALSE(later.stopped_by_agent());
}

TEST_F(SupervisorTest, StopJobStopsOlderAttemptsOnly) {
  supervisor_->StartRanks(Shell("j", "exec sleep 100", 1));
  supervisor_->StartRanks(Shell("other", "exec sleep 100", 1));
  sink_.WaitRunning("j", 1, 0);
  int other = sink_.WaitRunning("other", 1, 0);
  supervisor_->StopJob(Stop("j", 5, absl::Seconds(1)));
  EXPECT_EQ(sink_.WaitEnd("j", 1, 0).signal(), SIGTERM);
  EXPECT_FALSE(GroupGone(other));
  EXPECT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
}

TEST_F(SupervisorTest, DuplicateStartRanksIsIgnored) {
  v1::StartRanks start = Shell("dup", "exec sleep 100");
  supervisor_->StartRanks(start);
  int pid = sink_.WaitRunning("dup", 1, 0);
  supervisor_->StartRanks(start);
  // The replay is answered with the same status.
  ASSERT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    return ev.size() >= 2;
  }));
  for (const RecordingSink::Event& e : sink_.events()) {
    ASSERT_TRUE(e.is_status);
    EXPECT_EQ(e.status.state(), v1::RANK_RUNNING);
    EXPECT_EQ(e.status.pid(), pid);
  }
  EXPECT_EQ(supervisor_->Snapshot().size(), 1u);
  EXPECT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
}

TEST_F(SupervisorTest, NewAttemptKillsTheOldOneFirst) {
  supervisor_->StartRanks(Shell("re", "trap '' TERM; exec sleep 100", 1));
  int old_pid = sink_.WaitRunning("re", 1, 0);
  supervisor_->StartRanks(Shell("re", "exec sleep 100", 2));
  int new_pid = sink_.WaitRunning("re", 2, 0);
  EXPECT_NE(new_pid, old_pid);
  EXPECT_TRUE(GroupGone(old_pid));
  // The old attempt's end is reported before the new attempt starts.
  std::vector<RecordingSink::Event> events = sink_.events();
  int old_end = -1, new_start = -1;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    const v1::RankStatus& s = events[i].status;
    if (s.attempt() == 1 && s.state() == v1::RANK_EXITED) old_end = i;
    if (s.attempt() == 2 && s.state() == v1::RANK_RUNNING) new_start = i;
  }
  ASSERT_GE(old_end, 0);
  EXPECT_LT(old_end, new_start);
  EXPECT_EQ(events[old_end].status.signal(), SIGKILL);
  // A stale assignment of the old attempt is refused.
  supervisor_->StartRanks(Shell("re", "exec sleep 100", 1));
  EXPECT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    return ev.back().is_status &&
           ev.back().status.state() == v1::RANK_FAILED_TO_START;
  }));
  EXPECT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
}

TEST_F(SupervisorTest, StopAllLeavesNothingAndRefusesNewRanks) {
  v1::StartRanks start =
      Job("all", 1, {"/bin/sh", "-c", "sleep 100 & sleep 100 & wait"}, {0, 1});
  supervisor_->StartRanks(start);
  int pid0 = sink_.WaitRunning("all", 1, 0);
  int pid1 = sink_.WaitRunning("all", 1, 1);
  ASSERT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
  EXPECT_TRUE(GroupGone(pid0));
  EXPECT_TRUE(GroupGone(pid1));
  supervisor_->StartRanks(Shell("late", "exit 0"));
  v1::RankStatus end = sink_.WaitEnd("late", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("shutting down"));
}

TEST_F(SupervisorTest, SnapshotHasRunningAndExitedRanks) {
  supervisor_->StartRanks(Shell("a", "exit 0"));
  sink_.WaitEnd("a", 1, 0);
  supervisor_->StartRanks(Shell("b", "exec sleep 100"));
  sink_.WaitRunning("b", 1, 0);
  std::vector<v1::RankStatus> snapshot = supervisor_->Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0].job_id(), "a");
  EXPECT_EQ(snapshot[0].state(), v1::RANK_EXITED);
  EXPECT_EQ(snapshot[1].job_id(), "b");
  EXPECT_EQ(snapshot[1].state(), v1::RANK_RUNNING);
  EXPECT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
}

TEST_F(SupervisorTest, DestructorKillsEverything) {
  supervisor_->StartRanks(Shell("d", "trap '' TERM; sleep 100 & wait"));
  int pid = sink_.WaitRunning("d", 1, 0);
  supervisor_.reset();
  EXPECT_TRUE(WaitGroupGone(pid));
}

TEST(SupervisorRetentionTest, ExitedRanksArePrunedAfterTheRetention) {
  TempDir dir;
  FakeClock clock;
  RecordingSink sink;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = dir.path();
  options.scratch_dir = dir.path();
  options.clock = &clock;
  Supervisor supervisor(options, &sink);
  ASSERT_TRUE(supervisor.Start().ok());
  v1::StartRanks start;
  start.set_job_id("old");
  start.set_attempt(1);
  start.add_argv("true");
  start.add_ranks()->set_rank(0);
  supervisor.StartRanks(start);
  sink.WaitEnd("old", 1, 0);
  EXPECT_EQ(supervisor.Snapshot().size(), 1u);
  // Retention is measured on the monotonic clock: wall steps change nothing.
  clock.StepWall(absl::Hours(2));
  supervisor.StopJob(v1::StopJob());
  EXPECT_FALSE(WaitUntil([&] { return supervisor.Snapshot().empty(); },
                         absl::Milliseconds(200)));
  clock.StepWall(-absl::Hours(4));
  clock.Advance(absl::Minutes(59));
  supervisor.StopJob(v1::StopJob());  // Any command wakes the loop.
  EXPECT_EQ(supervisor.Snapshot().size(), 1u);
  clock.Advance(absl::Minutes(2));
  supervisor.StopJob(v1::StopJob());
  absl::Time deadline = absl::Now() + kWait;
  while (!supervisor.Snapshot().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(supervisor.Snapshot().empty());
}

// Stalled() is how long the loop has not come round (on the monotonic
// clock): the time since its last pass, back near zero once it runs again.
TEST(SupervisorRetentionTest, StalledIsTheTimeSinceTheLoopLastCameRound) {
  TempDir dir;
  FakeClock clock;
  RecordingSink sink;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = dir.path();
  options.scratch_dir = dir.path();
  options.clock = &clock;
  Supervisor supervisor(options, &sink);
  EXPECT_EQ(supervisor.Stalled(), absl::ZeroDuration());  // not started
  ASSERT_TRUE(supervisor.Start().ok());
  supervisor.StopJob(v1::StopJob());  // a pass
  ASSERT_TRUE(WaitUntil([&] { return supervisor.Stalled() < absl::Seconds(1); },
                        kWait));
  // Its next pass comes within a second (real time) of the last.
  absl::SleepFor(absl::Milliseconds(100));
  clock.Advance(absl::Seconds(30));  // the loop did not run meanwhile
  EXPECT_GE(supervisor.Stalled(), absl::Seconds(29));
  supervisor.StopJob(v1::StopJob());  // it runs again
  EXPECT_TRUE(WaitUntil([&] { return supervisor.Stalled() < absl::Seconds(1); },
                        kWait));
}

v1::StartRanks ShellJob(const std::string& job, int attempt,
                        const std::string& script,
                        std::vector<int> ranks = {0}) {
  v1::StartRanks start;
  start.set_job_id(job);
  start.set_attempt(attempt);
  for (const char* a : {"/bin/sh", "-c"}) start.add_argv(a);
  start.add_argv(script);
  for (int r : ranks) start.add_ranks()->set_rank(r);
  return start;
}

// The grace before SIGKILL and the flush of a partial line are measured on
// the monotonic clock: wall steps neither fire nor delay them.
TEST(SupervisorClockTest, GraceAndPartialLineFollowTheMonotonicClock) {
  TempDir dir;
  FakeClock clock;
  RecordingSink sink;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = dir.path();
  options.scratch_dir = dir.path();
  options.clock = &clock;
  Supervisor supervisor(options, &sink);
  ASSERT_TRUE(supervisor.Start().ok());
  // "ready\n" and the partial "abc" come in one write: once "ready" is out,
  // "abc" waits for its newline. SIGTERM is answered on stderr, and the
  // rank goes on (checkpointing).
  supervisor.StartRanks(
      ShellJob("ckpt", 1,
               "trap 'echo term >&2' TERM; printf 'ready\\nabc'; "
               "while :; do sleep 1; done"));
  const int pid = sink.WaitRunning("ckpt", 1, 0);
  ASSERT_TRUE(sink.WaitOutput("ckpt", 0, "ready\n"));
  v1::StopJob stop;
  stop.set_job_id("ckpt");
  stop.set_attempt(1);
  *stop.mutable_grace_period() = ToProtoDuration(absl::Seconds(10));
  supervisor.StopJob(stop);
  ASSERT_TRUE(sink.WaitOutput("ckpt", 0, "term\n"));  // The grace runs.
  auto ended = [](const std::vector<RecordingSink::Event>& events) {
    for (const RecordingSink::Event& e : events) {
      if (e.is_status && e.status.state() == v1::RANK_EXITED) return true;
    }
    return false;
  };

  clock.StepWall(absl::Hours(1));
  supervisor.StopJob(v1::StopJob());  // Any command wakes the loop.
  EXPECT_FALSE(sink.WaitFor(ended, absl::Milliseconds(300)))
      << "SIGKILLed during its grace by a wall-clock step";
  EXPECT_EQ(sink.Output("ckpt", 0, v1::STDOUT), "ready\n");

  clock.StepWall(-absl::Hours(2));
  clock.Advance(absl::Milliseconds(100));  // The partial-line delay.
  supervisor.StopJob(v1::StopJob());
  EXPECT_TRUE(sink.WaitOutput("ckpt", 0, "abc"));
  EXPECT_FALSE(sink.WaitFor(ended, absl::Milliseconds(100)));

  clock.Advance(absl::Seconds(10));  // The grace.
  supervisor.StopJob(v1::StopJob());
  EXPECT_EQ(sink.WaitEnd("ckpt", 1, 0).signal(), SIGKILL);
  EXPECT_TRUE(WaitGroupGone(pid));
}

// Keeps a rank's process group alive after SIGKILL until Release(): the
// rank's command (Command()) leaves a zombie in its group whose parent, in
// another group of the same session (the rank's shim's), does not reap it
// until the file `release` exists.
class GroupHolder {
 public:
  explicit GroupHolder(std::string dir)
      : ready_(dir + "/ready"), release_(dir + "/release") {}
  ~GroupHolder() { Release(); }

  // The rank: perl (Debian's perl-base) can join a group; sh cannot.
  std::string Command() const {
    return absl::StrCat(
        "exec perl -e '$pg = getpgrp(); if (fork() == 0) { setpgrp(0, 0); "
        "if (fork() == 0) { setpgrp(0, $pg) or exit 1; open(F, \">", ready_,
        "\"); close(F); exit 0; } select(undef, undef, undef, 0.01) until -e "
        "\"",
        release_, "\"; exit 0; } exec(\"sleep\", \"100\");'");
  }
  // The zombie is in the group.
  bool WaitReady() const {
    return WaitUntil([this] { return access(ready_.c_str(), F_OK) == 0; });
  }
  void Release() {
    if (released_) return;
    released_ = true;
    FILE* f = fopen(release_.c_str(), "w");
    if (f != nullptr) fclose(f);
  }

 private:
  const std::string ready_;
  const std::string release_;
  bool released_ = false;
};

// `job`'s status of `attempt`, `rank` in `snapshot`, and how many there are.
std::vector<v1::RankStatus> Find(const std::vector<v1::RankStatus>& snapshot,
                                 const std::string& job, int attempt,
                                 int rank) {
  std::vector<v1::RankStatus> found;
  for (const v1::RankStatus& s : snapshot) {
    if (s.job_id() == job && s.attempt() == attempt && s.rank() == rank) {
      found.push_back(s);
    }
  }
  return found;
}

bool IsStarting(const v1::RankStatus& s) {
  return s.state() == v1::RANK_RUNNING && s.pid() == 0 &&
         s.message() == "starting";
}

class SupervisorStartingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.work_dir = dir_.path();
    options_.scratch_dir = dir_.path();
    options_.clock = &clock_;
    supervisor_ = std::make_unique<Supervisor>(options_, &sink_);
    ASSERT_TRUE(supervisor_->Start().ok());
  }
  void TearDown() override {
    if (supervisor_ != nullptr) {
      EXPECT_TRUE(supervisor_->StopAll(absl::Seconds(1)).ok());
    }
  }

  // Starts attempt 1 of `job`, then holds its group alive so that attempt 2
  // is deferred behind it, and queues attempt 2. Returns attempt 1's pid.
  int StartDeferred(const std::string& job,
                    std::unique_ptr<GroupHolder>* holder) {
    const std::string dir = absl::StrCat(dir_.path(), "/", job);
    mkdir(dir.c_str(), 0755);
    *holder = std::make_unique<GroupHolder>(dir);
    supervisor_->StartRanks(ShellJob(job, 1, (*holder)->Command()));
    const int old_pid = sink_.WaitRunning(job, 1, 0);
    EXPECT_GT(old_pid, 0);
    EXPECT_TRUE((*holder)->WaitReady());
    supervisor_->StartRanks(ShellJob(job, 2, "exec sleep 100"));
    // The new attempt SIGKILLed the old one, which is gone but for the
    // zombie: attempt 2 waits.
    EXPECT_EQ(sink_.WaitEnd(job, 1, 0).signal(), SIGKILL);
    return old_pid;
  }

  TempDir dir_;
  FakeClock clock_;
  RecordingSink sink_;
  SupervisorOptions options_ = AgentUserOptions();
  std::unique_ptr<Supervisor> supervisor_;
};

// A start waiting for an older attempt to die is reported as starting (the
// scheduler keeps its GPUs held), a wall-clock step does not hurry it past
// its wait for the old attempt, and it shows its real status once it runs.
TEST_F(SupervisorStartingTest, DeferredStartIsStartingUntilItRuns) {
  std::unique_ptr<GroupHolder> holder;
  StartDeferred("re", &holder);
  std::vector<v1::RankStatus> starting =
      Find(supervisor_->Snapshot(), "re", 2, 0);
  ASSERT_EQ(starting.size(), 1u);
  EXPECT_TRUE(IsStarting(starting[0])) << starting[0].DebugString();

  // The deferred start gives up waiting after 10 s of monotonic time only.
  clock_.StepWall(absl::Hours(1));
  EXPECT_EQ(sink_.WaitRunning("re", 2, 0, absl::Milliseconds(300)), 0);
  starting = Find(supervisor_->Snapshot(), "re", 2, 0);
  ASSERT_EQ(starting.size(), 1u);
  EXPECT_TRUE(IsStarting(starting[0])) << starting[0].DebugString();

  holder->Release();  // The old attempt is gone at last.
  const int pid = sink_.WaitRunning("re", 2, 0);
  ASSERT_GT(pid, 0);
  std::vector<v1::RankStatus> running =
      Find(supervisor_->Snapshot(), "re", 2, 0);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].state(), v1::RANK_RUNNING);
  EXPECT_EQ(running[0].pid(), pid);
  EXPECT_EQ(running[0].message(), "");
}

// A StopJob or StopAllRanks that cancels a deferred start ends it with
// RANK_FAILED_TO_START, and nothing of it stays "starting", even once the
// failure has left the retention window.
TEST_F(SupervisorStartingTest, CancelledDeferredStartEndsAsFailedToStart) {
  std::unique_ptr<GroupHolder> holder_a, holder_b;
  StartDeferred("a", &holder_a);
  StartDeferred("b", &holder_b);
  v1::StopJob stop;
  stop.set_job_id("a");
  stop.set_attempt(2);
  stop.set_reason("cancelled");
  supervisor_->StopJob(stop);
  v1::RankStatus a = sink_.WaitEnd("a", 2, 0);
  EXPECT_EQ(a.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(a.message(), HasSubstr("stopped before it started: cancelled"));
  supervisor_->StopAllRanks("the lease expired");
  v1::RankStatus b = sink_.WaitEnd("b", 2, 0);
  EXPECT_EQ(b.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(b.message(), HasSubstr("the lease expired"));
  for (const std::string job : {"a", "b"}) {
    std::vector<v1::RankStatus> found =
        Find(supervisor_->Snapshot(), job, 2, 0);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].state(), v1::RANK_FAILED_TO_START);
  }

  holder_a->Release();
  holder_b->Release();
  ASSERT_TRUE(sink_.WaitFor([](const std::vector<RecordingSink::Event>& ev) {
    int gone = 0;  // Attempt 1 of each job, reported again once its group went.
    for (const RecordingSink::Event& e : ev) {
      gone += e.is_status && e.status.attempt() == 1 &&
              e.status.state() == v1::RANK_EXITED &&
              !e.status.processes_remaining();
    }
    return gone == 2;
  }));
  clock_.Advance(absl::Hours(1) + absl::Minutes(1));  // Past the retention.
  supervisor_->StopJob(v1::StopJob());                // Wakes the loop.
  EXPECT_TRUE(WaitUntil([this] { return supervisor_->Snapshot().empty(); }))
      << "left in the snapshot: " << supervisor_->Snapshot().size();
}

// Holds the supervisor thread in OnRankStatus for job "gate" until Open().
class GatedSink : public RecordingSink {
 public:
  void OnRankStatus(const v1::RankStatus& status) override {
    if (status.job_id() == "gate") {
      absl::MutexLock lock(&gate_mu_);
      held_ = true;
      // Bounded, so that a failing test cannot hang.
      gate_mu_.AwaitWithTimeout(absl::Condition(&open_), kWait);
    }
    RecordingSink::OnRankStatus(status);
  }
  bool WaitHeld() {
    absl::MutexLock lock(&gate_mu_);
    return gate_mu_.AwaitWithTimeout(absl::Condition(&held_), kWait);
  }
  void Open() {
    absl::MutexLock lock(&gate_mu_);
    open_ = true;
  }

 private:
  absl::Mutex gate_mu_;
  bool held_ ABSL_GUARDED_BY(gate_mu_) = false;
  bool open_ ABSL_GUARDED_BY(gate_mu_) = false;
};

// A StartRanks is in the snapshot as soon as StartRanks() returns, before
// the supervisor thread (here held in the sink) has even read it.
TEST(SupervisorQueuedStartTest, QueuedStartIsInTheSnapshotAtOnce) {
  TempDir dir;
  GatedSink sink;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = dir.path();
  options.scratch_dir = dir.path();
  Supervisor supervisor(options, &sink);
  ASSERT_TRUE(supervisor.Start().ok());
  supervisor.StartRanks(ShellJob("gate", 1, "exec sleep 100"));
  ASSERT_TRUE(sink.WaitHeld());

  supervisor.StartRanks(ShellJob("queued", 1, "exec sleep 100", {0, 1, 2}));
  std::vector<v1::RankStatus> snapshot = supervisor.Snapshot();
  for (int rank : {0, 1, 2}) {
    std::vector<v1::RankStatus> found = Find(snapshot, "queued", 1, rank);
    ASSERT_EQ(found.size(), 1u) << "rank " << rank;
    EXPECT_TRUE(IsStarting(found[0])) << found[0].DebugString();
  }
  std::vector<v1::RankStatus> gate = Find(snapshot, "gate", 1, 0);
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_GT(gate[0].pid(), 0);  // Launched: its real status only.

  sink.Open();
  for (int rank : {0, 1, 2}) {
    const int pid = sink.WaitRunning("queued", 1, rank);
    ASSERT_GT(pid, 0);
    std::vector<v1::RankStatus> found =
        Find(supervisor.Snapshot(), "queued", 1, rank);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].pid(), pid);
    EXPECT_EQ(found[0].message(), "");
  }
  EXPECT_TRUE(supervisor.StopAll(absl::Seconds(1)).ok());
}

TEST(SupervisorSingletonTest, OnlyOneSupervisorRunsAtATime) {
  RecordingSink sink;
  TempDir dir;
  SupervisorOptions options = AgentUserOptions();
  options.work_dir = dir.path();
  Supervisor first(options, &sink);
  ASSERT_TRUE(first.Start().ok());
  Supervisor second(options, &sink);
  EXPECT_EQ(second.Start().code(), absl::StatusCode::kFailedPrecondition);
}

// Ranks outlive their agent: a supervisor that detaches leaves its ranks
// running under their shims, and the next one (same work dir) adopts them.
class SupervisorAdoptionTest : public ::testing::Test {
 protected:
  SupervisorOptions Options() {
    SupervisorOptions options = AgentUserOptions();
    options.work_dir = dir_.path();
    options.scratch_dir = dir_.path();
    options.default_grace = absl::Seconds(1);
    return options;
  }
  std::string Fifo(const std::string& name) {
    const std::string path = dir_.path() + "/" + name;
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
    return path;
  }
  static void Release(const std::string& fifo) {
    int fd = open(fifo.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "go\n", 3), 3);
    close(fd);
  }
  static std::vector<v1::LogChunk> Chunks(RecordingSink& sink,
                                          const std::string& job) {
    std::vector<v1::LogChunk> chunks;
    for (const RecordingSink::Event& e : sink.events()) {
      if (!e.is_status && e.chunk.job_id() == job) chunks.push_back(e.chunk);
    }
    return chunks;
  }
  static bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

  TempDir dir_;
};

// The rank keeps its pid across the agent's absence and exits while no
// agent runs; the next agent reports it running, then its exit, with the
// output the scheduler had not acknowledged: a chunk sent before is sent
// again as the same chunk (same end offset, same bytes), acknowledged output
// is not sent again, and what the rank wrote meanwhile follows.
TEST_F(SupervisorAdoptionTest, ARankOutlivesItsAgentAndIsAdoptedWithItsOutput) {
  const std::string go = Fifo("go");
  RecordingSink first_sink;
  auto first = std::make_unique<Supervisor>(Options(), &first_sink);
  ASSERT_TRUE(first->Start().ok());
  first->StartRanks(ShellJob(
      "keep", 1,
      absl::StrCat("echo one; sleep 0.3; echo two; read x < ", go,
                   "; echo three; exit 3")));
  const int pid = first_sink.WaitRunning("keep", 1, 0);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(first_sink.WaitOutput("keep", 0, "one\ntwo\n"));
  std::vector<v1::LogChunk> sent = Chunks(first_sink, "keep");
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].data(), "one\n");
  first->LogStored(sent[0]);  // The scheduler stored "one" only.
  absl::SleepFor(absl::Milliseconds(100));
  first->Detach();
  first.reset();
  EXPECT_TRUE(Alive(pid)) << "the rank died with its supervisor";

  Release(go);  // It prints "three" and exits while no agent runs.
  ASSERT_TRUE(WaitUntil([&] { return !Alive(pid); }));

  RecordingSink second_sink;
  Supervisor second(Options(), &second_sink);
  ASSERT_TRUE(second.Start().ok());
  const v1::RankStatus end = second_sink.WaitEnd("keep", 1, 0);
  EXPECT_EQ(end.state(), v1::RANK_EXITED);
  EXPECT_EQ(end.exit_code(), 3);
  EXPECT_EQ(end.pid(), pid);
  EXPECT_EQ(end.stdout_bytes(), 14);
  EXPECT_FALSE(end.stopped_by_agent());
  std::vector<v1::LogChunk> again = Chunks(second_sink, "keep");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].data(), "two\n");
  EXPECT_EQ(again[0].end_offset(), sent[1].end_offset());
  EXPECT_EQ(again[1].data(), "three\n");
  EXPECT_EQ(again[1].end_offset(), 14);
  // It ran before its exit, with the same pid.
  bool running = false;
  for (const RecordingSink::Event& e : second_sink.events()) {
    running |= e.is_status && e.status.state() == v1::RANK_RUNNING &&
               e.status.pid() == pid;
  }
  EXPECT_TRUE(running);
}

// A rank still running is adopted as running (its pid unchanged) and stopped
// by the new agent as any other.
TEST_F(SupervisorAdoptionTest, ARunningRankIsAdoptedAndStoppedByTheNextAgent) {
  RecordingSink first_sink;
  auto first = std::make_unique<Supervisor>(Options(), &first_sink);
  ASSERT_TRUE(first->Start().ok());
  first->StartRanks(ShellJob("run", 1, "echo up; exec sleep 100"));
  const int pid = first_sink.WaitRunning("run", 1, 0);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(first_sink.WaitOutput("run", 0, "up\n"));
  first->Detach();
  first.reset();

  RecordingSink second_sink;
  Supervisor second(Options(), &second_sink);
  ASSERT_TRUE(second.Start().ok());
  // In the snapshot when Start() returns: the first Register carries it.
  std::vector<v1::RankStatus> snapshot = second.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].state(), v1::RANK_RUNNING);
  EXPECT_EQ(snapshot[0].pid(), pid);
  EXPECT_TRUE(Alive(pid));
  v1::StopJob stop;
  stop.set_job_id("run");
  stop.set_attempt(1);
  second.StopJob(stop);
  EXPECT_EQ(second_sink.WaitEnd("run", 1, 0).signal(), SIGTERM);
  EXPECT_TRUE(WaitGroupGone(pid));
  EXPECT_TRUE(second.StopAll(absl::Seconds(1)).ok());
}

// With no agent to renew the lease, the shim stops its rank when the lease
// runs out (the scheduler has counted the node lost by then), and the next
// agent says the agent's side stopped it.
TEST_F(SupervisorAdoptionTest, ARankWhoseAgentDoesNotComeBackStopsAtTheLease) {
  RecordingSink first_sink;
  auto first = std::make_unique<Supervisor>(Options(), &first_sink);
  ASSERT_TRUE(first->Start().ok());
  first->StartRanks(ShellJob("lease", 1, "exec sleep 100"));
  const int pid = first_sink.WaitRunning("lease", 1, 0);
  ASSERT_GT(pid, 0);
  first->SetLease(RealClock::Get()->MonotonicNow() + absl::Seconds(1));
  absl::SleepFor(absl::Milliseconds(100));
  first->Detach();
  first.reset();
  EXPECT_TRUE(Alive(pid));
  EXPECT_TRUE(WaitUntil([&] { return !Alive(pid); }, absl::Seconds(5)));

  RecordingSink second_sink;
  Supervisor second(Options(), &second_sink);
  ASSERT_TRUE(second.Start().ok());
  const v1::RankStatus end = second_sink.WaitEnd("lease", 1, 0);
  EXPECT_EQ(end.signal(), SIGTERM);
  EXPECT_TRUE(end.stopped_by_agent());
  EXPECT_THAT(end.message(), HasSubstr("lease ran out"));
}

// A shim killed takes its rank with it (its parent-death signal): the exit
// is the node's fault, said as such.
TEST_F(SupervisorAdoptionTest, AShimKilledTakesItsRankAndSaysSo) {
  RecordingSink sink;
  Supervisor supervisor(Options(), &sink);
  ASSERT_TRUE(supervisor.Start().ok());
  supervisor.StartRanks(ShellJob("shim", 1, "exec sleep 100"));
  const int pid = sink.WaitRunning("shim", 1, 0);
  ASSERT_GT(pid, 0);
  std::string record;
  ASSERT_TRUE(shim::ReadWholeFile(
      shim::RankDir(dir_.path() + "/state", "shim", 1, 0) + "/record",
      &record));
  const pid_t shim_pid = shim::Int(shim::ParseLines(record), "shim_pid");
  ASSERT_GT(shim_pid, 0);
  ASSERT_EQ(kill(shim_pid, SIGKILL), 0);
  const v1::RankStatus end = sink.WaitEnd("shim", 1, 0);
  EXPECT_EQ(end.signal(), SIGKILL);
  EXPECT_TRUE(end.node_fault());
  EXPECT_THAT(end.message(), HasSubstr("xl-rank-shim died"));
  EXPECT_TRUE(WaitGroupGone(pid));
}

}  // namespace
}  // namespace xl::agent
