"""Hostile model-written programs: every one contained, reported as a tool error, nothing left
running, nothing written outside, no secret read, the parent unharmed."""

from __future__ import annotations

import os
import uuid

import pytest

from pipeline.rollout.sandbox import _UID_BASE, SandboxConfig, live_pids, run_python

FAST = SandboxConfig(wall_seconds=3, cpu_seconds=2, memory_mb=512, file_mb=4)
MARK = f"/tmp/flow-sandbox-escape-{uuid.uuid4().hex}"
SECRET = f"s3cr3t-{uuid.uuid4().hex}"

HOSTILE = {
    "infinite_loop": ("while True: pass", "cpu_limit"),
    "sleep_forever": ("import time; time.sleep(3600)", "timeout"),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", None),
    "memory_bomb": ("x = bytearray(8 * 1024**3)", "memory_limit"),
    "memory_growth": ("x = []\nwhile True:\n    x.append('y' * 10**6)", "memory_limit"),
    "stdout_flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", None),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('x' * 65536)", None),
    "huge_file": ("f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'0' * 2**20)", None),
    "write_tmp": (f"open({MARK!r}, 'w').write('escaped')", None),
    "write_etc": ("open('/etc/flow-sandbox-test', 'w').write('x')", None),
    "socket_connect": ("import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)", None),
    "socket_server": (
        "import socket; s = socket.socket(); s.bind(('0.0.0.0', 8765)); s.listen()",
        None,
    ),
    "dns": ("import socket; print(socket.getaddrinfo('example.com', 80))", None),
    "http": (
        "import urllib.request; urllib.request.urlopen('http://example.com', timeout=1)",
        None,
    ),
    "read_root_home": ("print(open('/root/.bashrc').read())", None),
    "read_parent_environ": ("import os; print(open(f'/proc/{os.getppid()}/environ').read())", None),
    "kill_parent": ("import os, signal; os.kill(os.getppid(), signal.SIGKILL)", None),
    "killpg_parent": (
        "import os, signal; os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
        None,
    ),
    "exit_nonzero": ("import os; os._exit(3)", "error"),
    "segfault_self": ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal_SIGSEGV"),
    "ctypes": ("import ctypes; ctypes.string_at(0)", None),
    "subprocess": ("import subprocess; subprocess.run(['sh', '-c', 'echo pwned'])", None),
    "os_system": ("import os; os.system('echo pwned')", None),
    "os_exec": ("import os; os.execv('/bin/sh', ['sh', '-c', 'echo pwned'])", None),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", None),
    "c_stack_overflow": (
        "import sys; sys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1)\nf(0)",
        None,
    ),
    "many_files": ("fs = [open(f'f{i}', 'w') for i in range(10000)]", None),
    "daemon_child": (
        "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(3600)\nprint('parent done')",
        None,
    ),
    "remove_outside": ("import os; os.remove('/etc/hostname')", None),
    "ignore_signals": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass",
        None,
    ),
    "setuid_root": ("import os; os.setuid(0); print('pwned')", None),
    "symlink_escape": (
        "import os; os.symlink('/etc/hostname', 'h'); open('h', 'w').write('pwned')",
        None,
    ),
}


@pytest.fixture(scope="module", autouse=True)
def secret_in_parent_env():
    os.environ["FLOW_TEST_SECRET"] = SECRET
    yield
    os.environ.pop("FLOW_TEST_SECRET", None)


def leftover_processes() -> list[int]:
    """Live processes under any sandbox uid (zombies awaiting init are not running)."""
    return live_pids(_UID_BASE, _UID_BASE + 1000) if os.geteuid() == 0 else []


def test_a_normal_program_runs():
    r = run_python("import math\nprint(math.comb(10, 3))", FAST)
    assert r.ok and r.stdout == "120\n" and r.as_tool_output() == "120\n"


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name):
    code, reason = HOSTILE[name]
    r = run_python(code, FAST)
    out = r.as_tool_output()
    assert r.seconds < FAST.wall_seconds + 2
    if name == "daemon_child":
        assert "parent done" in r.stdout  # the program itself may finish ...
    elif name in ("stdout_flood",):
        assert not r.ok and len(r.stdout) <= FAST.max_output_chars and r.truncated
    else:
        assert not r.ok, (name, r)
        assert "[error:" in out
    if reason:
        assert r.reason == reason, (name, r.reason, r.stderr[-300:])
    assert "pwned" not in r.stdout and SECRET not in out
    assert not os.path.exists(MARK) and not os.path.exists("/etc/flow-sandbox-test")
    assert os.path.exists("/etc/hostname")
    assert leftover_processes() == []  # ... but nothing it started survives the call


def test_environment_holds_no_secrets():
    r = run_python("import os; print(dict(os.environ))", FAST)
    assert r.ok and SECRET not in r.stdout and "FLOW_TEST_SECRET" not in r.stdout


def test_network_is_unreachable_even_without_the_hook():
    # a fresh network namespace has no interfaces up: even the loopback is down
    r = run_python("print(open('/proc/net/dev').read())", FAST)
    if os.geteuid() == 0:
        assert r.ok and "eth" not in r.stdout


def test_output_is_truncated_for_the_agent():
    r = run_python("print('y' * 100000)", FAST)
    assert r.ok and r.truncated and len(r.stdout) == FAST.max_output_chars


def test_prestarted_pool_runs_one_program_per_interpreter():
    from pipeline.rollout.sandbox import SandboxPool

    with SandboxPool(2, FAST) as pool:
        pids = {pool.run("import os; print(os.getpid())").stdout for _ in range(4)}
        assert len(pids) == 4  # never the same interpreter twice
        r = pool.run(HOSTILE["fork_bomb"][0])
        assert not r.ok
        assert pool.run("print('still fine')").stdout == "still fine\n"
    assert leftover_processes() == []  # the warm interpreters are gone with the pool
