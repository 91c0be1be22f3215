"""The seccomp filter every sandboxed program runs under: the system calls that reach another
process's memory or file descriptors, keep state outside the program's processes, hold memory
outside its address space, or change the sandbox itself answer EPERM.

Namespaces already hide the host; this filter closes what is left *inside* them. Without it a
program can attach to the warm interpreter that reports its result (ptrace, process_vm_*,
pidfd_getfd) and write its own reward, leave a key in a keyring for the next program
(add_key/keyctl), or hold memory that no address-space limit sees (memfd_create, SysV shmget).
The filter is a classic BPF program built here and installed by the forked child
(``prctl(PR_SET_SECCOMP)``) just before the program's code runs; the warm interpreter itself
is not filtered.
"""

from __future__ import annotations

import platform
import struct

# audit architecture of the calling ABI (seccomp_data.arch), per machine
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers

DENIED = (
    # another process's memory, descriptors or identity
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
    # state that outlives the program's processes
    "add_key",
    "request_key",
    "keyctl",
    # memory outside RLIMIT_AS and the program's own pages
    "memfd_create",
    "memfd_secret",
    "shmget",
    "userfaultfd",
    # kernel interfaces a program never needs
    "perf_event_open",
    "bpf",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "mount",
    "umount2",
    "unshare",
    "setns",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "name_to_handle_at",
    "open_by_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
)

SYSCALLS = {
    "x86_64": {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_getfd": 438,
        "kcmp": 312,
        "process_madvise": 440,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "memfd_create": 319,
        "memfd_secret": 447,
        "shmget": 29,
        "userfaultfd": 323,
        "perf_event_open": 298,
        "bpf": 321,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "mount": 165,
        "umount2": 166,
        "unshare": 272,
        "setns": 308,
        "pivot_root": 155,
        "chroot": 161,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "acct": 163,
        "quotactl": 179,
    },  # fmt: skip
    "aarch64": {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_getfd": 438,
        "kcmp": 272,
        "process_madvise": 440,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "memfd_create": 279,
        "memfd_secret": 447,
        "shmget": 194,
        "userfaultfd": 282,
        "perf_event_open": 241,
        "bpf": 280,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "mount": 40,
        "umount2": 39,
        "unshare": 97,
        "setns": 268,
        "pivot_root": 41,
        "chroot": 51,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "acct": 89,
        "quotactl": 60,
    },  # fmt: skip
}

# classic BPF opcodes (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in SYSCALLS


def program(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter[]`` bytes for ``machine`` (this one by default).

    A call from another ABI (i386 on x86_64) kills the program: its numbers mean other calls."""
    machine = machine or platform.machine()
    if machine not in SYSCALLS:
        raise ValueError(f"no seccomp syscall table for {machine!r}")
    numbers = SYSCALLS[machine]
    insns = [
        _insn(_LD_W_ABS, 4),  # seccomp_data.arch
        _insn(_JEQ_K, AUDIT_ARCH[machine], jt=1),
        _insn(_RET_K, RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        insns += [_insn(_JGE_K, X32_SYSCALL_BIT, jf=1), _insn(_RET_K, RET_EPERM)]
    for name in DENIED:
        insns += [_insn(_JEQ_K, numbers[name], jf=1), _insn(_RET_K, RET_EPERM)]
    insns.append(_insn(_RET_K, RET_ALLOW))
    return b"".join(insns)
