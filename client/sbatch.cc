// JobSpecFromSbatch: reads the #SBATCH lines of a script, one argument at a
// time, into a Request and a JobSpec (sbatch_options.cc), makes the
// resources (sbatch_resources.cc), and wraps the script in the prelude that
// makes it run once per rank as Slurm's tasks.
#include "client/sbatch.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/sbatch_request.h"

namespace xl::client {
namespace {

using sbatch::ApplyOption;
using sbatch::LongName;
using sbatch::Refusal;
using sbatch::Request;
using sbatch::ResolveResources;
using sbatch::ScriptLine;
using sbatch::TakesValue;

// Run by bash -c before the script ($0 is the script's path, $1 its text as
// submitted, the rest its arguments): Slurm's per-task variables from xl's,
// and `srun` as a function that runs its command in place, skipping srun's
// own options. The text runs, not the file: as sbatch copies the script, a
// later edit or removal changes no queued job, and nodes need not see the
// path.
constexpr char kPrelude[] = R"sh(
export SLURM_JOB_ID="$XL_JOB_ID" SLURM_JOBID="$XL_JOB_ID"
export SLURM_PROCID="$RANK" SLURM_NTASKS="$WORLD_SIZE" SLURM_NPROCS="$WORLD_SIZE"
export SLURM_LOCALID="$LOCAL_RANK" SLURM_NODEID="$GROUP_RANK"
export SLURM_NNODES="$GROUP_WORLD_SIZE" SLURM_JOB_NUM_NODES="$GROUP_WORLD_SIZE"
export SLURM_NTASKS_PER_NODE="$LOCAL_WORLD_SIZE" SLURMD_NODENAME="$XL_NODE"
export SLURM_RESTART_COUNT="$((${XL_ATTEMPT:-1} - 1))"
srun() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --) shift; break ;;
      --*=*) shift ;;
      --ntasks|--nodes|--cpus-per-task|--cpus-per-gpu|--gpus|--gres|--mpi|\
--ntasks-per-node|--export|--time|--job-name|--output|--error|--input|\
--cpu-bind|--distribution|--gpus-per-task|--gpus-per-node|--mem|\
--mem-per-cpu|--mem-per-gpu|--nodelist|--exclude|--partition|--chdir|\
--account|--qos|--constraint|--dependency|--label-format) shift 2 ;;
      -[nNcCtJpoeGwxmBDd]) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  "$@"
}
export -f srun
script_text="$1"
shift
exec /bin/bash -c "$script_text" "$0" "$@"
)sh";

// One argument of a command may hold at most 128 KiB (MAX_ARG_STRLEN).
constexpr size_t kMaxScriptBytes = 100 << 10;

// Splits what follows #SBATCH into arguments the way sbatch does: blanks
// separate them, single or double quotes group (and are dropped), a
// backslash takes the next character as it is, and a '#' outside quotes
// starts a comment. Returns false when a quote is left open.
bool SplitArguments(absl::string_view text, std::vector<std::string>* words) {
  std::string word;
  bool in_word = false;
  char quote = '\0';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (quote != '\0') {
      if (c == quote) {
        quote = '\0';
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == '#') {
      break;
    } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (in_word) words->push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != '\0') return false;
  if (in_word) words->push_back(std::move(word));
  return true;
}

// Applies every argument of one #SBATCH line.
absl::Status ApplyLine(const std::string& path, const ScriptLine& line,
                       const std::vector<std::string>& words, Request* req,
                       v1::JobSpec* spec) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    std::string name, value;
    bool has_value = false;
    if (absl::StartsWith(w, "--") && w.size() > 2) {
      const size_t eq = w.find('=');
      name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        has_value = true;
      }
    } else if (w.size() >= 2 && w[0] == '-' && w[1] != '-') {
      name = std::string(LongName(w[1]));
      if (name.empty()) {
        return Refusal(path, line,
                       absl::StrCat("-", w.substr(1, 1),
                                    " is not an sbatch option xl knows; "
                                    "remove it or use its long form"));
      }
      if (w.size() > 2) {  // -N2, and -N=2 as a courtesy
        value = w.substr(w[2] == '=' ? 3 : 2);
        has_value = true;
      }
    } else if (w == "hetjob" || w == "packjob") {
      return Refusal(path, line,
                     "heterogeneous jobs are not supported; submit each "
                     "component as its own job");
    } else {
      return Refusal(path, line, absl::StrCat("'", w, "' is not an option"));
    }
    if (!has_value && TakesValue(name)) {
      if (i + 1 >= words.size()) {
        return Refusal(path, line, absl::StrCat("--", name, " needs a value"));
      }
      value = words[++i];
    }
    if (absl::Status st = ApplyOption(path, line, name, value, req, spec);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// Applies the #SBATCH lines of `text` to `req` and `spec`: as sbatch, those
// before the first command.
absl::Status ApplyDirectives(const std::string& path, absl::string_view text,
                             Request* req, v1::JobSpec* spec) {
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    // As sbatch: a directive starts the line (an indented one is a
    // comment), and the first line that is neither blank nor a comment is
    // the first command, after which nothing is read.
    absl::string_view rest = raw;
    if (!absl::ConsumePrefix(&rest, "#SBATCH") &&
        !absl::ConsumePrefix(&rest, "#SLURM")) {
      const absl::string_view s = absl::StripLeadingAsciiWhitespace(raw);
      if (s.empty() || s[0] == '#') continue;
      break;
    }
    // "#SBATCHX" is a comment of its own, not a directive.
    if (!rest.empty() &&
        !absl::ascii_isspace(static_cast<unsigned char>(rest[0])) &&
        rest[0] != '-') {
      continue;
    }
    const ScriptLine line{number,
                          std::string(absl::StripTrailingAsciiWhitespace(raw))};
    std::vector<std::string> words;
    if (!SplitArguments(rest, &words)) {
      return Refusal(path, line, "a quote is not closed; close it");
    }
    if (absl::Status st = ApplyLine(path, line, words, req, spec); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// Slurm's job-wide variables; --export wins where it set one.
void AddSlurmJobEnv(const Request& req, v1::JobSpec* spec) {
  auto& env = *spec->mutable_env();
  env.insert({"SLURM_JOB_NAME", spec->name()});
  env.insert({"SLURM_JOB_PARTITION",
              spec->queue().empty() ? std::string("default") : spec->queue()});
  if (req.cpus_per_task) {
    env.insert({"SLURM_CPUS_PER_TASK", absl::StrCat(req.cpus_per_task->value)});
  }
  if (const int gpus = spec->resources().gpus_per_node(); gpus > 0) {
    env.insert({"SLURM_GPUS_ON_NODE", absl::StrCat(gpus)});
    env.insert({"SLURM_GPUS_PER_NODE", absl::StrCat(gpus)});
  }
  if (const uint64_t mem = spec->resources().memory_bytes_per_node(); mem > 0) {
    env.insert({"SLURM_MEM_PER_NODE", absl::StrCat(mem >> 20)});
  }
}

}  // namespace

absl::StatusOr<v1::JobSpec> JobSpecFromSbatch(
    const std::string& path, absl::string_view text,
    const std::vector<std::string>& script_args) {
  std::string script = path;
  if (!script.empty() && script[0] != '/') {
    std::error_code ec;
    script = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
    }
  }
  Request req;
  v1::JobSpec spec;
  if (absl::Status st = ApplyDirectives(path, text, &req, &spec); !st.ok()) {
    return st;
  }
  if (absl::Status st = ResolveResources(path, req, &spec); !st.ok()) {
    return st;
  }
  // As sbatch: a job without a name is named after its script.
  if (spec.name().empty()) {
    const size_t slash = script.rfind('/');
    spec.set_name(slash == std::string::npos ? script
                                             : script.substr(slash + 1));
  }
  AddSlurmJobEnv(req, &spec);
  if (text.size() > kMaxScriptBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(script, ": the script is ", text.size(),
                     " bytes; xl carries it in "
                     "the job, up to ",
                     kMaxScriptBytes,
                     ": move the bulk into a file the "
                     "script runs"));
  }
  spec.add_command("/bin/bash");
  spec.add_command("-c");
  spec.add_command(kPrelude);
  spec.add_command(script);
  spec.add_command(std::string(text));
  for (const std::string& a : script_args) spec.add_command(a);
  return spec;
}

}  // namespace xl::client
