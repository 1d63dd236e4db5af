#include "agent/isolation/device_filter.h"

#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/log.h"

namespace xl::agent {
namespace {

// The registers: r1 holds the context on entry, r0 the result.
constexpr uint8_t kR0 = 0, kR1 = 1, kType = 2, kAccess = 3, kMajor = 4,
                  kMinor = 5, kScratch = 6;

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off,
              int32_t imm) {
  bpf_insn insn;
  std::memset(&insn, 0, sizeof(insn));
  insn.code = code;
  insn.dst_reg = dst;
  insn.src_reg = src;
  insn.off = off;
  insn.imm = imm;
  return insn;
}

bpf_insn LoadWord(uint8_t dst, int16_t offset) {
  return Insn(BPF_LDX | BPF_MEM | BPF_W, dst, kR1, offset, 0);
}
bpf_insn Alu32(uint8_t op, uint8_t dst, int32_t imm) {
  return Insn(BPF_ALU | op | BPF_K, dst, 0, 0, imm);
}
bpf_insn MovReg(uint8_t dst, uint8_t src) {
  return Insn(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0);
}
bpf_insn JumpIfNot(uint8_t reg, int32_t imm, int16_t skip) {
  return Insn(BPF_JMP | BPF_JNE | BPF_K, reg, 0, skip, imm);
}
bpf_insn Return(int32_t value) { return Insn(BPF_ALU64 | BPF_MOV | BPF_K, kR0, 0, 0, value); }
bpf_insn Exit() { return Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

std::vector<bpf_insn> Program(const std::vector<DeviceRule>& rules) {
  std::vector<bpf_insn> p;
  // access_type is (access << 16) | type.
  p.push_back(LoadWord(kType, offsetof(bpf_cgroup_dev_ctx, access_type)));
  p.push_back(Alu32(BPF_AND, kType, 0xFFFF));
  p.push_back(LoadWord(kAccess, offsetof(bpf_cgroup_dev_ctx, access_type)));
  p.push_back(Alu32(BPF_RSH, kAccess, 16));
  p.push_back(LoadWord(kMajor, offsetof(bpf_cgroup_dev_ctx, major)));
  p.push_back(LoadWord(kMinor, offsetof(bpf_cgroup_dev_ctx, minor)));
  for (const DeviceRule& rule : rules) {
    // Each rule is a block of checks that jump past its end when one fails,
    // then "return 1".
    std::vector<bpf_insn> checks;
    std::vector<size_t> jumps;  // indexes in `checks` to patch
    if (rule.type != 'a') {
      jumps.push_back(checks.size());
      checks.push_back(JumpIfNot(
          kType, rule.type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR,
          0));
    }
    if (rule.major >= 0) {
      jumps.push_back(checks.size());
      checks.push_back(JumpIfNot(kMajor, static_cast<int32_t>(rule.major), 0));
    }
    if (rule.minor >= 0) {
      jumps.push_back(checks.size());
      checks.push_back(JumpIfNot(kMinor, static_cast<int32_t>(rule.minor), 0));
    }
    const int32_t allowed = (rule.mknod ? BPF_DEVCG_ACC_MKNOD : 0) |
                            (rule.read ? BPF_DEVCG_ACC_READ : 0) |
                            (rule.write ? BPF_DEVCG_ACC_WRITE : 0);
    if (allowed != (BPF_DEVCG_ACC_MKNOD | BPF_DEVCG_ACC_READ |
                    BPF_DEVCG_ACC_WRITE)) {
      // Any access bit outside `allowed`: not this rule.
      checks.push_back(MovReg(kScratch, kAccess));
      checks.push_back(Alu32(BPF_AND, kScratch, ~allowed));
      jumps.push_back(checks.size());
      checks.push_back(JumpIfNot(kScratch, 0, 0));
    }
    checks.push_back(Return(1));
    checks.push_back(Exit());
    for (size_t j : jumps) {
      checks[j].off = static_cast<int16_t>(checks.size() - j - 1);
    }
    p.insert(p.end(), checks.begin(), checks.end());
  }
  p.push_back(Return(0));
  p.push_back(Exit());
  return p;
}

long Bpf(int cmd, bpf_attr* attr) {
  return ::syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

// The loaded program's fd, or the kernel's refusal with the verifier's log.
absl::StatusOr<int> Load(const std::vector<bpf_insn>& program) {
  static const char kLicense[] = "Apache-2.0";
  std::string log(64 * 1024, '\0');
  bpf_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(program.data());
  attr.insn_cnt = static_cast<uint32_t>(program.size());
  attr.license = reinterpret_cast<uint64_t>(kLicense);
  // Without the verifier's log first (a log too small for a long program
  // fails the load on older kernels), and again on EAGAIN, which the
  // verifier answers when it is interrupted (libbpf retries it too).
  long fd = -1;
  int err = 0;
  for (int tries = 0; tries < 5; ++tries) {
    fd = Bpf(BPF_PROG_LOAD, &attr);
    err = errno;
    if (fd >= 0 || (err != EAGAIN && err != EINTR)) break;
  }
  if (fd < 0) {
    // Once more with the log, for the reason.
    attr.log_buf = reinterpret_cast<uint64_t>(log.data());
    attr.log_size = static_cast<uint32_t>(log.size());
    attr.log_level = 1;
    fd = Bpf(BPF_PROG_LOAD, &attr);  // loaded this time: used
    if (fd < 0 && errno != EAGAIN && errno != EINTR) err = errno;
  }
  if (fd < 0) {
    log.resize(::strnlen(log.data(), log.size()));
    return absl::FailedPreconditionError(absl::StrCat(
        "the kernel refused the BPF device program: ", ErrnoString(err),
        err == EPERM ? " (the agent needs CAP_BPF or CAP_SYS_ADMIN: run it "
                       "as root)"
                     : "",
        log.empty() ? "" : absl::StrCat("; verifier: ", log)));
  }
  return static_cast<int>(fd);
}

bool ParseNumber(absl::string_view s, int64_t* out) {
  if (s == "*") {
    *out = -1;
    return true;
  }
  return absl::SimpleAtoi(s, out) && *out >= 0 && *out <= 0x7FFFFFFF;
}

}  // namespace

absl::StatusOr<DeviceRule> ParseDeviceRule(const std::string& line) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device rule \"", line, "\": ", what,
        "; write TYPE MAJOR:MINOR ACCESS, as \"c 195:0 rwm\""));
  };
  if (parts.size() != 3) return bad("not three fields");
  DeviceRule rule;
  if (parts[0] != "c" && parts[0] != "b" && parts[0] != "a") {
    return bad("the type is not c, b or a");
  }
  rule.type = parts[0][0];
  std::vector<absl::string_view> numbers = absl::StrSplit(parts[1], ':');
  if (numbers.size() != 2 || !ParseNumber(numbers[0], &rule.major) ||
      !ParseNumber(numbers[1], &rule.minor)) {
    return bad("MAJOR:MINOR are not numbers or '*'");
  }
  rule.read = rule.write = rule.mknod = false;
  for (char c : parts[2]) {
    if (c == 'r') {
      rule.read = true;
    } else if (c == 'w') {
      rule.write = true;
    } else if (c == 'm') {
      rule.mknod = true;
    } else {
      return bad("the access is not made of r, w and m");
    }
  }
  return rule;
}

std::vector<uint64_t> DeviceFilterProgram(
    const std::vector<DeviceRule>& rules) {
  std::vector<bpf_insn> p = Program(rules);
  std::vector<uint64_t> out(p.size());
  std::memcpy(out.data(), p.data(), p.size() * sizeof(bpf_insn));
  return out;
}

absl::Status AttachDeviceFilter(int cgroup_fd,
                                const std::vector<DeviceRule>& rules) {
  absl::StatusOr<int> prog = Load(Program(rules));
  if (!prog.ok()) return prog.status();
  bpf_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.target_fd = static_cast<uint32_t>(cgroup_fd);
  attr.attach_bpf_fd = static_cast<uint32_t>(*prog);
  attr.attach_type = BPF_CGROUP_DEVICE;
  // Beside whatever the agent's own ancestors attached (systemd's, a
  // container runtime's): the kernel allows an access only if all allow it.
  attr.attach_flags = BPF_F_ALLOW_MULTI;
  const long rc = Bpf(BPF_PROG_ATTACH, &attr);
  const int err = errno;
  ::close(*prog);  // the attachment holds the program
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot attach the BPF device program to the job's cgroup: ",
        ErrnoString(err)));
  }
  return absl::OkStatus();
}

absl::Status ProbeDeviceFilter() {
  absl::StatusOr<int> prog = Load(Program({}));
  if (!prog.ok()) return prog.status();
  ::close(*prog);
  return absl::OkStatus();
}

}  // namespace xl::agent
