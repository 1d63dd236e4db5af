// A libFuzzer-compatible driver for compilers without libFuzzer (gcc in CI):
// runs LLVMFuzzerTestOneInput over every file of the corpus directories
// given, then over -runs=N inputs made from them by random mutations
// (bit flips, byte changes, inserts, erases, splices, truncations),
// deterministic for one -seed. A harness that finds a bug aborts, so the
// test fails with the input's bytes named. Single-threaded.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void AddPath(const std::string& path, std::vector<std::string>* inputs) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    fprintf(stderr, "fuzz driver: cannot read %s\n", path.c_str());
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    inputs->push_back(ReadAll(path));
    return;
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (struct dirent* e = readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) AddPath(path + "/" + n, inputs);
}

std::string Mutate(std::string s, const std::vector<std::string>& corpus,
                   size_t max_len, std::mt19937_64* rng) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : (*rng)() % n; };
  static const char* kTokens[] = {
      "\n",   ":",  " ",  "[", "]", "{", "}", "\"", "'", "-", "0", "-1",
      "null", "~",  "&a", "*a", "!!", "\\", "%",  "$(", "`", "\x00",
      "9223372036854775807", "1e999", "\xff", "\xc3\xa9", "../"};
  const int steps = 1 + static_cast<int>(pick(4));
  for (int i = 0; i < steps; ++i) {
    switch (pick(7)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // set a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(pick(256));
        break;
      case 2: {  // insert a token
        const char* t = kTokens[pick(sizeof(kTokens) / sizeof(kTokens[0]))];
        s.insert(pick(s.size() + 1), t, std::max<size_t>(1, strlen(t)));
        break;
      }
      case 3:  // erase a range
        if (!s.empty()) {
          size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 4:  // duplicate a range
        if (!s.empty()) {
          size_t at = pick(s.size());
          std::string part = s.substr(at, 1 + pick(32));
          s.insert(pick(s.size() + 1), part);
        }
        break;
      case 5:  // splice with another corpus entry
        if (!corpus.empty()) {
          const std::string& o = corpus[pick(corpus.size())];
          s = s.substr(0, pick(s.size() + 1)) + o.substr(pick(o.size() + 1));
        }
        break;
      default:  // truncate
        if (!s.empty()) s.resize(pick(s.size()));
        break;
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

// The input being run, written to ./crash-input when the harness dies.
const std::string* g_current = nullptr;

void OnFatalSignal(int sig) {
  if (g_current != nullptr) {
    FILE* f = fopen("crash-input", "wb");
    if (f != nullptr) {
      fwrite(g_current->data(), 1, g_current->size(), f);
      fclose(f);
    }
    static const char kMsg[] = "fuzz driver: the input is in ./crash-input\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    signal(sig, OnFatalSignal);
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long runs = 0;
  uint64_t seed = 1;
  size_t max_len = 4096;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) {
      runs = atol(a.c_str() + 6);
    } else if (a.rfind("-seed=", 0) == 0) {
      seed = strtoull(a.c_str() + 6, nullptr, 10);
    } else if (a.rfind("-max_len=", 0) == 0) {
      max_len = strtoul(a.c_str() + 9, nullptr, 10);
    } else if (a[0] == '-') {
      // Other libFuzzer flags mean nothing here.
    } else {
      AddPath(a, &corpus);
    }
  }
  Run("");
  for (const auto& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  for (long i = 0; i < runs; ++i) {
    std::string base;
    if (!corpus.empty() && rng() % 8 != 0) {
      base = corpus[rng() % corpus.size()];
    } else {
      base.resize(rng() % 64);
      for (char& c : base) c = static_cast<char>(rng());
    }
    Run(Mutate(std::move(base), corpus, max_len, &rng));
  }
  printf("fuzz driver: %zu corpus inputs and %ld mutated inputs, no crash\n",
         corpus.size() + 1, runs);
  return 0;
}
