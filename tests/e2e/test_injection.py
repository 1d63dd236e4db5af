"""Injection end to end: hundreds of hostile payloads in a job's command,
env, working_dir and name, submitted to the real xl-scheduler on 127.0.0.1
(no TLS; callers name themselves with XL_USER) through xlctl with JSON job
files and through gRPC, run by real xl-agent processes (--run-as agent
--allow-root-jobs). Each submission is either rejected with an error that
names the field (and stores nothing), or runs with the value taken
literally: argv reaches the program byte for byte (it is never given to a
shell), env values and keys arrive as given, the rank starts in exactly the
working_dir given (a relative one in a job file is the file's directory
joined with it, normalized, as xlctl documents). Every payload that a shell would act on touches its own
file under a sentinel directory; at the end no such file (nor any other
stray file) exists, and the scheduler and agents are alive and READY.

Also: `xlctl list` and `xlctl get` (table output) never print raw control
characters from a job's name, env, command, working_dir or reason, so a
hostile job cannot write escape sequences to another user's terminal."""

import base64
import concurrent.futures
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import XLCTL, Cluster  # noqa: E402

PRINTF = "/usr/bin/printf"
ENV = "/usr/bin/env"
PWD = "/bin/pwd"
TRUE = "/bin/true"
AGENTS = ("node-a", "node-b", "node-c")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# Per-batch limits: argv + envp of one execve stays far below ARG_MAX.
BATCH_BYTES = 256 * 1024
BATCH_ITEMS = 40


# --- payloads ------------------------------------------------------------

# {M} is the payload's own marker path: a shell (or anything else) that acted
# on the payload would create it.
SHELL_TEMPLATES = [
    "; touch {M}", ";touch {M};", "$(touch {M})", "`touch {M}`", "| touch {M}", "|touch {M}",
    "&& touch {M}", "|| touch {M}", "& touch {M}", "&touch {M}&", "\ntouch {M}", "\r\ntouch {M}",
    "\ttouch {M}", "${{IFS}}touch${{IFS}}{M}", ";touch${{IFS}}{M}", "$IFS$9touch {M}",
    "$(touch${{IFS}}{M})", "';touch {M};'", "\";touch {M};\"", "'$(touch {M})'",
    "\"$(touch {M})\"", "`touch {M}`#", "> {M}", ">{M}", ">> {M}", "2>{M}", "&>{M}",
    "| tee {M}", "<(touch {M})", ">(touch {M})", "$((1))$(touch {M})", "{{touch,{M}}}",
    "$'touch' {M}", "$'\\x74ouch' {M}", "\\;touch {M}", "%0Atouch {M}", "%3Btouch%20{M}",
    "() {{ :; }}; touch {M}", "() {{ :;}}; /usr/bin/touch {M}",
    "() {{ _; }} >_[$($())] {{ touch {M}; }}", "x; /bin/sh -c 'touch {M}'",
    "$(/bin/sh -c 'touch {M}')", "`/bin/sh -c \"touch {M}\"`", "-c 'touch {M}'",
    "; python3 -c 'open(\"{M}\",\"w\")'", "$(python3 -c 'open(\"{M}\",\"w\")')",
    "| sh -c 'touch {M}'", "\n/usr/bin/touch {M}\n", "'\n touch {M} \n'", "$(touch {M}) #",
    "*; touch {M}", "!(touch {M})", "!!; touch {M}", "eval 'touch {M}'", "exec touch {M}",
    ";{{touch,{M}}}", "\\`touch {M}\\`", "$(printf 'touch {M}'|sh)", "a=$(touch {M})",
    "${{a:-$(touch {M})}}", "${{a=`touch {M}`}}", "~/$(touch {M})", "-o {M}",
    "--output={M}", "--log-file={M}", "-exec touch {M} ;", "@{M}", "file://{M}",
    "\u202e; touch {M}", "\u200b; touch {M}", "\u2028touch {M}", "\uff1btouch {M}",
    "\uff04(touch {M})", "\u037e touch {M}", "\x1b]52;c;{B}\x07; touch {M}",
]
SHELL_PREFIXES = ["", "x\"", "-- '"]

# Relative markers: a side effect in whatever directory the rank runs in.
RELATIVE_TEMPLATES = ["; touch pwned-rel-{n}", "$(touch pwned-rel-{n})", "> pwned-rel-{n}",
                      "`touch pwned-rel-{n}`", "| tee pwned-rel-{n}", "\ntouch pwned-rel-{n}"]

TRAVERSAL = (
    ["../" * k + t for k in (1, 2, 3, 5, 8, 16, 32)
     for t in ("etc/passwd", "etc/shadow", "proc/self/environ", "root/.ssh/authorized_keys", "tmp")]
    + ["/etc/passwd", "/etc/shadow", "/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ",
       "/dev/tty", "/dev/stdout", "/", "//", "/..", "/../../../..", "/proc/self/cwd",
       "/proc/self/root", "/tmp/../etc/passwd", "..\\..\\..\\windows\\win.ini",
       "....//....//etc/passwd", "..%2f..%2f..%2fetc%2fpasswd", "%2e%2e/%2e%2e/etc/passwd",
       "..%c0%af..%c0%afetc/passwd", "file:///etc/passwd", "~root", "~/.bashrc", ".", "..",
       "...", "./", "../", "/etc/passwd/.", "/etc//passwd", "/etc/./passwd"]
)

FORMAT = ["%s%n%x", "%n%n%n%n", "%s" * 40, "%x" * 40, "%p%p%p%p", "%99999999s", "%.9999999f",
          "%1$s%2$n", "%-*.*s", "%%", "%c%c", "%lln", "%hn", "\\x41\\x42", "%00", "%s\\n", "{0}",
          "{0.__class__}", "{{7*7}}", "${7*7}", "#{7*7}", "<%= 7*7 %>", "${jndi:ldap://127.0.0.1/a}",
          "%(x)s", "%b", "%q", "%*d", "\\c", "\\0101"]

UNICODE = ["\u202e", "\u202egnp.exe", "abc\u202edef", "\u200b", "\u200d", "\ufeff", "\u2028", "\u2029",
           "\u00a0", "\u3000", "e\u0301", "\U0001F4A9", "\U0001d54f", "\u0131", "\u0130stanbul",
           "\ufffd", "\uffff", "\ue000", "\u00ad", "\u061c", "\u2066\u2067\u2068\u2069", "\u200e\u200f",
           "\u03a9\u2248\u00e7\u221a\u222b", "\u7530\u4e2d\u3055\u3093", "\u062b\u0645 \u0646\u0641\u0633",
           "\u0085", "\u0080", "\u009b[2J", "\U000e0001\U000e0041", "Z\u0364\u0354\u0367\u0311\u0313a\u0308",
           "\u202a\u202b\u202c\u202d"]

ESCAPES = ["\x1b[2J", "\x1b[H\x1b[2J", "\x1b]52;c;{B}\x1b\\", "\x1b]0;pwned-title\x07",
           "\x1b]2;title\x1b\\", "\x1b[31mred\x1b[0m", "\x1b[6n", "\x1b[21t", "\x1b[?1049h",
           "\x1bP$q\x1b\\", "\x1b]8;;file://{M}\x07click\x1b]8;;\x07", "\x1b[1A\x1b[2K", "\x1bc",
           "\x1b[5i", "\x07\x07\x07", "\x08\x08\x08ok", "fake\roverwrite", "\x1b[8mhidden",
           "\x1b]1337;File=name=eA==:AAAA\x07", "\x1b[200~paste\x1b[201~", "\x1b]50;?\x07",
           "\x1b[0c", "\x1b[?25l", "\x1b#8", "\x1b(0lqk", "\x1b[3g", "\x1b]4;1;?\x07"]

QUOTES = ["'", "\"", "`", "''", "\"\"", "``", "'\"`", "\"'\"'\"", "\u2018x\u2019", "\u201cx\u201d",
          "\u00abx\u00bb", "\u201ex\u201c", "'unterminated", "\"unterminated", "\\'", "\\\"", "\\\\",
          "$'x'", "$\"x\"", "'''", "\"\"\"", "'\\''", "\\", "\\n", "\\0", "\\u0000", "\\x00"]

FLAGS = ["--help", "-h", "--version", "-rf /", "-n", "-e", "-E", "--", "-", "--config=/etc/passwd",
         "-c", "--rm", "--no-preserve-root", "-v -v -v", "--format=%n", "-%", "---", "--=", "-0",
         "--exec=/bin/sh", "-i", "--output=-", "-l", "--null", "-u PATH"]

YAML = ["{", "}", "[", "]", "{}", "[]", "{\"a\":1}", "[1,2", "&anchor", "*alias", "&a [*a]",
        "!!python/object/apply:os.system ['touch {M}']", "!!python/object:__main__.X",
        "!!binary aGk=", "!!str", "!ruby/object:Gem::Installer", "---", "...", "--- !!map",
        "? complex", ": value", "key: value", "- item", "| literal", "> folded", "#comment",
        "%YAML 1.1", "%TAG ! tag:x:", "<<: *alias", "null", "~", "true", "yes", "no", "on", "NO",
        "0x1F", "0o17", "1e999", ".inf", "-.nan", "1_000", "012", "2001-12-14", "@at",
        "{\"$ne\": null}", "{\"__proto__\":{\"x\":1}}", "__proto__", "constructor",
        "\"quoted\": true", "a: !!python/object/new:os.system [\"touch {M}\"]", "=", "A=B",
        "=value", "!", "!!", "&", "*", "|", ">", "%", "@", "`", ",", "a,b", "a #b", "a: b: c"]

ENV_NAMES = ["A=B", "A B", "1ABC", "A-B", "A.B", "A$B", "A;B", "A\nB", "PATH", "LD_PRELOAD",
             "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "IFS", "PS4", "PROMPT_COMMAND", "XL_JOB_ID",
             "XL_RENDEZVOUS_TOKEN", "RANK", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "BASH_FUNC_x%%",
             "_", "__", "\u00e9", "A\x00B", "HOME", "SHELLOPTS", "TMPDIR", "XL_METRICS_FD", "a",
             "A\x1b[2J", "A\u200b", "BASH_FUNC_echo()"]

NUL = ["\x00", "a\x00b", "\x00\x00", "\x00" + "A" * 100, "/bin/true\x00/etc/passwd", "x\x00; touch {M}",
       "x\x00$(touch {M})", "\x00\n\x00"]


def long_payloads(mark):
    k = 64 * 1024
    sh = f"; touch {mark}"
    return ["A" * k, "%s" * (k // 2), (sh * (k // len(sh) + 1))[:k], "\u00e9" * (k // 2),
            "\u202e" * (k // 3), "../" * (k // 3), "A" * 4096, "A" * 4097, "A" * 255, "A" * 256,
            "A" * 128, "A" * 129, "\x1b[2J" * (k // 4)]


def build_payloads(sentinel):
    """Distinct hostile strings (at least 500), each with its own marker."""
    out, seen = [], set()

    def add(text):
        if text not in seen:
            seen.add(text)
            out.append(text)

    def mark():
        return f"{sentinel}/pwned-{len(out)}"

    def fill(template):
        m = mark()
        b = base64.b64encode(f"touch {m}\n".encode()).decode()
        return template.replace("{M}", m).replace("{B}", b).replace("{n}", str(len(out)))

    for prefix, template in itertools.product(SHELL_PREFIXES, SHELL_TEMPLATES):
        add(prefix + fill(template.replace("{{", "{").replace("}}", "}")))
    for template in RELATIVE_TEMPLATES:
        add(fill(template))
    for group in (TRAVERSAL, FORMAT, UNICODE, ESCAPES, QUOTES, FLAGS, YAML, ENV_NAMES, NUL):
        for template in group:
            add(fill(template))
    for c in list(range(0, 32)) + [0x7F]:
        add(f"a{chr(c)}b")
    add("")
    for text in long_payloads(mark()):
        add(text)
    return out


# --- gRPC without generated stubs: the few messages, hand-encoded ----------

def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(num, data):
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _int_field(num, value):
    return _varint(num << 3) + _varint(value)


def encode_submit(spec):
    """xl.v1.SubmitJobRequest{spec: JobSpec} from a job-file dict."""
    s = b""
    if spec.get("name"):
        s += _bytes_field(1, spec["name"].encode())
    for arg in spec.get("command", []):
        s += _bytes_field(4, arg.encode())
    for k, v in spec.get("env", {}).items():
        s += _bytes_field(5, _bytes_field(1, k.encode()) + _bytes_field(2, v.encode()))
    s += _bytes_field(6, _int_field(1, 1) + _int_field(2, 1) + _int_field(8, 1))
    if spec.get("working_dir"):
        s += _bytes_field(10, spec["working_dir"].encode())
    return _bytes_field(1, s)


def read_varint(data, i):
    """(value, next index) of the varint at data[i]."""
    v, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def decode_fields(data):
    """{field number: [values]} of one message; length-delimited values as bytes."""
    fields, i = {}, 0
    while i < len(data):
        key, i = read_varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(data, i)
        elif wire == 2:
            n, i = read_varint(data, i)
            v, i = data[i:i + n], i + n
        elif wire == 1:
            v, i = data[i:i + 8], i + 8
        elif wire == 5:
            v, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(num, []).append(v)
    return fields


# --- helpers ------------------------------------------------------------

def short(text, n=60):
    r = repr(text)
    return r if len(r) <= n else f"{r[:n]}...({len(text)} chars)"


def parse_env0(data):
    env = {}
    for entry in data.split(b"\0"):
        if entry:
            k, _, v = entry.partition(b"=")
            env[k] = v
    return env


def walk_entries(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            yield os.path.join(dirpath, name)


C1 = {chr(c).encode() for c in range(0x80, 0xA0)}


def control_chars(data):
    """Raw control characters in terminal output: C0 but newline, DEL, C1."""
    found = []
    for i, b in enumerate(data):
        if (b < 0x20 and b != 0x0A) or b == 0x7F:
            found.append((i, f"0x{b:02x}"))
        elif data[i:i + 2] in C1:
            found.append((i, f"U+{data[i + 1]:04X}"))
    return found


def shown(value):
    """A bad value as the scheduler's errors show it: at most 64 bytes, bytes
    outside printable ASCII as \\xNN, and the length when it was cut."""
    data = value.encode("utf-8", "surrogatepass")
    out = "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data[:64])
    return out + (f"... ({len(data)} bytes)" if len(data) > 64 else "")


class Unit:
    """One submission: a job spec carrying one or more (field, payload) cases."""

    def __init__(self, field, spec, payloads, user, via, names=None):
        self.field, self.spec, self.payloads = field, spec, payloads
        self.user, self.via = user, via
        self.names = names  # env batch: the key of each payload
        self.job_id = None
        self.rejection = None  # (rc or code, message)


class Injection(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for program in (PRINTF, ENV, PWD, TRUE):
            if not os.access(program, os.X_OK):
                raise unittest.SkipTest(f"{program} is needed")
        cls.sentinel = f"/tmp/xl-inj-{os.getpid()}"
        shutil.rmtree(cls.sentinel, ignore_errors=True)
        os.makedirs(cls.sentinel)
        cls.addClassCleanup(shutil.rmtree, cls.sentinel, True)
        cls.work = os.path.realpath(tempfile.mkdtemp(prefix="xl-inj-work-"))
        cls.addClassCleanup(shutil.rmtree, cls.work, True)
        cls.jobfiles = os.path.join(cls.work, "jobfiles")
        cls.dirs = os.path.join(cls.work, "dirs")  # working dirs named by payloads
        cls.cwd = os.path.join(cls.work, "cwd")  # xlctl's (and so the ranks') cwd
        cls.emptybin = os.path.join(cls.work, "emptybin")  # PATH of the command[0] jobs
        for d in (cls.jobfiles, cls.dirs, cls.cwd, cls.emptybin):
            os.makedirs(d)
        cls.roots_before = {d: set(os.listdir(d)) for d in ("/", "/tmp", os.getcwd())}
        cls.c = Cluster(agents=0, heartbeat_timeout=15.0)
        cls.addClassCleanup(cls.c.close)
        for name in AGENTS:
            cls.c.start_agent(name, gpus=0, cpus=96)
        cls.c.wait_nodes(len(AGENTS))
        cls.channel = grpc.insecure_channel(cls.c.address)
        cls.addClassCleanup(cls.channel.close)
        cls.submit_rpc = cls.channel.unary_unary("/xl.v1.JobService/SubmitJob")
        cls.counter = itertools.count()

    # --- submitting ---------------------------------------------------------
    def xlctl(self, *args, user="tester", timeout=60):
        env = dict(os.environ, XL_SERVER=self.c.address, XL_USER=user)
        return subprocess.run([XLCTL, *args], capture_output=True, env=env, timeout=timeout,
                              cwd=self.cwd)

    def list_jobs(self, user=None, states=()):
        args = ["list", "-o", "json", "--all-pages", "--limit", "1000"]
        if user:
            args += ["--user", user]
        if states:
            args += ["--state", ",".join(states)]
        r = self.xlctl(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout or b"{}").get("jobs", [])

    def submit(self, unit):
        spec = dict(unit.spec, resources={"cpus_per_node": 1})
        if unit.via == "grpc":
            try:
                answer = self.submit_rpc(encode_submit(spec), timeout=60,
                                         metadata=[("x-xl-user", unit.user)])
            except grpc.RpcError as e:
                unit.rejection = (e.code(), e.details() or "")
                return unit
            unit.job_id = decode_fields(answer)[1][0].decode()
            return unit
        path = os.path.join(self.jobfiles, f"job-{next(self.counter)}.json")
        # ensure_ascii=False: control characters are still \u-escaped, the rest
        # is UTF-8 (see test_json_job_file_with_escaped_non_bmp_character).
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        try:
            r = self.xlctl("submit", path, user=unit.user)
        except subprocess.TimeoutExpired:
            unit.rejection = ("hang", "xlctl submit did not return within 60 s")
            return unit
        if r.returncode == 0 and r.stdout.strip().isdigit():
            unit.job_id = r.stdout.strip().decode()
        else:
            unit.rejection = (r.returncode, r.stderr.decode("utf-8", "replace"))
        return unit

    def named_rejection(self, unit, field):
        """The rejection is INVALID_ARGUMENT (xlctl: exit code 2) naming `field`."""
        code, message = unit.rejection
        if unit.via == "grpc":
            return code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith(f"{field}: ")
        return (code == 2 and f"the scheduler rejected the request: {field}: " in message)

    # --- the units of each field ---------------------------------------------
    def units(self, payloads):
        def batches(items):
            batch, size = [], 0
            for i, p in items:
                n = len(p.encode()) + 16
                if batch and (size + n > BATCH_BYTES or len(batch) >= BATCH_ITEMS):
                    yield batch
                    batch, size = [], 0
                batch.append((i, p))
                size += n
            if batch:
                yield batch

        indexed = list(enumerate(payloads))
        units = []
        for batch in batches(indexed):
            ps = [p for _, p in batch]
            units.append(Unit("argv", {"command": [PRINTF, "%s\\0", *ps]}, ps, "inj-argv", "xlctl"))
        for batch in batches(indexed):
            ps = [p for _, p in batch]
            names = [f"INJ_{j}" for j in range(len(ps))]
            units.append(Unit("env value", {"command": [ENV, "-0"], "env": dict(zip(names, ps))},
                              ps, "inj-envval", "xlctl", names))
        for i, p in indexed:
            via = "grpc" if i % 2 == 0 else "xlctl"
            # YAML (the job file's syntax) allows implicit keys of up to 1024
            # characters; longer env keys go by gRPC (see test_json_job_file_...).
            key_via = "grpc" if len(p) >= 1000 else via
            # PATH is an empty directory: a payload that happens to name a
            # program ("yes", "[") is looked up there and not found.
            units.append(Unit("command[0]", {"command": [p], "env": {"PATH": self.emptybin}}, [p],
                              "inj-argv0", "xlctl"))
            units.append(Unit("env key", {"command": [ENV, "-0"], "env": {p: "v"}}, [p],
                              "inj-envkey", key_via))
            units.append(Unit("working_dir", {"command": [PWD, "-P"], "working_dir": p}, [p],
                              "inj-wd", "xlctl"))
            units.append(Unit("working_dir (absolute)",
                              {"command": [PWD, "-P"], "working_dir": f"{self.dirs}/{p}"}, [p],
                              "inj-wdabs", "xlctl"))
            units.append(Unit("name", {"command": [TRUE], "name": p}, [p], "inj-name", via))
        return units

    def split(self, unit):
        """The single-payload submissions of a rejected batch."""
        out = []
        for j, p in enumerate(unit.payloads):
            if unit.field == "argv":
                out.append(Unit("argv", {"command": [PRINTF, "%s\\0", p]}, [p], unit.user, unit.via))
            else:
                out.append(Unit("env value", {"command": [ENV, "-0"], "env": {"INJ_0": p}}, [p],
                                unit.user, unit.via, ["INJ_0"]))
        return out

    def expected_field(self, unit):
        if unit.field == "argv":
            return "command[2]"
        if unit.field == "command[0]":
            return "command[0]"
        if unit.field == "env value":
            return "env.INJ_0"
        if unit.field == "env key":
            return "env." + shown(unit.payloads[0])
        if unit.field.startswith("working_dir"):
            return "working_dir"
        return "name"

    # --- reading results -----------------------------------------------------
    def logs(self, job_id, user):
        r = self.xlctl("logs", job_id, "-o", "json", user=user)
        if r.returncode != 0:
            return None, None, r.stderr.decode("utf-8", "replace")
        chunks = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        chunks.sort(key=lambda c: int(c.get("seq", 0)))
        out, err = b"", b""
        for c in chunks:
            data = base64.b64decode(c.get("data", ""))
            if c.get("stream", "STDOUT") == "STDERR":
                err += data
            else:
                out += data
        return out, err, None

    def check_accepted(self, unit, job):
        """Problems with an accepted unit's job; empty when it ran literally."""
        problems = []
        spec = job.get("spec", {})
        p0 = unit.payloads[0]
        want_cmd = unit.spec["command"]
        if spec.get("command", []) != want_cmd:
            problems.append("stored command differs from the one submitted")
        if spec.get("env", {}) != unit.spec.get("env", {}):
            problems.append("stored env differs from the one submitted")
        if spec.get("name", "") != unit.spec.get("name", ""):
            problems.append(f"stored name {short(spec.get('name', ''))} is not the one submitted")
        wd = unit.spec.get("working_dir", "")
        stored = spec.get("working_dir", "")
        if wd and not wd.startswith("/"):
            # Relative in a job file: xlctl joins it to the file's directory.
            want_wd = os.path.normpath(os.path.join(self.jobfiles, wd))
            if not stored.startswith("/") or os.path.normpath(stored) != want_wd:
                problems.append(f"stored working_dir {short(stored)} is not {short(want_wd)}")
        elif wd and stored != wd:
            problems.append(f"stored working_dir {short(stored)} is not the one submitted")
        state, reason = job.get("state"), job.get("reason", "")
        if unit.field == "name":
            if state != "SUCCEEDED":
                problems.append(f"ended {state}: {short(reason, 200)}")
            return problems
        if unit.field == "command[0]":
            if state == "FAILED" and f"cannot execute {p0}" in reason:
                return problems
            problems.append(f"ended {state}, reason does not show the literal path: {short(reason, 200)}")
            return problems
        out, err, log_error = self.logs(unit.job_id, unit.user)
        if log_error:
            return problems + [f"xlctl logs failed: {log_error[:200]}"]
        if unit.field == "argv":
            want = b"".join(p.encode() + b"\0" for p in unit.payloads)
            if state != "SUCCEEDED" or out != want or err:
                problems.append(f"ended {state} ({short(reason, 120)}); stdout {short(out, 120)} "
                                f"!= {short(want, 120)}; stderr {short(err, 120)}")
            return problems
        if unit.field in ("env value", "env key"):
            env = parse_env0(out or b"")
            if state != "SUCCEEDED":
                problems.append(f"ended {state}: {short(reason, 200)}")
            if unit.field == "env key":
                if env.get(p0.encode()) != b"v":
                    problems.append(f"env shows {short(env.get(p0.encode()))} for the key")
            else:
                for name, p in zip(unit.names, unit.payloads):
                    if env.get(name.encode()) != p.encode():
                        problems.append(f"{name}={short(env.get(name.encode()))}, not {short(p)}")
            return problems
        # working_dir: the rank started in exactly that directory, or failed to.
        eff = spec.get("working_dir", "")
        if os.path.isdir(eff):
            want = os.fsencode(os.path.realpath(eff)) + b"\n"
            if state != "SUCCEEDED":
                problems.append(f"{short(eff)} is a directory but the job ended {state}: {short(reason, 200)}")
            elif eff.startswith("/proc/"):
                if not out.startswith(b"/"):
                    problems.append(f"pwd printed {short(out)}")
            elif out != want:
                problems.append(f"pwd printed {short(out)}, not {short(want)}")
        elif state != "FAILED" or f"cannot change to working directory {eff[:4096]}" not in reason:
            problems.append(f"{short(eff)} is no directory, yet the job ended {state}: {short(reason, 200)}")
        return problems

    # --- the test ------------------------------------------------------------
    def test_500_payloads_in_every_field_are_rejected_or_taken_literally(self):
        t0 = time.monotonic()
        payloads = build_payloads(self.sentinel)
        self.assertGreaterEqual(len(payloads), 500)
        self.assertEqual(len(set(payloads)), len(payloads))
        # Working directories named by the payloads, where a name can be one.
        for p in payloads:
            if p not in ("", ".", "..") and "/" not in p and "\0" not in p and len(p.encode()) <= 255:
                os.mkdir(os.path.join(self.dirs, p))
        dirs_made = set(os.listdir(self.dirs))
        units = self.units(payloads)
        users = sorted({u.user for u in units})
        for user in users:
            self.assertEqual(self.list_jobs(user), [], user)

        done = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            pending = [pool.submit(self.submit, u) for u in units]
            while pending:
                unit = pending.pop(0).result()
                if unit.rejection and unit.field in ("argv", "env value") and len(unit.payloads) > 1:
                    pending += [pool.submit(self.submit, u) for u in self.split(unit)]
                else:
                    done.append(unit)
        t_submitted = time.monotonic()
        print(f"\ninjection: {len(done)} submissions made in {t_submitted - t0:.1f}s", file=sys.stderr)

        deadline = time.monotonic() + 240
        while True:
            running = self.list_jobs(states=("PENDING", "SCHEDULED", "RUNNING"))
            if not running:
                break
            self.assertLess(time.monotonic(), deadline, "jobs that did not end within 240 s:\n" + "\n".join(
                f"job {j['id']} of {j.get('user')} {j.get('state')}: {short(j.get('spec'), 300)}"
                for j in running[:20]))
            time.sleep(0.5)
        t_ended = time.monotonic()
        jobs = {}
        for user in users:
            for job in self.list_jobs(user):
                jobs[job["id"]] = job

        problems, rejected, literal = [], 0, 0
        tally = {}  # field -> [rejected, literal]
        accepted = [u for u in done if u.job_id]
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            checks = {u: pool.submit(self.check_accepted, u, jobs[u.job_id])
                      for u in accepted if u.job_id in jobs}
        for unit in done:
            what = f"{unit.field} via {unit.via}: {short(unit.payloads[0])}" + (
                f" (+{len(unit.payloads) - 1} more)" if len(unit.payloads) > 1 else "")
            if unit.rejection:
                if self.named_rejection(unit, self.expected_field(unit)):
                    rejected += len(unit.payloads)
                    tally.setdefault(unit.field, [0, 0])[0] += len(unit.payloads)
                else:
                    problems.append(f"{what}: rejected without naming {short(self.expected_field(unit), 40)}"
                                    f": {unit.rejection[0]} {short(unit.rejection[1], 300)}")
                continue
            if unit.job_id not in jobs:
                problems.append(f"{what}: job {unit.job_id} accepted but not listed")
                continue
            found = checks[unit].result()
            if found:
                problems += [f"{what}: job {unit.job_id}: {p}" for p in found]
            else:
                literal += len(unit.payloads)
                tally.setdefault(unit.field, [0, 0])[1] += len(unit.payloads)

        # A rejected submission stored nothing: each user's jobs are exactly the accepted ones.
        for user in users:
            want = sorted(u.job_id for u in accepted if u.user == user)
            got = sorted(j["id"] for j in jobs.values() if j.get("user") == user)
            if want != got:
                problems.append(f"user {user}: {len(got)} jobs stored, {len(want)} accepted")

        side_effects = self.side_effects(dirs_made)
        problems += side_effects
        problems += self.cluster_health()

        fields = sorted({u.field for u in done})
        cases = len(payloads) * len(fields)
        print(f"\ninjection: {len(payloads)} payloads x {len(fields)} fields = {cases} submissions; "
              f"{rejected} rejected with a named field, {literal} ran literally, "
              f"{len(side_effects)} side effects", file=sys.stderr)
        print("injection: per field (rejected/literal): " + ", ".join(
            f"{f} {r}/{l}" for f, (r, l) in sorted(tally.items())), file=sys.stderr)
        print(f"injection: {len(done)} API calls ({sum(1 for u in done if u.via == 'grpc')} by gRPC), "
              f"{len(accepted)} jobs; submitted in {t_submitted - t0:.1f}s, all ended after "
              f"{t_ended - t0:.1f}s, checked after {time.monotonic() - t0:.1f}s", file=sys.stderr)
        if problems:
            self.fail(f"{len(problems)} problems:\n" + "\n".join(problems[:60]))
        self.assertEqual(rejected + literal, cases)

    def side_effects(self, dirs_made):
        found = [f"marker {name} exists in the sentinel directory"
                 for name in sorted(os.listdir(self.sentinel))]
        for root, before in self.roots_before.items():
            for name in sorted(set(os.listdir(root)) - before):
                if "pwned" in name or root != "/tmp":
                    found.append(f"new entry {os.path.join(root, name)!r}")
        for root in (self.c.tmp, self.work):
            for path in walk_entries(root):
                if os.path.dirname(path) == self.dirs and os.path.basename(path) in dirs_made:
                    continue  # made by this test, named by a payload
                if "pwned" in os.path.basename(path):
                    found.append(f"stray {path!r}")
        # The cluster's directory holds what the harness made, and the agents'
        # directories only (empty) directories: no rank wrote a file.
        for name in os.listdir(self.c.tmp):
            known = (name in ("port", "scheduler.log", "scratch") or name.startswith("xl.db")
                     or any(name in (f"{a}.log", f"{a}.yaml", f"work-{a}") for a in AGENTS))
            if not known:
                found.append(f"unexpected {os.path.join(self.c.tmp, name)!r}")
        # The agents' own state (root's, agent/shim/rank_shim.h) holds only the
        # files the agent and its shims write there.
        state_files = {"instance", "lease", "agent.lock", "lock", "record", "status",
                       "stdout", "stderr", "metrics", "acked", "chunks.stdout",
                       "chunks.stderr", "spec"}
        for name in [f"work-{a}" for a in AGENTS] + ["scratch"]:
            for path in walk_entries(os.path.join(self.c.tmp, name)):
                rel = os.path.relpath(path, os.path.join(self.c.tmp, name))
                if rel.split(os.sep)[0] == "state" and not os.path.islink(path):
                    base = os.path.basename(path)
                    if os.path.isdir(path) or base in state_files or (
                            base.endswith(".tmp") and base[:-4] in state_files):
                        continue
                if not os.path.isdir(path) or os.path.islink(path):
                    found.append(f"file {path!r} in the agents' directories")
        if set(os.listdir(self.dirs)) != dirs_made:
            found.append(f"entries appeared in {self.dirs}: "
                         f"{sorted(set(os.listdir(self.dirs)) - dirs_made)[:5]}")
        for path in walk_entries(self.dirs):
            if os.path.dirname(path) != self.dirs:
                found.append(f"{path!r} appeared inside a payload-named working directory")
        if os.listdir(self.cwd):
            found.append(f"files appeared in xlctl's cwd {self.cwd}: {os.listdir(self.cwd)[:5]}")
        return found

    def cluster_health(self):
        problems = [f"{key} exited with {p.returncode}" for key, p in self.c.procs.items()
                    if p.poll() is not None]
        r = self.xlctl("nodes", "-o", "json")
        nodes = {n.get("name"): n.get("state") for n in json.loads(r.stdout or b"{}").get("nodes", [])}
        if nodes != {a: "READY" for a in AGENTS}:
            problems.append(f"xlctl nodes: {nodes} (exit {r.returncode})")
        return problems

    # --- what reaches another user's terminal ----------------------------------
    def test_list_and_get_never_print_control_characters_from_a_job(self):
        b64 = base64.b64encode(f"touch {self.sentinel}/pwned-osc52\n".encode()).decode()
        evil = f"<\x1b[2J\x1b]52;c;{b64}\x07\x1b[31m\x08\r\x7f\u009b6n\x1b[0m>"
        specs = {
            "name": {"name": "N4ME" + evil + "\x00", "command": [TRUE]},
            "name (newline: a fake row)": {"name": "N4ME\n999  fake-job  root", "command": [TRUE]},
            "env value": {"command": [TRUE], "env": {"HOSTILE": "ENVV" + evil}},
            "command argument": {"command": [TRUE, "ARGV" + evil]},
            "command[0] (in the reason)": {"command": ["ARG0" + evil]},
            "working_dir (in the reason)": {"command": [TRUE], "working_dir": "/nonexistent/WDIR" + evil},
        }
        ids = {}
        for field, spec in specs.items():
            unit = self.submit(Unit(field, spec, [], "mallory", "xlctl"))
            if field.startswith("name") and unit.job_id is None:
                # A name is a label: refusing control characters in it, with
                # the field named, is as good as printing them escaped.
                self.assertIn("rejected the request: name", unit.rejection[1], field)
                self.assertNotIn("\x1b", unit.rejection[1], field)
                continue
            self.assertIsNotNone(unit.job_id, f"{field}: {unit.rejection}")
            ids[field] = unit.job_id
        for job_id in ids.values():
            self.c.wait_state(job_id, *TERMINAL)
        findings = []
        for viewer in ("victim", "mallory"):
            views = [("list", self.xlctl("list", user=viewer))]
            views += [(f"get {i}", self.xlctl("get", i, user=viewer)) for i in ids.values()]
            for command, r in views:
                if r.returncode != 0:
                    findings.append(f"`xlctl {command}` as {viewer} exited {r.returncode}")
                    continue
                for line in r.stdout.split(b"\n"):
                    bad = control_chars(line)
                    if line.startswith(b"999  fake-job"):
                        bad.append((0, "a fake row from a newline in a name"))
                    if not bad:
                        continue
                    label = line.split(b":")[0].strip().decode("utf-8", "replace") \
                        if command.startswith("get") else "table row"
                    tags = [t for t in ("N4ME", "ENVV", "ARGV", "ARG0", "WDIR") if t.encode() in line]
                    kinds = sorted({k for _, k in bad})
                    findings.append(f"`xlctl {command}` (table) as {viewer}: line {label!r} "
                                    f"[{'/'.join(tags) or 'no tag'}] has raw {', '.join(kinds)}: "
                                    f"{short(line.decode('utf-8', 'replace'), 160)}")
        self.assertEqual(os.listdir(self.sentinel), [])
        if findings:
            self.fail("control characters reach the terminal:\n" + "\n".join(findings))

    # --- long values in an error ----------------------------------------------
    def test_a_rejected_long_value_is_named_in_a_readable_error(self):
        """The INVALID_ARGUMENT for a long bad value still names the field: the
        message must fit gRPC's 8 KiB metadata limit (a status message travels
        in a header, percent-encoded: a non-ASCII byte takes 3)."""
        cases = [
            ("working_dir", "grpc", {"command": [TRUE], "working_dir": "A" * 65536}),
            ("working_dir", "xlctl", {"command": [TRUE], "working_dir": "A" * 65536}),
            ("working_dir", "xlctl", {"command": [TRUE], "working_dir": "\u00e9" * 3000}),
            ("working_dir", "xlctl", {"command": [TRUE], "working_dir": "\x1b[2J" * 1400}),
            ("env.-", "grpc", {"command": [TRUE], "env": {"-" + "A" * 65536: "v"}}),
            ("env.-", "grpc", {"command": [TRUE], "env": {"-" + "A" * 8192: "v"}}),
            ("env.-", "grpc", {"command": [TRUE], "env": {"-" + "\u00e9" * 1400: "v"}}),
        ]
        found = []
        for field, via, spec in cases:
            unit = self.submit(Unit(field, spec, [], "inj-long", via))
            what = f"{field} via {via}, {len(json.dumps(spec, ensure_ascii=False).encode())} bytes"
            if unit.job_id:
                found.append(f"{what}: accepted as job {unit.job_id}")
            else:
                code, message = unit.rejection
                ok = (code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith(field)) if \
                    via == "grpc" else (code == 2 and f"rejected the request: {field}" in message)
                if not ok:
                    found.append(f"{what}: {code} {short(message, 120)}")
        self.assertEqual(self.list_jobs("inj-long"), [])
        if found:
            self.fail("rejections that do not name the field:\n" + "\n".join(found))

    # --- JSON job files --------------------------------------------------------
    def submit_json_text(self, text, user):
        path = os.path.join(self.jobfiles, f"raw-{next(self.counter)}.json")
        with open(path, "w") as f:
            f.write(text)
        r = self.xlctl("submit", path, user=user)
        if r.returncode != 0:
            return None, r.stderr.decode("utf-8", "replace").strip()
        job = json.loads(self.xlctl("get", r.stdout.strip().decode(), "-o", "json", user=user).stdout)
        return job, None

    def test_json_job_file_is_read_as_json(self):
        """Any valid JSON job file is read as the JSON it is (xlctl reads job
        files as YAML, which takes most JSON, but not all of it)."""
        found = []
        # json.dumps' default writes U+1F600 as the surrogate pair \ud83d\ude00.
        name = "smile \U0001F600"
        job, error = self.submit_json_text(json.dumps({"name": name, "command": [TRUE]}), "inj-json")
        if error or job["spec"].get("name") != name:
            found.append(f"name {name!r} as {json.dumps(name)}: {error or job['spec'].get('name')!r}")
        # A valid variable name of 1024 characters: YAML caps implicit keys at 1024.
        key = "B" * 1024
        job, error = self.submit_json_text(json.dumps({"command": [TRUE], "env": {key: "v"}}), "inj-json")
        if error or key not in job["spec"].get("env", {}):
            found.append(f"env key of {len(key)} characters: {error or job['spec'].get('env')!r}")
        if found:
            self.fail("valid JSON job files xlctl did not read:\n" + "\n".join(found))


if __name__ == "__main__":
    unittest.main()
