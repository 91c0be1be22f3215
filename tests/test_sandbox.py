"""Hostile model-written programs, probed as an attacker would: every one contained by the
kernel's isolation, reported as a tool error where it fails, nothing of the host readable or
writable, nothing left running, nothing left for the next program, the caller unharmed."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.sandbox import Sandbox, SandboxConfig, run_python
from tests.harness import is_bwrap, not_started_elsewhere, processes

pytestmark = pytest.mark.usefixtures("sandbox_available")
REPO = Path(__file__).resolve().parents[1]
FAST = SandboxConfig(wall_seconds=3, cpu_seconds=2, memory_mb=512, file_mb=4, max_output_mb=2)
# a call that outlives its limits by this much hung (a kept pipe, an unkilled child); far above
# what a loaded machine adds to the kill and teardown, far below "forever"
HUNG = 5 * FAST.wall_seconds
# growth to the memory limit costs page faults, which count as CPU time and wall time: on a
# slow or loaded machine 512 MB took 2.6 s (past FAST's 2 CPU-s and 3 s), so the memory cases
# get a smaller limit and room on the others, and what stops them is the memory limit
MEMORY = replace(FAST, memory_mb=256, cpu_seconds=10, wall_seconds=20)
MARK = f"/tmp/flow-sandbox-escape-{uuid.uuid4().hex}"
SECRET = f"s3cr3t-{uuid.uuid4().hex}"

# name -> (code, expected): a reason, "fails" (any error), or "contained" (the program may
# succeed inside its own namespaces; the host-side checks after it are what must hold)
HOSTILE = {
    "infinite_loop": ("while True: pass", "cpu_limit"),
    "sleep_forever": ("import time; time.sleep(3600)", "timeout"),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", "fails"),
    "memory_bomb": ("x = bytearray(8 * 1024**3)", "memory_limit"),
    "memory_growth": ("x = []\nwhile True:\n    x.append('y' * 10**6)", "memory_limit"),
    "stdout_flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "output_limit"),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('x' * 65536)", "output_limit"),
    "huge_file": ("f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'0' * 2**20)", "fails"),
    "write_tmp": (f"open({MARK!r}, 'w').write('escaped')", "contained"),
    "write_etc": ("open('/etc/flow-sandbox-test', 'w').write('x')", "fails"),
    "socket_connect": (
        "import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)",
        "fails",
    ),
    "socket_server": (
        "import socket; s = socket.socket(); s.bind(('0.0.0.0', 8765)); s.listen()",
        "contained",
    ),
    "dns": ("import socket; print(socket.getaddrinfo('example.com', 80))", "fails"),
    "http": (
        "import urllib.request; urllib.request.urlopen('http://example.com', timeout=1)",
        "fails",
    ),
    "read_root_home": ("print(open('/root/.bashrc').read())", "fails"),
    "read_parent_environ": (
        "import os; print(open(f'/proc/{os.getppid()}/environ').read())",
        "fails",
    ),
    # the parent is the namespace's PID 1: the kernel drops these signals
    "kill_parent": ("import os, signal; os.kill(os.getppid(), signal.SIGKILL)", "contained"),
    "killpg_parent": (
        "import os, signal; os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
        "contained",
    ),
    "kill_everything": ("import os, signal; os.kill(-1, signal.SIGKILL)", "contained"),
    "exit_nonzero": ("import os; os._exit(3)", "error"),
    "segfault_self": ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal_SIGSEGV"),
    "ctypes": ("import ctypes; ctypes.string_at(0)", "fails"),
    "subprocess": ("import subprocess; subprocess.run(['sh', '-c', 'echo pwned'])", "fails"),
    "os_system": ("import os; os.system('echo pwned')", "contained"),
    "os_exec": ("import os; os.execv('/bin/sh', ['sh', '-c', 'echo pwned'])", "fails"),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", "fails"),
    "c_stack_overflow": (
        "import sys; sys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1)\nf(0)",
        "fails",
    ),
    "many_files": ("fs = [open(f'f{i}', 'w') for i in range(10000)]", "fails"),
    "daemon_child": (
        "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(3600)\nprint('parent done')",
        "contained",
    ),
    "remove_outside": ("import os; os.remove('/etc/hostname')", "fails"),
    "ignore_signals": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass",
        "fails",
    ),
    "setuid_root": ("import os; os.setuid(0); print('pwned')", "fails"),
    "symlink_escape": (
        "import os; os.symlink('/etc/hostname', 'h'); open('h', 'w').write('pwned')",
        "fails",
    ),
    "fill_tmp": ("open('/tmp/fill', 'wb').write(b'0' * (200 << 20))", "fails"),
    "fill_shm": ("open('/dev/shm/fill', 'wb').write(b'0' * (60 << 20))", "fails"),
    "write_root": ("open('/evil', 'w').write('x')", "fails"),
}


@pytest.fixture(scope="module", autouse=True)
def secret_in_parent_env():
    os.environ["FLOW_TEST_SECRET"] = SECRET
    yield
    os.environ.pop("FLOW_TEST_SECRET", None)


def sandbox_processes() -> list[str]:
    """Host processes of this test's sandboxes: bubblewrap and everything under its host uid,
    less other programs' and other xdist workers' (tests.harness.not_started_elsewhere)."""
    uid = SandboxConfig().host_uid if os.geteuid() == 0 else None
    procs = processes()

    def inside(p: dict) -> bool:
        return is_bwrap(p) or p["uid"] == uid

    found = [p for p in procs if inside(p)]
    return [
        f"{p['pid']} {' '.join(p['argv'])}" for p in not_started_elsewhere(found, procs, inside)
    ]


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    deadline = time.monotonic() + 2
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []


def test_a_normal_program_runs():
    r = run_python("import math\nprint(math.comb(10, 3))", FAST)
    assert r.ok and r.stdout == "120\n" and r.as_tool_output() == "120\n"


def test_errors_read_as_python_prints_them():
    r = run_python("x = 1\nraise ValueError('boom')", FAST)
    assert not r.ok and r.reason == "error" and r.exit_code == 1
    assert 'File "/tmp/work/main.py", line 2' in r.stderr and "ValueError: boom" in r.stderr
    assert "_child" not in r.stderr  # the warm interpreter's own frames are not shown
    assert run_python("import sys; sys.exit(7)", FAST).exit_code == 7


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name):
    code, expected = HOSTILE[name]
    limits = MEMORY if expected == "memory_limit" else FAST
    r = run_python(code, limits)
    out = r.as_tool_output()
    assert r.seconds < 5 * limits.wall_seconds  # ended by its limits, not hung
    if name == "daemon_child":
        assert "parent done" in r.stdout  # the program itself may finish ...
    if name.endswith("_flood"):
        assert len(r.stdout) <= FAST.max_output_chars and r.truncated
    if expected not in ("contained",):
        assert not r.ok, (name, r)
        assert "[error:" in out
    if expected not in ("contained", "fails"):
        assert r.reason == expected, (name, r.reason, r.stderr[-300:])
    assert "pwned" not in r.stdout and SECRET not in out
    assert not os.path.exists(MARK) and not os.path.exists("/etc/flow-sandbox-test")
    assert os.path.exists("/etc/hostname") and not os.path.exists("/evil")
    # ... and nothing it started survives the call (the autouse fixture checks the host)


def test_environment_holds_no_secrets():
    r = run_python("import os; print(dict(os.environ))", FAST)
    assert r.ok and SECRET not in r.stdout and "FLOW_TEST_SECRET" not in r.stdout


def test_network_namespace_has_only_its_own_loopback():
    r = run_python("print(open('/proc/net/dev').read())", FAST)
    assert r.ok and "lo:" in r.stdout and "eth" not in r.stdout


def test_output_is_truncated_for_the_agent():
    r = run_python("print('y' * 100000)", FAST)
    assert r.ok and r.truncated and len(r.stdout) == FAST.max_output_chars


# --- the escapes found against the audit-hook sandbox, each a program it let through ---------


def test_the_lake_the_home_and_the_project_do_not_exist_inside(tmp_path):
    lake = tmp_path / "lake" / "tables" / "attempts"
    lake.mkdir(parents=True)
    (lake / "part-0.jsonl").write_text(f'{{"ground_truth": "{SECRET}"}}\n')
    targets = [str(lake / "part-0.jsonl"), str(REPO / "README.md"), os.path.expanduser("~")]
    targets += [str(REPO.parent / "shared" / "data"), str(tmp_path), os.getcwd()]
    code = f"""
import os
for p in {targets!r}:
    print(p, os.path.exists(p))
print(sorted(os.listdir('/')), sorted(os.listdir('/etc')))
found = []
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/usr/lib', '/opt/site')]
    for f in files:
        path = os.path.join(root, f)
        try:
            if path == __file__:  # this program's own source holds the secret as a literal
                continue
            if os.path.isfile(path) and {SECRET!r}.encode() in open(path, 'rb').read(1 << 20):
                found.append(os.path.join(root, f))
        except OSError:
            pass
print('found', found)
"""
    r = run_python(code, FAST)
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert all(line.endswith(" False") for line in lines[: len(targets)]), lines
    tops = eval(lines[len(targets)].split("] [")[0] + "]")  # noqa: S307 - our own printed list
    assert set(tops) <= {"usr", "lib", "lib64", "lib32", "etc", "tmp", "dev", "proc", "opt"}
    assert "ld.so.cache" in lines[len(targets)] and "passwd" not in lines[len(targets)]
    assert lines[-1] == "found []"


def test_a_root_only_file_cannot_be_read_back_as_output(tmp_path):
    secret = tmp_path / "root-only"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    code = f"""
import os
for name in ('.stdout', '.stderr', '/tmp/work/.stdout'):
    try:
        os.unlink(name)
    except OSError:
        pass
    os.symlink({str(secret)!r}, name)
try:
    fd = os.open({str(secret)!r}, os.O_RDONLY)
    os.dup2(fd, 1)
except OSError as e:
    print('blocked', type(e).__name__)
"""
    r = run_python(code, FAST)
    assert SECRET not in r.stdout + r.stderr
    assert "blocked FileNotFoundError" in r.stdout


def test_code_outside_any_hook_runs_only_inside(tmp_path):
    """ctypes -> libc.system from code compiled under another name, _posixsubprocess.fork_exec
    (under subprocess): whatever they run, they run inside the namespaces."""
    host_mark = tmp_path / "pwned-by-shell"
    code = f"""
import ctypes, subprocess, sys
src = "import ctypes; print('system', ctypes.CDLL(None).system(b'touch {host_mark}; echo pwned'))"
exec(compile(src, 'innocent.py', 'exec'))
r = subprocess.run([sys.executable, '-c',
    "import os; open({str(host_mark)!r}, 'w').write('x')"], capture_output=True, text=True)
print('child rc', r.returncode, 'FileNotFoundError' in r.stderr)
r = subprocess.run([sys.executable, '-c', "import os; print(sorted(os.listdir('/')))"],
                   capture_output=True, text=True)
print('child sees', r.stdout.strip())
"""
    r = run_python(code, FAST)
    assert r.ok, r.stderr
    assert "system 32512" in r.stdout  # exit 127: there is no shell in the sandbox
    assert "child rc 1 True" in r.stdout and "'root'" not in r.stdout and "'work'" not in r.stdout
    assert "pwned" not in r.stdout and not host_mark.exists()


def test_nothing_written_persists_for_the_host_or_the_next_program():
    name = f"flow-persist-{uuid.uuid4().hex}"
    write = f"""
import ctypes, os, sqlite3, tempfile
os.close(os.open('/tmp/{name}', os.O_CREAT | os.O_WRONLY, 0o600))
fd, path = tempfile.mkstemp(prefix='{name}')
db = sqlite3.connect('/tmp/{name}.db'); db.execute('create table t(x)'); db.commit()
open('/dev/shm/{name}', 'wb').write(b'0' * (1 << 20))
os.mkdir('/tmp/{name}-locked'); open('/tmp/{name}-locked/f', 'w').write('x')
os.chmod('/tmp/{name}-locked', 0)
libc = ctypes.CDLL(None, use_errno=True)
print('shm', libc.shmget(0, 1 << 20, 0o1600) >= 0)  # refused: memory outside its limits
print('sem', libc.semget(0, 1, 0o1600) >= 0)  # IPC_PRIVATE, IPC_CREAT | 0600
print('mq', libc.mq_open(b'/{name}', 0o100 | 0o2, 0o600, None))
"""
    look = """
import os
print(sorted(os.listdir('/tmp')), os.listdir('/tmp/work'), os.listdir('/dev/shm'))
print(len(open('/proc/sysvipc/sem').read().splitlines()) - 1)
"""
    with Sandbox(FAST, workers=1) as box:
        w = box.run(write)
        assert w.ok and "shm False" in w.stdout and "sem True" in w.stdout, w
        assert "mq -1" in w.stdout, w
        after = box.run(look)
    assert after.ok, after.stderr
    assert after.stdout.splitlines() == ["['work'] ['main.py'] []", "0"]  # its own source only
    assert not any(p.startswith(name) for p in os.listdir("/tmp") + os.listdir("/dev/shm"))


def test_host_unix_sockets_are_unreachable(tmp_path):
    path = str(tmp_path / "host.sock")
    abstract = f"\0flow-test-{uuid.uuid4().hex}"
    servers = []
    for addr in (path, abstract):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(addr)
        s.listen()
        s.settimeout(0.2)
        servers.append(s)
    code = f"""
import socket
for addr in ({path!r}, {abstract!r}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr); print('connected')
    except OSError as e:
        print('refused', type(e).__name__)
"""
    try:
        r = run_python(code, FAST)
        assert r.ok and "connected" not in r.stdout and r.stdout.count("refused") == 2, r
        for s in servers:
            with pytest.raises(TimeoutError):
                s.accept()
    finally:
        for s in servers:
            s.close()


def test_other_processes_are_invisible():
    marker = f"flow-visible-{uuid.uuid4().hex}"
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        code = """
import os
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
cmds = [open(f'/proc/{p}/cmdline', 'rb').read() for p in pids]
print(pids, b'\\n'.join(cmds).decode(errors='replace'))
"""
        r = run_python(code, FAST)
        assert r.ok and marker not in r.stdout, r
        pids = eval(r.stdout.split("]")[0] + "]")  # noqa: S307 - our own printed list
        assert len(pids) == 2 and pids[0] == 1  # the warm interpreter (PID 1), the program
    finally:
        host.kill()
        host.wait()


def test_replacing_its_output_with_a_fifo_cannot_hang_the_call():
    code = """
import os
for name in ('.stdout', '.stderr', 'out'):
    os.mkfifo(name)
fd = os.open('out', os.O_RDWR)
os.dup2(fd, 1); os.dup2(fd, 2)
while True:
    pass
"""
    before = {p for p in os.listdir("/tmp") if p.startswith("flow-sandbox")}
    t0 = time.monotonic()
    r = run_python(code, FAST)
    assert not r.ok and r.reason in ("cpu_limit", "timeout")
    assert time.monotonic() - t0 < HUNG
    assert {p for p in os.listdir("/tmp") if p.startswith("flow-sandbox")} == before


def test_a_program_can_neither_kill_nor_stop_its_interpreter():
    with Sandbox(FAST, workers=1) as box:
        (worker,) = box._all
        killed = box.run("import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('sent')")
        assert killed.ok and killed.stdout == "sent\n"
        stopped = box.run("import os, signal; os.kill(os.getppid(), signal.SIGSTOP); print('sent')")
        assert stopped.ok and stopped.stdout == "sent\n"
        assert box.run("print('again')").stdout == "again\n"
        assert box._all == [worker] and worker.alive  # the same interpreter all along


def test_a_worker_lost_anyway_costs_only_its_own_call():
    with Sandbox(FAST, workers=1) as box:
        (worker,) = box._all
        # from outside, as the OOM killer might, while a program runs in it
        threading.Timer(0.5, os.killpg, (worker.proc.pid, 9)).start()
        lost = box.run("import time; time.sleep(2); print('lost')")
        assert not lost.ok and lost.reason == "sandbox_lost", lost
        assert box.run("print('next')").stdout == "next\n"
        (idle,) = box._all
        os.killpg(idle.proc.pid, 9)  # killed between calls: the next call gets a fresh worker
        idle.proc.wait()
        assert box.run("print('after')").stdout == "after\n"
        assert box._all != [idle]


def test_a_tree_too_deep_to_clean_retires_its_worker():
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nprint('deep')"
    with Sandbox(FAST, workers=1) as box:
        r = box.run(deep)
        assert r.ok and r.stdout == "deep\n", r  # the program's own result is reported
        after = box.run("import os; print(os.listdir('/tmp/work'))")
    assert after.ok and after.stdout == "['main.py']\n"  # a fresh worker: nothing left


def test_every_program_starts_from_a_clean_interpreter():
    with Sandbox(FAST, workers=1) as box:
        first = box.run(
            "import math, os, sys; math.leak = 1; os.environ['LEAK'] = '1'; sys.path.append('/x')"
            "\nopen('mine.py', 'w').write('X = 1')\nprint(os.getpid())"
        )
        second = box.run(
            "import math, os, sys; print(hasattr(math, 'leak'), 'LEAK' in os.environ, "
            "'/x' in sys.path, os.path.exists('mine.py'), os.getpid())\n"
            "print(sorted(os.listdir('/proc/self/fd')))"
        )
    assert first.ok and second.ok, (first, second)
    flags, fds = second.stdout.splitlines()
    assert flags.split()[:4] == ["False", "False", "False", "False"]
    assert fds == "['0', '1', '2', '3']"  # stdin, the two pipes, and listdir's own: no control pipe
    assert first.call_id != second.call_id


def _run_in_process(tag: str) -> list[tuple[bool, str]]:
    """Four programs at once from one process: two slow, two quick ones repeated."""
    with Sandbox(FAST, workers=4) as box:
        slow = f"import time; time.sleep(1.0); print('{tag}-slow')"
        quick = f"print('{tag}-quick')"
        with ThreadPoolExecutor(4) as pool:
            futs = [pool.submit(box.run, slow) for _ in range(2)]
            futs += [pool.submit(lambda: [box.run(quick) for _ in range(10)][-1]) for _ in range(2)]
            return [(f.result().ok, f.result().stdout.strip()) for f in futs]


def test_eight_programs_at_once_from_two_processes_never_kill_each_other():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as procs:
        results = procs.map(_run_in_process, ["a", "b"])
    for tag, res in zip("ab", results, strict=True):
        assert res == [(True, f"{tag}-slow")] * 2 + [(True, f"{tag}-quick")] * 2, res


def test_threads_share_a_sandbox_with_back_pressure():
    with Sandbox(FAST, workers=2) as box, ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda i: box.run(f"print({i} * 2)").stdout, range(30)))
    assert outs == [f"{i * 2}\n" for i in range(30)]


def test_a_worker_started_from_a_short_lived_thread_outlives_it():
    """bubblewrap's --die-with-parent follows the starting *thread*: workers must not die when
    the thread that happened to start them ends."""
    boxes = []
    t = threading.Thread(target=lambda: boxes.append(Sandbox(FAST, workers=1)))
    t.start()
    t.join()
    time.sleep(0.2)
    with boxes[0] as box:
        assert box.run("print('alive')").stdout == "alive\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to an unprivileged uid needs root")
def test_as_root_the_sandbox_runs_as_an_unprivileged_host_uid():
    with Sandbox(FAST, workers=1) as box:
        r = box.run("import time; time.sleep(0.5); print('ok')")
        assert r.ok
        owners = {os.stat(f"/proc/{w.proc.pid}").st_uid for w in box._all}
    assert owners == {FAST.host_uid}


def test_a_killed_caller_takes_its_sandboxes_with_it():
    """kill -9 of the process that owns a sandbox leaves nothing running (--die-with-parent)."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from pipeline.sandbox import Sandbox\n"
        "box = Sandbox(workers=2)\n"
        "print('ready', flush=True)\n"
        "box.run('import time; time.sleep(60)')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    assert len([p for p in sandbox_processes() if "bwrap" in p]) >= 2
    proc.kill()
    proc.wait()
    # the autouse fixture then waits up to 2 s for every sandbox process to be gone
