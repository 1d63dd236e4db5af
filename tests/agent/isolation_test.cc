// Isolation on the node with real child processes, real users and real
// cgroups: ranks run as the submitter, unknown users and root are refused,
// job directories and TMPDIR are private, the memory limit kills and says
// so, and the cgroup kills what escaped the rank's process group. Needs
// root (it adds the users xltest-a and xltest-b, removed at the end) and a
// writable cgroup hierarchy; skips with the reason otherwise.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/isolation/cgroup.h"
#include "agent/isolation/user.h"
#include "agent/supervisor/supervisor.h"
#include "common/duration.h"
#include "tests/agent/recording_sink.h"

extern char** environ;

namespace xl::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kUserA[] = "xltest-a";
constexpr char kUserB[] = "xltest-b";

// Runs argv (no shell) and returns its exit status, -1 when it cannot run.
int Run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void RemoveTestUsers() {
  for (const char* user : {kUserA, kUserB}) {
    Run({"/usr/sbin/userdel", user});
  }
}

// Adds the throw-away users before the tests and removes them after, also
// when a test fails (a crash leaves them; the next run removes them first).
class TestUsers : public ::testing::Environment {
 public:
  void SetUp() override {
    if (geteuid() != 0) return;
    RemoveTestUsers();
    for (const char* user : {kUserA, kUserB}) {
      if (Run({"/usr/sbin/useradd", "-M", "-s", "/usr/sbin/nologin", user}) ==
          0) {
        added_ = true;
      }
    }
  }
  void TearDown() override {
    if (added_) RemoveTestUsers();
  }

 private:
  bool added_ = false;
};

const ::testing::Environment* const kTestUsers =
    ::testing::AddGlobalTestEnvironment(new TestUsers);

RankUser MustLookUp(const std::string& name) {
  absl::StatusOr<RankUser> user = LookUpUser(name);
  EXPECT_TRUE(user.ok()) << user.status();
  return user.ok() ? *user : RankUser();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// Polls `pred` until it holds; false after 5 s.
template <typename Pred>
bool WaitUntilTrue(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!pred() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

// Each test runs on cgroup v1 and on v2 (where the host has them; this
// machine's v2 mount has no memory, cpu or pids controller, which are bound
// to v1: those tests skip on v2 saying so).
class IsolationTest : public ::testing::TestWithParam<CgroupChoice> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "isolation tests need root (they add users and switch "
                      "to them); run them as root, as CI does";
    }
    if (!LookUpUser(kUserA).ok() || !LookUpUser(kUserB).ok()) {
      GTEST_SKIP() << "cannot add the test users " << kUserA << " and "
                   << kUserB << " (useradd failed)";
    }
    node_ = absl::StrCat("isolation-test-", getpid());
    cgroups_ = DetectCgroups(node_, GetParam());
    if (cgroups_.version == CgroupVersion::kNone) {
      GTEST_SKIP() << "no writable cgroup hierarchy: " << cgroups_.note;
    }
    absl::Status prepared = PrepareCgroups(cgroups_);
    if (!prepared.ok()) {
      GTEST_SKIP() << "cgroups not usable: " << prepared;
    }
    char tmpl[] = "/tmp/xl-isolation-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The users pass through to their own directories under the work dir.
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  }

  void TearDown() override {
    supervisor_.reset();
    for (pid_t pid : strays_) kill(pid, SIGKILL);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    // The node's directories (xl/<node>); xl/ stays for other agents.
    for (const std::string& d :
         {cgroups_.v2_dir, cgroups_.v1_dirs["memory"], cgroups_.v1_dirs["cpu"],
          cgroups_.v1_dirs["devices"], cgroups_.v1_dirs["freezer"],
          cgroups_.v1_dirs["pids"]}) {
      if (!d.empty()) rmdir(d.c_str());
    }
  }

  void StartSupervisor(RunAs run_as = RunAs::kSubmitter,
                       bool allow_root_jobs = false) {
    SupervisorOptions options;
    options.shim_binary = XL_RANK_SHIM;
    options.work_dir = dir_ + "/work";
    options.scratch_dir = dir_ + "/scratch";
    options.run_as = run_as;
    options.allow_root_jobs = allow_root_jobs;
    options.cgroups = cgroups_;
    options.default_grace = absl::Seconds(1);
    options.default_memory_bytes = default_memory_bytes_;
    options.default_max_processes = default_max_processes_;
    supervisor_ = std::make_unique<Supervisor>(options, &sink_);
    ASSERT_TRUE(supervisor_->Start().ok());
  }

  static v1::StartRanks Shell(const std::string& job, const std::string& user,
                              const std::string& script) {
    v1::StartRanks start;
    start.set_job_id(job);
    start.set_attempt(1);
    start.set_user(user);
    for (const char* a : {"/bin/sh", "-c"}) start.add_argv(a);
    start.add_argv(script);
    start.add_ranks()->set_rank(0);
    return start;
  }

  v1::RankStatus RunToEnd(const v1::StartRanks& start) {
    supervisor_->StartRanks(start);
    return sink_.WaitEnd(start.job_id(), start.attempt(), 0);
  }

  std::string Stdout(const std::string& job) {
    return sink_.Output(job, 0, v1::STDOUT);
  }
  std::string Stderr(const std::string& job) {
    return sink_.Output(job, 0, v1::STDERR);
  }

  std::string node_;
  CgroupHierarchy cgroups_;
  uint64_t default_memory_bytes_ = 0;
  int64_t default_max_processes_ = 0;
  std::string dir_;
  RecordingSink sink_;
  std::unique_ptr<Supervisor> supervisor_;
  std::vector<pid_t> strays_;
};

TEST_P(IsolationTest, RankRunsAsTheSubmittersUidGidAndGroups) {
  StartSupervisor();
  const RankUser a = MustLookUp(kUserA);
  v1::RankStatus end = RunToEnd(Shell("ids", kUserA, "id -u; id -g; id -G"));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(end.exit_code(), 0) << Stderr("ids");
  EXPECT_EQ(Stdout("ids"), absl::StrCat(a.uid, "\n", a.gid, "\n", a.gid, "\n"));
}

// The PATH lookup is the rank's user's (security review F13): run by the
// agent as root, it told whether a program exists in a directory the user
// may not search. Now a present and an absent program there read alike.
TEST_P(IsolationTest, ThePathLookupIsTheUsersOwn) {
  StartSupervisor();
  const std::string hidden = dir_ + "/hidden";
  ASSERT_EQ(mkdir(hidden.c_str(), 0700), 0);
  {
    std::ofstream f(hidden + "/present");
    f << "#!/bin/sh\necho ran\n";
  }
  ASSERT_EQ(chmod((hidden + "/present").c_str(), 0755), 0);
  std::map<std::string, std::string> said;
  for (const char* program : {"present", "absent"}) {
    v1::StartRanks start = Shell(program, kUserA, "");
    start.clear_argv();
    start.add_argv(program);
    (*start.mutable_env())["PATH"] = hidden;
    v1::RankStatus end = RunToEnd(start);
    EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START) << program;
    said[program] = absl::StrReplaceAll(end.message(), {{program, "P"}});
  }
  EXPECT_EQ(said["present"], said["absent"]);
  EXPECT_THAT(said["absent"], HasSubstr("permission denied"));
  EXPECT_EQ(Stdout("present"), "");
}

TEST_P(IsolationTest, UnknownUserFailsToStartNamingTheUserAndTheFix) {
  StartSupervisor();
  v1::RankStatus end =
      RunToEnd(Shell("ghost", "xltest-nobody-here", "id -u"));
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(),
              HasSubstr("user \"xltest-nobody-here\" has no account on this "
                        "node; create the account"));
  EXPECT_THAT(end.message(), HasSubstr("submit the job as a user that exists"));
}

TEST_P(IsolationTest, RootIsRefusedWithoutAllowRootJobs) {
  StartSupervisor();
  v1::RankStatus end = RunToEnd(Shell("rootjob", "root", "id -u"));
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("is root (uid 0)"));
  EXPECT_THAT(end.message(), HasSubstr("--allow-root-jobs"));
  EXPECT_EQ(Stdout("rootjob"), "");
}

TEST_P(IsolationTest, RootRunsWithAllowRootJobs) {
  StartSupervisor(RunAs::kSubmitter, /*allow_root_jobs=*/true);
  v1::RankStatus end = RunToEnd(Shell("rootjob", "root", "id -u"));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(Stdout("rootjob"), "0\n");
}

TEST_P(IsolationTest, RunAsAgentAsRootIsRefusedWithoutAllowRootJobs) {
  StartSupervisor(RunAs::kAgent);
  v1::RankStatus end = RunToEnd(Shell("asagent", kUserA, "id -u"));
  EXPECT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("--run-as agent"));
  EXPECT_THAT(end.message(), HasSubstr("--allow-root-jobs"));
}

TEST_P(IsolationTest, AnotherJobsWorkingDirectoryIsNotReadable) {
  StartSupervisor();
  v1::RankStatus a =
      RunToEnd(Shell("job-a", kUserA, "echo secret > data; pwd"));
  ASSERT_EQ(a.state(), v1::RANK_EXITED) << a.message();
  ASSERT_EQ(a.exit_code(), 0) << Stderr("job-a");
  const std::string wd = dir_ + "/work/jobs/job-a/1";
  ASSERT_EQ(Stdout("job-a"), wd + "\n");
  struct stat st;
  ASSERT_EQ(stat(wd.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, MustLookUp(kUserA).uid);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  v1::RankStatus b =
      RunToEnd(Shell("job-b", kUserB, absl::StrCat("cat ", wd, "/data")));
  ASSERT_EQ(b.state(), v1::RANK_EXITED) << b.message();
  EXPECT_NE(b.exit_code(), 0);
  EXPECT_THAT(Stderr("job-b"), HasSubstr("Permission denied"));
  EXPECT_EQ(Stdout("job-b"), "");
}

// A job's user owns jobs/<job>: a rank that plants a symlink where the next
// attempt's working directory goes does not get root to chown its target.
TEST_P(IsolationTest, ASymlinkPlantedForTheNextAttemptIsRefused) {
  StartSupervisor();
  const std::string target = dir_ + "/roots-own";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  const std::string next = dir_ + "/work/jobs/plant/2";
  v1::RankStatus first = RunToEnd(
      Shell("plant", kUserA, absl::StrCat("ln -s ", target, " ", next)));
  ASSERT_EQ(first.state(), v1::RANK_EXITED) << first.message();
  ASSERT_EQ(first.exit_code(), 0) << Stderr("plant");
  v1::StartRanks again = Shell("plant", kUserA, "id -u");
  again.set_attempt(2);
  v1::RankStatus second = RunToEnd(again);
  EXPECT_EQ(second.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(second.message(), HasSubstr("a symlink?"));
  struct stat st;
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "root's directory was given to the job's user";
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_P(IsolationTest, CheckpointDirectoryBelongsToTheUser) {
  StartSupervisor();
  v1::RankStatus end = RunToEnd(
      Shell("ckpt", kUserA, "stat -c '%U %a' \"$XL_CHECKPOINT_DIR\""));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(Stdout("ckpt"), absl::StrCat(kUserA, " 700\n"));
}

// A job's checkpoint_dir (a shared filesystem) is made by the rank as its
// user, parents too; where the user may not write, the rank fails to start
// naming checkpoint_dir, and nothing is made there as root.
TEST_P(IsolationTest, ACheckpointDirIsMadeAsTheJobsUser) {
  StartSupervisor();
  const std::string shared = dir_ + "/shared";
  std::filesystem::create_directories(shared);
  ::chmod(shared.c_str(), 01777);  // sticky: as a shared parent must be
  v1::StartRanks start =
      Shell("ckpt2", kUserA, "stat -c '%U %a' \"$XL_CHECKPOINT_DIR\"");
  start.set_checkpoint_dir(shared + "/ckpt2/1");
  (*start.mutable_env())["XL_CHECKPOINT_DIR"] = start.checkpoint_dir();
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(Stdout("ckpt2"), absl::StrCat(kUserA, " 700\n"));

  const std::string closed = dir_ + "/closed";
  std::filesystem::create_directories(closed);
  ::chmod(closed.c_str(), 0755);  // root's: kUserA may not write in it
  v1::StartRanks refused = Shell("ckpt3", kUserA, "true");
  refused.set_checkpoint_dir(closed + "/ckpt3");
  end = RunToEnd(refused);
  ASSERT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("cannot make checkpoint_dir"));
  EXPECT_THAT(end.message(), HasSubstr("Permission denied"));
  EXPECT_FALSE(std::filesystem::exists(closed + "/ckpt3"));

  // Made first by someone else (here root, open to all): not used, or
  // they could swap the job's checkpoints.
  const std::string planted = shared + "/ckpt4";
  std::filesystem::create_directories(planted);
  ::chmod(planted.c_str(), 0777);
  v1::StartRanks hijacked = Shell("ckpt4", kUserA, "true");
  hijacked.set_checkpoint_dir(planted);
  end = RunToEnd(hijacked);
  ASSERT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr("is not a directory of user"));
  // Parents it made let others through to their own.
  struct stat parent;
  ASSERT_EQ(::stat((shared + "/ckpt2").c_str(), &parent), 0);
  EXPECT_EQ(parent.st_mode & 0777, 0755u);
}

// Security review F6: in a directory others may write, a symlink planted
// where the job's checkpoint_dir (or a parent of it) will be, pointing at a
// directory of the job's user, passed the owner check and took the
// checkpoints wherever it was later repointed. No link is followed now.
TEST_P(IsolationTest, NoSymlinkInACheckpointPathIsFollowed) {
  StartSupervisor();
  const std::string shared = dir_ + "/shared";
  const std::string home = dir_ + "/home-a";  // the user's own, 0700
  std::filesystem::create_directories(shared);
  std::filesystem::create_directories(home);
  ::chmod(shared.c_str(), 0777);
  ASSERT_EQ(::chown(home.c_str(), MustLookUp(kUserA).uid,
                    MustLookUp(kUserA).gid),
            0);
  ::chmod(home.c_str(), 0700);
  ASSERT_EQ(::symlink(home.c_str(), (shared + "/ckpt5").c_str()), 0);
  ASSERT_EQ(::symlink(home.c_str(), (shared + "/proj").c_str()), 0);
  int n = 0;
  for (const std::string& path : {shared + "/ckpt5", shared + "/proj/ckpt6"}) {
    v1::StartRanks start = Shell(absl::StrCat("ckptlink", ++n), kUserA, "true");
    start.set_checkpoint_dir(path);
    v1::RankStatus end = RunToEnd(start);
    ASSERT_EQ(end.state(), v1::RANK_FAILED_TO_START) << path;
    EXPECT_THAT(end.message(), HasSubstr("has a symbolic link in a directory"))
        << path;
  }
  EXPECT_FALSE(std::filesystem::exists(home + "/ckpt6"));
}

// A directory another user made first in a shared parent (mallory's
// /shared/ckpt/alice, in a 1777 parent) is refused: she could rename the
// job's directory away and put her own in its place (security review of
// F6). A symlink the operator put where only root may write is followed.
TEST_P(IsolationTest, ACheckpointPathThroughAnotherUsersDirectoryIsRefused) {
  StartSupervisor();
  const RankUser a = MustLookUp(kUserA), b = MustLookUp(kUserB);
  const std::string shared = dir_ + "/shared";
  std::filesystem::create_directories(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string squatted = shared + "/" + kUserA;  // made by user B
  ASSERT_EQ(::mkdir(squatted.c_str(), 0777), 0);
  ASSERT_EQ(::chown(squatted.c_str(), b.uid, b.gid), 0);
  ASSERT_EQ(::chmod(squatted.c_str(), 0777), 0);
  v1::StartRanks start = Shell("squat", kUserA, "true");
  start.set_checkpoint_dir(squatted + "/job7");
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_FAILED_TO_START);
  EXPECT_THAT(end.message(), HasSubstr(squatted + " is another user's"));
  EXPECT_FALSE(std::filesystem::exists(squatted + "/job7"));

  // The same layout made right: the user's own directory in the sticky
  // parent, reached through a root-owned link in a root-owned directory.
  const std::string own = shared + "/own-a";
  ASSERT_EQ(::mkdir(own.c_str(), 0755), 0);
  ASSERT_EQ(::chown(own.c_str(), a.uid, a.gid), 0);
  const std::string links = dir_ + "/links";  // root's, 0755
  ASSERT_EQ(::mkdir(links.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(shared.c_str(), (links + "/ckpt").c_str()), 0);
  start = Shell("own", kUserA, "true");
  start.set_checkpoint_dir(links + "/ckpt/own-a/job8");
  end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_TRUE(std::filesystem::is_directory(own + "/job8"));
}

TEST_P(IsolationTest, TmpdirIsPrivateToTheAttemptAndRemovedAfterIt) {
  StartSupervisor();
  v1::RankStatus end = RunToEnd(Shell(
      "tmpjob", kUserA,
      "echo \"$TMPDIR\"; stat -c '%U %a' \"$TMPDIR\"; echo x > \"$TMPDIR/f\""));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  ASSERT_EQ(end.exit_code(), 0) << Stderr("tmpjob");
  const std::string tmp = dir_ + "/work/tmp/tmpjob-1";
  EXPECT_EQ(Stdout("tmpjob"), absl::StrCat(tmp, "\n", kUserA, " 700\n"));
  EXPECT_TRUE(WaitUntilTrue([&] { return !std::filesystem::exists(tmp); }))
      << tmp << " is still there after the job";
}

#define SKIP_UNLESS(controlled, what)                                  \
  if (!(controlled)) {                                                 \
    GTEST_SKIP() << what << " not controlled here: " << cgroups_.note; \
  }

TEST_P(IsolationTest, OverTheMemoryLimitIsKilledWithTheReasonAndThePeak) {
  SKIP_UNLESS(cgroups_.memory, "memory");
  StartSupervisor();
  v1::StartRanks start = Shell(
      "hog", kUserA, "exec /usr/bin/python3 -c \"x = b'x' * (512 << 20)\"");
  start.mutable_limits()->set_memory_bytes(64 << 20);
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(end.signal(), SIGKILL) << end.message();
  EXPECT_THAT(end.message(),
              HasSubstr("exceeded its memory limit of 67108864 bytes (64 MiB)"));
  EXPECT_THAT(end.message(), HasSubstr("memory_bytes_per_node"));
  EXPECT_GT(end.peak_memory_bytes(), 48u << 20);
  EXPECT_LE(end.peak_memory_bytes(), 65u << 20);
}

TEST_P(IsolationTest, PeakMemoryIsReportedForANormalExit) {
  SKIP_UNLESS(cgroups_.memory, "memory");
  StartSupervisor();
  v1::StartRanks start = Shell(
      "fits", kUserA, "exec /usr/bin/python3 -c \"x = b'x' * (32 << 20)\"");
  start.mutable_limits()->set_memory_bytes(256 << 20);
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(end.exit_code(), 0) << Stderr("fits");
  EXPECT_EQ(end.message(), "exited with code 0");
  EXPECT_GE(end.peak_memory_bytes(), 32u << 20);
  EXPECT_LT(end.peak_memory_bytes(), 256u << 20);
}

TEST_P(IsolationTest, AJobThatAsksForNoMemoryHasTheNodesDefaultLimit) {
  SKIP_UNLESS(cgroups_.memory, "memory");
  default_memory_bytes_ = 64 << 20;
  StartSupervisor();
  v1::RankStatus end = RunToEnd(Shell(
      "nolimit", kUserA,
      "exec /usr/bin/python3 -c \"x = b'x' * (512 << 20)\""));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_EQ(end.signal(), SIGKILL) << end.message();
  EXPECT_THAT(end.message(), HasSubstr("memory limit of 67108864 bytes"));
}

TEST_P(IsolationTest, AForkBombStopsAtTheProcessLimit) {
  SKIP_UNLESS(cgroups_.pids, "pids");
  default_max_processes_ = 1000;
  StartSupervisor();
  v1::StartRanks bomb =
      Shell("bomb", kUserA,
            "i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; "
            "echo all 200 started");
  // The queue's limit wins over the node's default.
  bomb.mutable_limits()->set_max_processes(32);
  v1::RankStatus end = RunToEnd(bomb);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_NE(end.exit_code(), 0) << Stdout("bomb");
  EXPECT_EQ(Stdout("bomb"), "");
  EXPECT_THAT(Stderr("bomb"), HasSubstr("fork"));
  EXPECT_THAT(end.message(),
              HasSubstr("reached its limit of 32 processes and threads"));
  EXPECT_THAT(end.message(), HasSubstr("max_processes_per_node"));
}

TEST_P(IsolationTest, CpuLimitIsTheCfsQuotaOfTheAttemptsCgroup) {
  SKIP_UNLESS(cgroups_.cpu, "cpu");
  StartSupervisor();
  v1::StartRanks start = Shell("cpu", kUserA, "cat /proc/self/cgroup");
  start.mutable_limits()->set_cpus(2);
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  // The rank was in the attempt's cgroup of every controller used.
  const std::string name = absl::StrCat("/xl/", node_, "/cpu-1");
  int seen = 0;
  for (absl::string_view line :
       absl::StrSplit(Stdout("cpu"), '\n', absl::SkipEmpty())) {
    const bool ours =
        cgroups_.version == CgroupVersion::kV2
            ? absl::StartsWith(line, "0::")
            : absl::StrContains(line, ":memory:") ||
                  absl::StrContains(line, ":cpu:") ||
                  absl::StrContains(line, ":devices:") ||
                  absl::StrContains(line, ":freezer:") ||
                  absl::StrContains(line, ":pids:");
    if (!ours) continue;
    ++seen;
    EXPECT_TRUE(absl::EndsWith(line, name)) << line;
  }
  EXPECT_EQ(seen, cgroups_.version == CgroupVersion::kV2
                      ? 1
                      : static_cast<int>(cgroups_.v1_dirs.size()));
  // The quota, read while a rank of the attempt runs.
  v1::StartRanks held = Shell("cpu2", kUserA, "sleep 30");
  held.mutable_limits()->set_cpus(2);
  supervisor_->StartRanks(held);
  ASSERT_GT(sink_.WaitRunning("cpu2", 1, 0), 0);
  std::string quota =
      cgroups_.version == CgroupVersion::kV2
          ? ReadAll(cgroups_.v2_dir + "/cpu2-1/cpu.max")
          : ReadAll(cgroups_.v1_dirs.at("cpu") + "/cpu2-1/cpu.cfs_quota_us");
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(quota)),
            cgroups_.version == CgroupVersion::kV2 ? "200000 100000"
                                                   : "200000");
  supervisor_->StopJob([] {
    v1::StopJob stop;
    stop.set_job_id("cpu2");
    stop.set_attempt(1);
    return stop;
  }());
  sink_.WaitEnd("cpu2", 1, 0);
}

TEST_P(IsolationTest, StopKillsAGrandchildThatLeftTheGroupWithSetsid) {
  StartSupervisor();
  supervisor_->StartRanks(Shell(
      "escape", kUserA,
      "setsid /bin/sh -c 'echo $$ > escaped.pid; exec sleep 300' "
      "</dev/null >/dev/null 2>&1 & exec sleep 300"));
  ASSERT_GT(sink_.WaitRunning("escape", 1, 0), 0);
  const std::string pid_file = dir_ + "/work/jobs/escape/1/escaped.pid";
  pid_t escaped = 0;
  ASSERT_TRUE(WaitUntilTrue([&] {
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadAll(pid_file)),
                            &escaped) &&
           escaped > 0;
  }));
  strays_.push_back(escaped);
  ASSERT_TRUE(Alive(escaped));
  ASSERT_NE(getpgid(escaped), sink_.WaitRunning("escape", 1, 0))
      << "the grandchild did not leave the rank's process group";

  v1::StopJob stop;
  stop.set_job_id("escape");
  stop.set_attempt(1);
  *stop.mutable_grace_period() = ToProtoDuration(absl::Seconds(1));
  supervisor_->StopJob(stop);
  v1::RankStatus end = sink_.WaitEnd("escape", 1, 0);
  EXPECT_EQ(end.signal(), SIGTERM);
  EXPECT_TRUE(WaitUntilTrue([&] { return !Alive(escaped); }))
      << "pid " << escaped << " escaped with setsid() and survived the stop";
}

TEST_P(IsolationTest, OnlyTheUsualDevicesCanBeOpened) {
  SKIP_UNLESS(cgroups_.devices, "devices");
  if (access("/dev/kmsg", R_OK) != 0) GTEST_SKIP() << "no /dev/kmsg here";
  // Root could open /dev/kmsg anywhere else.
  StartSupervisor(RunAs::kSubmitter, /*allow_root_jobs=*/true);
  v1::RankStatus end = RunToEnd(Shell(
      "devs", "root", "echo ok > /dev/null && echo null; : < /dev/kmsg"));
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  EXPECT_NE(end.exit_code(), 0);
  EXPECT_EQ(Stdout("devs"), "null\n");
  EXPECT_THAT(Stderr("devs"), HasSubstr("Operation not permitted"));
}

// GPUs made with mknod and NVIDIA's major number (195): a rank opens the
// one allocated to it (the device exists for the cgroup, so the open gets
// as far as the absent driver: ENXIO) and not the other (EPERM).
TEST_P(IsolationTest, OnlyTheAllocatedGpuDeviceNodesCanBeOpened) {
  SKIP_UNLESS(cgroups_.devices, "devices");
  for (int i : {0, 1}) {
    const std::string path = absl::StrCat(dir_, "/nvidia", i);
    ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0666, makedev(195, i)), 0)
        << path << ": " << strerror(errno);
    ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  }
  StartSupervisor();
  v1::StartRanks start = Shell(
      "fakegpu", kUserA,
      absl::StrCat("cat ", dir_, "/nvidia0; cat ", dir_, "/nvidia1"));
  start.mutable_limits()->add_gpu_indices(0);
  v1::RankStatus end = RunToEnd(start);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  const std::string all = Stderr("fakegpu");
  const size_t second = all.find("nvidia1");
  ASSERT_NE(second, std::string::npos) << all;
  const std::string first_open = all.substr(0, all.find("nvidia1"));
  // The allocated one: past the cgroup, to the missing driver.
  EXPECT_THAT(first_open, Not(HasSubstr("Operation not permitted"))) << all;
  EXPECT_THAT(first_open, HasSubstr("No such device")) << all;
  // The other: refused by the cgroup.
  EXPECT_THAT(all.substr(second), HasSubstr("Operation not permitted"))
      << all;
}

// The node's RDMA devices (NCCL over InfiniBand or RoCE) are every job's,
// as its NICs are: on v2 too (review of F7: the BPF program's list lacked
// them, so multi-node jobs fell back to TCP without a word). A fake
// /dev/infiniband/uverbs device (major 231) is made where none exists.
TEST_P(IsolationTest, TheNodesRdmaDevicesCanBeOpened) {
  SKIP_UNLESS(cgroups_.devices, "devices");
  const std::string dir = "/dev/infiniband";
  if (std::filesystem::exists(dir)) {
    GTEST_SKIP() << dir << " exists: this node has RDMA devices of its own";
  }
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  const std::string path = dir + "/uverbs0";
  ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0666, makedev(231, 192)), 0)
      << strerror(errno);
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  StartSupervisor();
  v1::RankStatus end = RunToEnd(Shell("rdma", kUserA, "cat " + path));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(end.state(), v1::RANK_EXITED) << end.message();
  // Past the cgroup, to the missing driver.
  EXPECT_THAT(Stderr("rdma"), Not(HasSubstr("Operation not permitted")));
  EXPECT_THAT(Stderr("rdma"), HasSubstr("No such device"));
}

// Labelled gpu: needs /dev/nvidia0.
TEST_P(IsolationTest, GpuOnlyTheAllocatedGpusDevicesCanBeOpened) {
  if (access("/dev/nvidia0", F_OK) != 0) {
    GTEST_SKIP() << "no /dev/nvidia0: this test needs an NVIDIA GPU";
  }
  SKIP_UNLESS(cgroups_.devices, "devices");
  StartSupervisor();
  v1::StartRanks allowed =
      Shell("gpu-yes", kUserA, ": < /dev/nvidia0 && echo opened");
  allowed.mutable_limits()->add_gpu_indices(0);
  // Without the allocation the same open is refused by the cgroup (the
  // device file itself is world-readable).
  v1::StartRanks denied = Shell("gpu-no", kUserA, ": < /dev/nvidia0");
  v1::RankStatus yes = RunToEnd(allowed);
  v1::RankStatus no = RunToEnd(denied);
  EXPECT_EQ(yes.exit_code(), 0) << Stderr("gpu-yes");
  EXPECT_EQ(Stdout("gpu-yes"), "opened\n");
  EXPECT_NE(no.exit_code(), 0);
  EXPECT_THAT(Stderr("gpu-no"), HasSubstr("Operation not permitted"));
}

INSTANTIATE_TEST_SUITE_P(
    Cgroups, IsolationTest,
    ::testing::Values(CgroupChoice::kV1, CgroupChoice::kV2),
    [](const ::testing::TestParamInfo<CgroupChoice>& info) {
      return std::string(info.param == CgroupChoice::kV1 ? "V1" : "V2");
    });

}  // namespace
}  // namespace xl::agent
