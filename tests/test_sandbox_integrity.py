"""Reward integrity: a program must not be able to write its own result, reach the process that
reports it, leave state for the next program, or use more than its limits by splitting itself.

Each case is an attack a policy under RL pressure could find; each one forged results, kept
state or broke a limit before the sandbox ran its interpreter as PID 1 under a seccomp filter
with limits counted over the whole program."""

from __future__ import annotations

import uuid

import pytest

from pipeline.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.usefixtures("sandbox_available")
FAST = SandboxConfig(wall_seconds=4, cpu_seconds=2, memory_mb=512, file_mb=4, max_output_mb=2)
FORGED = "FORGED-" + uuid.uuid4().hex

# what a program attached to the process that reports its result would do: read the control
# state, write a result frame of its own. Every step must be refused.
TAKEOVER = {
    "ptrace_pid1": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('attach', libc.ptrace(16, 1, None, None), ctypes.get_errno())  # PTRACE_ATTACH
print('seize', libc.ptrace(0x4206, 1, None, None), ctypes.get_errno())  # PTRACE_SEIZE
""",
    "ptrace_from_a_child": """
import ctypes, os
pid = os.fork()
if pid == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.ptrace(16, 1, None, None)
    os._exit(0 if rc == 0 else 1)
print('child attach', os.waitpid(pid, 0)[1] >> 8)
""",
    "proc_mem": """
for path in ('/proc/1/mem', '/proc/1/environ', '/proc/1/fd/1', '/proc/1/fd/3', '/proc/1/fd/4'):
    try:
        open(path, 'r+b' if path.endswith('mem') else 'rb').close()
        print('opened', path)
    except OSError as e:
        print('refused', path, e.errno)
""",
    "pidfd_getfd": """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)
for fd in range(0, 8):
    got = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
    print('fd', fd, got, ctypes.get_errno())
    if got >= 0:
        import json, struct
        data = json.dumps({'id': 'x', 'exit_code': 0, 'reason': None, 'stdout': 'FORGED_TEXT',
                           'stderr': '', 'truncated': False, 'seconds': 0}).encode()
        os.write(got, struct.pack('>I', len(data)) + data)
""".replace("FORGED_TEXT", FORGED),
    "process_vm": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(16)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 16)
remote = iovec(0x400000, 16)
print('readv', libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
      ctypes.get_errno())
""",
    "signal_pid1": """
import os, signal
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGKILL,
          signal.SIGSTOP):
    try:
        os.kill(1, s)
    except OSError as e:
        print('refused', s, e.errno)
print('sent')
""",
}


def _honest(box: Sandbox, n: int) -> list[str]:
    return [box.run(f"print({i} * 7)").stdout for i in range(n)]


@pytest.mark.parametrize("name", sorted(TAKEOVER))
def test_a_program_cannot_reach_the_process_that_reports_its_result(name):
    with Sandbox(FAST, workers=1) as box:
        r = box.run(TAKEOVER[name])
        after = _honest(box, 4)
        ids = box.run(
            "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
        )
    assert FORGED not in r.stdout
    assert after == [f"{i * 7}\n" for i in range(4)]  # the next honest programs are their own
    assert "opened" not in r.stdout, r.stdout
    for line in r.stdout.splitlines():
        if line.startswith(("attach", "seize", "readv")):
            assert line.split()[1] == "-1", line
        if line.startswith("child attach"):
            assert line.split()[2] == "1", line
        if line.startswith("fd "):
            assert line.split()[2] == "-1", line
    pids = [int(x) for x in ids.stdout.strip("[]\n").split(", ")]
    assert pids[0] == 1 and len(pids) == 2  # the warm interpreter is PID 1; the program is all else


def test_the_reporting_process_survives_every_signal_a_program_can_send():
    with Sandbox(FAST, workers=1) as box:
        r = box.run(TAKEOVER["signal_pid1"])
        assert r.ok and "sent" in r.stdout, r
        assert box.run("print('next')").stdout == "next\n"
        assert len(box._all) == 1  # the same worker: nothing was lost


def test_dev_is_read_only_and_holds_nothing_for_the_next_call():
    name = f"flow-dev-{uuid.uuid4().hex}"
    write = f"""
import os
for path in ('/dev/{name}', '/dev/pts/{name}', '/dev/mqueue/{name}'):
    try:
        open(path, 'wb').write(b'x' * (1 << 20)); print('wrote', path)
    except OSError as e:
        print('refused', path, e.errno)
try:
    os.mkdir('/dev/{name}.d'); print('wrote dir')
except OSError as e:
    print('refused dir', e.errno)
"""
    look = f"import os; print([p for p in os.listdir('/dev') if p.startswith({name[:9]!r})])"
    with Sandbox(FAST, workers=1) as box:
        w = box.run(write)
        after = box.run(look)
    assert "wrote" not in w.stdout, w.stdout
    assert after.ok and after.stdout == "[]\n", after


def test_keyrings_are_refused_so_nothing_persists_through_them():
    add = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
# add_key("user", "flow", "secret", 6, KEY_SPEC_USER_KEYRING = -4)
rc = libc.syscall(248 if ctypes.sizeof(ctypes.c_void_p) == 8 else 286, b'user', b'flow',
                  b'secret', 6, -4)
print('add_key', rc, ctypes.get_errno())
"""
    import platform

    if platform.machine() == "aarch64":
        add = add.replace("248 if", "217 if")
    search = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
nr = 250 if __import__('platform').machine() == 'x86_64' else 219
# keyctl(KEYCTL_SEARCH = 10, KEY_SPEC_USER_KEYRING, "user", "flow", 0)
print('search', libc.syscall(nr, 10, -4, b'user', b'flow', 0), ctypes.get_errno())
"""
    with Sandbox(FAST, workers=1) as box:
        a = box.run(add)
        s = box.run(search)
    assert a.ok and a.stdout.split()[1] == "-1", a
    assert s.ok and s.stdout.split()[1] == "-1", s


def test_memory_is_limited_over_the_whole_program_not_per_process():
    # two processes of 300 MB each, under a 512 MB limit for the program
    code = """
import os, time
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        x = bytearray(300 << 20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
print('both finished')
"""
    with Sandbox(FAST, workers=1) as box:
        r = box.run(code)
        assert not r.ok and r.reason == "memory_limit", r
        assert "both finished" not in r.stdout
        assert box.run("print('next')").stdout == "next\n"


def test_memory_outside_the_address_space_is_refused():
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
try:
    fd = os.memfd_create('x'); print('memfd', fd)
except OSError as e:
    print('memfd refused', e.errno)
print('shmget', libc.shmget(0, 64 << 20, 0o1600), ctypes.get_errno())
"""
    with Sandbox(FAST, workers=1) as box:
        r = box.run(code)
    assert r.ok and "memfd refused" in r.stdout, r
    assert r.stdout.splitlines()[-1].split()[1] == "-1", r.stdout


def test_cpu_time_is_limited_over_the_whole_program_not_per_process():
    # three processes of 1.5 CPU-seconds each: every one is under the 2 s limit, the program
    # is not. Measured in CPU time, so a busy machine changes nothing.
    code = """
import os, time
for _ in range(2):
    if os.fork() == 0:
        break
while time.process_time() < 1.5:
    pass
print('spun', os.getpid(), flush=True)
"""
    config = SandboxConfig(wall_seconds=20, cpu_seconds=2, memory_mb=512)
    with Sandbox(config, workers=1) as box:
        r = box.run(code)
        assert box.run("print('next')").stdout == "next\n"
    assert not r.ok and r.reason == "cpu_limit", r
    assert r.stdout.count("spun") < 2, r.stdout
