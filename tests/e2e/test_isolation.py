"""Isolation on the node, end to end: the real xl-scheduler on 127.0.0.1
(no TLS; callers name themselves with XL_USER) and a real xl-agent in its
default --run-as submitter mode. A rank runs as the user who submitted the
job; a submitter without an account on the node and root are refused with
the fix; over its memory limit a job fails saying so. Needs root (it adds
the user xltest-a and removes it at the end); skips otherwise."""

import os
import pwd
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster  # noqa: E402

USER = "xltest-a"


def remove_user():
    subprocess.run(["/usr/sbin/userdel", USER], capture_output=True)


class Isolation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("isolation end to end needs root: it adds the user "
                                    f"{USER} and the agent switches to it; run as root, as CI does")
        remove_user()  # left by a run that crashed
        subprocess.run(["/usr/sbin/useradd", "-M", "-s", "/usr/sbin/nologin", USER], check=True)
        cls.addClassCleanup(remove_user)

    def setUp(self):
        self.c = Cluster(agents=0)
        self.addCleanup(self.c.close)
        # The rank, as xltest-a, passes through to its own directories.
        os.chmod(self.c.tmp, 0o755)
        self.c.start_agent("node-a", gpus=0, run_as="submitter", allow_root_jobs=False)
        self.c.wait_nodes(1)

    def submit(self, user, command, extra=""):
        path = os.path.join(self.c.tmp, f"job-{user}.yaml")
        with open(path, "w") as f:
            f.write(textwrap.dedent(f"""\
                name: iso
                command: {command}
                resources: {{nodes: 1, ranks_per_node: 1, gpus_per_node: 0{extra}}}
                max_retries: 0
                """))
        return self.c.xlctl("submit", path, user=user).stdout.strip()

    def finished(self, job_id):
        return self.c.wait_state(job_id, "SUCCEEDED", "FAILED", "CANCELLED", timeout=60)

    def test_the_rank_runs_as_the_submitter(self):
        job_id = self.submit(USER, '["/usr/bin/id"]')
        job = self.finished(job_id)
        logs = self.c.xlctl("logs", job_id).stdout
        self.assertEqual(job["state"], "SUCCEEDED", f"{job}\n{logs}")
        self.assertEqual(job["user"], USER)
        pw = pwd.getpwnam(USER)
        self.assertIn(f"uid={pw.pw_uid}({USER}) gid={pw.pw_gid}({USER})", logs)

    def test_a_submitter_without_an_account_on_the_node_fails_with_the_fix(self):
        job = self.finished(self.submit("alice-has-no-account", '["/usr/bin/id"]'))
        self.assertEqual(job["state"], "FAILED")
        self.assertIn('user "alice-has-no-account" has no account on this node; '
                      "create the account", job["reason"])

    def test_root_is_refused_without_allow_root_jobs(self):
        job = self.finished(self.submit("root", '["/usr/bin/id"]'))
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("is root (uid 0)", job["reason"])
        self.assertIn("--allow-root-jobs", job["reason"])

    def test_over_its_memory_limit_the_job_fails_saying_so(self):
        if "cgroups: none" in self.c.log_of("node-a"):
            self.skipTest("the agent found no writable cgroup hierarchy")
        job_id = self.submit(USER, '["/usr/bin/python3", "-c", "x = b\'x\' * (512 << 20)"]',
                             extra=", memory_bytes_per_node: 67108864")
        job = self.finished(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("exceeded its memory limit of 67108864 bytes (64 MiB)", job["reason"])
        self.assertGreater(int(job["rank_exits"][0].get("peak_memory_bytes", "0")), 32 << 20, job)


if __name__ == "__main__":
    unittest.main()
