"""Adversarial tests for sdpocl.rewards.sandbox: hostile programs must fail, within the
limits, without touching anything outside their throw-away directory."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time

import pytest

from sdpocl.rewards import sandbox
from sdpocl.rewards.sandbox import SandboxResult, client, run_batch, run_program

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

TIMEOUT = 1.0
IS_ROOT = os.geteuid() == 0
ORIGINAL = "precious data\n"


@pytest.fixture
def victim(tmp_path):
    """A directory with a sentinel file the programs will try to destroy."""
    d = tmp_path / "victim"
    d.mkdir()
    f = d / "sentinel.txt"
    f.write_text(ORIGINAL)
    f.chmod(0o644)
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text(ORIGINAL)
    return d, f


def _intact(d, f):
    assert d.is_dir()
    assert f.read_text() == ORIGINAL
    assert f.stat().st_mode & 0o777 == 0o644
    assert (d / "sub" / "inner.txt").read_text() == ORIGINAL
    assert sorted(p.name for p in d.iterdir()) == ["sentinel.txt", "sub"]


def _file_attacks(d, f) -> list[str]:
    d, f = str(d), str(f)
    return [
        f"open({f!r}, 'w').write('pwned')",
        f"open({f!r}, 'a').write('pwned')",
        f"import os\nfd = os.open({f!r}, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'x')",
        f"import os\nos.remove({f!r})",
        f"import os\nos.unlink({f!r})",
        f"import os\nos.rename({f!r}, {f + '.moved'!r})",
        f"import os\nos.replace({f!r}, {d + '/other'!r})",
        f"import os\nos.truncate({f!r}, 0)",
        f"import os\nos.chmod({f!r}, 0)",
        f"import shutil\nshutil.rmtree({d!r})",
        f"import os\nos.system('rm -rf ' + {d!r})",
        f"import subprocess\nsubprocess.run(['rm', '-rf', {d!r}])",
        f"import pathlib\npathlib.Path({f!r}).write_text('pwned')",
        f"import os\nos.symlink({f!r}, 'link')\nopen('link', 'w').write('pwned')",
        f"import os\nos.chdir({d!r})\nopen('sentinel.txt', 'w').write('pwned')",
        f"open({d + '/new.txt'!r}, 'w').write('new')",
        f"import os\nos.mkdir({d + '/newdir'!r})",
        f"import os\nos.rmdir({d + '/sub'!r})",
        f"import os\nos.system('touch ' + {d!r} + '/touched')",
        # descriptor-relative tricks the audit hook cannot resolve by path
        f"import os\nfd = os.open({d!r}, os.O_RDONLY)\nos.unlink('sentinel.txt', dir_fd=fd)",
        f"import os\nfd = os.open({d!r}, os.O_RDONLY)\n"
        "os.write(os.open('sentinel.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd), b'x')",
        f"import os\nfd = os.open({d!r}, os.O_RDONLY)\n"
        "open('sentinel.txt', 'w', opener=lambda p, fl: os.open(p, fl, dir_fd=fd)).write('x')",
        f"import os\nfd = os.open({d!r}, os.O_RDONLY)\nos.rename('x', 'sentinel.txt', dst_dir_fd=fd)",
        f"import os\nos.fchmod(os.open({f!r}, os.O_RDONLY), 0)",
        # swallow every error and carry on: the files must survive regardless
        "import os, shutil\n"
        f"for op in (lambda: os.remove({f!r}), lambda: shutil.rmtree({d!r}),\n"
        f"           lambda: open({f!r}, 'w').write('x'), lambda: os.system('rm -rf {d}')):\n"
        "    try:\n        op()\n    except BaseException:\n        pass\n",
    ]


def test_good_programs_pass():
    res = run_batch(
        [
            "x = 1",
            ["def f(x):\n    return x + 7", "assert f(1) == 8", "assert f(-3) == 4"],
            "import math, itertools, collections, heapq, re, functools\nassert math.gcd(4, 6) == 2",
            "print('lots of output ' * 1000)",
            "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'",
        ],
        timeout_s=TIMEOUT,
    )
    assert all(isinstance(r, SandboxResult) for r in res)
    assert [r.ok for r in res] == [True] * 5, [r.reason for r in res]


def test_failing_programs_fail():
    res = run_batch(
        ["def f(:", "assert 1 == 2", "raise SystemExit(0)", ["def f(x): return x", "assert f(1) == 2"]],
        timeout_s=TIMEOUT,
    )
    assert [r.ok for r in res] == [False] * 4
    assert "SyntaxError" in res[0].reason
    assert "AssertionError" in res[1].reason


def test_success_cannot_be_faked():
    fakes = [
        "import os\nos._exit(0)",
        "import posix\nposix._exit(0)",
        "import sys\nsys.exit(0)",
        ["import builtins\nbuiltins.exec = lambda *a, **k: None", "assert False"],
        ["import sys\nsys.modules['os'].write = lambda *a: 0", "assert False"],
        "import sys\nsys._getframe(1).f_locals",
        "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_back.f_locals",
        "import gc\ngc.get_objects()",
        "open('/proc/self/mem', 'rb')",
        "import ctypes",
    ]
    res = run_batch(fakes, timeout_s=TIMEOUT)
    assert not any(r.ok for r in res), [(r.ok, r.reason) for r in res]


def test_infinite_loop_times_out():
    t0 = time.monotonic()
    r = run_program("while True: pass", timeout_s=TIMEOUT)
    elapsed = time.monotonic() - t0
    assert not r.ok and ("timeout" in r.reason or "SIGXCPU" in r.reason)
    assert elapsed < 10


def test_sleep_times_out():
    t0 = time.monotonic()
    r = run_program("import time\ntime.sleep(1000)", timeout_s=TIMEOUT)
    assert not r.ok and r.reason == "timeout"
    assert time.monotonic() - t0 < 10


def test_fork_bomb_and_huge_allocation():
    t0 = time.monotonic()
    res = run_batch(
        [
            "import os\nwhile True: os.fork()",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except BaseException:\n        pass",
            "import threading\nwhile True: threading.Thread(target=lambda: None).start()",
            "x = bytearray(10**10)",
            "x = []\nwhile True: x.append(bytearray(10**6))",
            "x = ' ' * (10**10)",
        ],
        timeout_s=TIMEOUT,
    )
    assert not any(r.ok for r in res), [r.reason for r in res]
    assert time.monotonic() - t0 < 10


def test_fork_blocked_without_audit_hook():
    """RLIMIT_NPROC (enforced because the child is not root) stops fork and
    threads even when the audit hook is off.  A single fork: harmless if it worked."""
    prog = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)"
    thread = "import threading\nt = threading.Thread(target=lambda: None)\nt.start()\nt.join()"
    res = run_batch([prog, thread], timeout_s=TIMEOUT, _disable_layers=["audit"])
    assert not any(r.ok for r in res), [r.reason for r in res]
    assert "audit" not in res[0].layers


def _processes_with_cwd_under(base: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd").startswith(base):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_overall_timeout_kills_runner_and_children(monkeypatch):
    base = tempfile.mkdtemp(prefix="sdpocl-test-tmpbase-")
    try:
        os.chmod(base, 0o755)
        monkeypatch.setattr(tempfile, "tempdir", base)
        monkeypatch.setattr(client, "_OVERALL_SLACK_S", -0.4)  # overall limit 0.6 s
        t0 = time.monotonic()
        res = run_batch(["import time\ntime.sleep(100)"], timeout_s=TIMEOUT)
        assert time.monotonic() - t0 < 5
        assert not res[0].ok and res[0].reason == "overall-timeout"
        deadline = time.monotonic() + 3
        while _processes_with_cwd_under(base) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_with_cwd_under(base) == []
        assert os.listdir(base) == []
    finally:
        monkeypatch.undo()
        shutil.rmtree(base, ignore_errors=True)


def test_file_attacks_leave_victim_intact(victim):
    d, f = victim
    cwd = os.getcwd()
    res = run_batch(_file_attacks(d, f), timeout_s=TIMEOUT)
    # every attack except the error-swallowing one must be reported as a failure
    assert not any(r.ok for r in res[:-1]), [(i, r.reason) for i, r in enumerate(res) if r.ok]
    _intact(d, f)
    assert os.getcwd() == cwd
    assert not (d.parent / "sentinel.txt.moved").exists()


@pytest.mark.parametrize("layer", ["audit", "landlock", "privdrop"])
def test_each_layer_alone_protects_files(victim, layer):
    """Defence in depth: each layer on its own keeps the victim intact."""
    if layer == "privdrop" and not IS_ROOT:
        pytest.skip("privilege drop only happens when running as root")
    d, f = victim
    others = [x for x in ("audit", "landlock", "privdrop", "netns") if x != layer]
    attacks = [a for a in _file_attacks(d, f) if "system" not in a and "subprocess" not in a]
    if layer == "landlock":  # Landlock does not cover metadata (chmod/chown/utime)
        attacks = [a for a in attacks if "chmod" not in a]
    if layer != "audit":  # keep os.system in: needs fork+exec, blocked by NPROC/Landlock
        attacks.append(f"import os\nos.system('rm -rf ' + {str(d)!r})")
    res = run_batch(attacks, timeout_s=TIMEOUT, _disable_layers=others)
    if layer not in res[0].layers:
        pytest.skip(f"layer {layer} not available here (layers: {res[0].layers})")
    _intact(d, f)


def test_network_is_blocked():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    try:
        progs = [
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)",
            f"import socket\ns = socket.socket()\ns.settimeout(0.5)\ns.connect(('127.0.0.1', {port}))",
            "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()",
            "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:%d/' % " + str(port) + ", timeout=0.5)",
        ]
        res = run_batch(progs, timeout_s=TIMEOUT)
        assert not any(r.ok for r in res), [r.reason for r in res]
        # the same attempts with only the kernel layers (no audit hook)
        res2 = run_batch(progs[:2], timeout_s=TIMEOUT, _disable_layers=["audit"])
        assert not any(r.ok for r in res2), [r.reason for r in res2]
        srv.setblocking(False)
        with pytest.raises(BlockingIOError):
            conn, addr = srv.accept()
            conn.close()
            pytest.fail(f"sandboxed program connected from {addr}")
    finally:
        srv.close()


def test_mixed_batch_adversarial(victim):
    d, f = victim
    good = ["def f(x):\n    return x + 7", "assert f(1) == 8"]
    bad = [
        "while True: pass",
        "import os\nwhile True: os.fork()",
        "x = bytearray(10**10)",
        f"import shutil\nshutil.rmtree({str(d)!r})",
        "import time\ntime.sleep(60)",
    ]
    programs = []
    expected = []
    for b in bad:
        programs += [good, b]
        expected += [True, False]
    cwd, pid = os.getcwd(), os.getpid()
    t0 = time.monotonic()
    res = run_batch(programs, timeout_s=TIMEOUT)
    elapsed = time.monotonic() - t0
    print(f"\nadversarial mixed batch of {len(programs)}: {elapsed:.2f} s")
    assert [r.ok for r in res] == expected, [r.reason for r in res]
    assert elapsed < 10
    _intact(d, f)
    assert os.getcwd() == cwd and os.getpid() == pid


def test_batch_of_64_trivial_programs_is_fast():
    progs = [[f"def f(x):\n    return x + {i}", f"assert f(1) == {i + 1}"] for i in range(64)]
    t0 = time.monotonic()
    res = run_batch(progs)
    elapsed = time.monotonic() - t0
    print(f"\n64 trivial programs: {elapsed:.3f} s; layers: {res[0].layers}")
    assert all(res)
    assert elapsed < 15  # shared machine: generous; typically well under 1 s


def test_layers_reported():
    layers = sandbox.sandbox_layers()
    print(f"\nsandbox layers on this machine: {layers}")
    assert "audit" in layers
    if IS_ROOT:
        assert "privdrop" in layers


def test_temp_dirs_removed(monkeypatch):
    base = tempfile.mkdtemp(prefix="sdpocl-test-tmpbase-")
    try:
        os.chmod(base, 0o755)
        monkeypatch.setattr(tempfile, "tempdir", base)
        res = run_batch(
            [
                "import os\nos.mkdir('d')\nopen('d/x', 'w').write('x' * 1000)",
                "open('f', 'w').write('y')\nwhile True: pass",
            ],
            timeout_s=TIMEOUT,
        )
        assert res[0].ok and not res[1].ok
        assert os.listdir(base) == []
    finally:
        monkeypatch.undo()
        os.rmdir(base)


def test_empty_batch_and_bad_arguments():
    assert run_batch([]) == []
    with pytest.raises(ValueError):
        run_batch(["pass"], _disable_layers=["nonsense"])
    with pytest.raises(TypeError):
        run_batch([[1, 2]])


# --------------------------------------------------------------------------- #
# one process per unit test
# --------------------------------------------------------------------------- #
SOLUTION = "def f(x):\n    return x + 7"


def test_each_test_runs_in_its_own_process():
    """A test sees the program's definitions but nothing an earlier test left behind."""
    tests = [
        "import os\nassert f(1) == 8\nLEAK = os.getpid()\nopen('scratch', 'w').write('x')",
        "import os\nassert 'LEAK' not in globals()\nassert not os.path.exists('scratch')",
    ]
    res = run_batch([SOLUTION], tests=[tests], timeout_s=TIMEOUT)
    assert res[0].ok and res[0].tests_passed == 2, res[0].reason


def test_time_limit_is_per_test():
    """Three tests of 0.6 s each pass under a 1 s limit per test (1.8 s in all)."""
    slow = "import time\ntime.sleep(0.6)\nassert f(1) == 8"
    res = run_batch([SOLUTION], tests=[[slow] * 3], timeout_s=TIMEOUT, max_workers=1)
    assert res[0].ok, res[0].reason
    too_slow = "import time\ntime.sleep(5)"
    res = run_batch([SOLUTION], tests=[["assert f(1) == 8", too_slow]], timeout_s=TIMEOUT)
    assert not res[0].ok and res[0].reason == "test 2/2: timeout" and res[0].tests_passed == 1


def test_memory_limit_is_per_test():
    """Each test may use (nearly) the whole limit; more than that fails.

    Filling 600 MiB three times takes seconds on a busy 2-core machine (CI timed out at the
    2 s default once), so the wall limit is generous: this test is about memory, not time."""
    big = "x = bytearray(600 * 2**20)\nassert len(x) > 0"
    res = run_batch(
        [SOLUTION, SOLUTION], tests=[[big] * 3, ["x = bytearray(1500 * 2**20)"]], memory_mb=1024, timeout_s=20.0
    )
    assert res[0].ok, res[0].reason
    assert not res[1].ok and "MemoryError" in res[1].reason


def test_no_test_starts_after_a_failure():
    """Tests start in order and stop at the first failure (with one worker, nothing after it runs)."""
    tests = ["assert f(1) == 9"] + ["import time\ntime.sleep(0.9)"] * 5
    t0 = time.monotonic()
    res = run_batch([SOLUTION], tests=[tests], timeout_s=TIMEOUT, max_workers=1)
    assert time.monotonic() - t0 < 0.8
    assert not res[0].ok and res[0].reason.startswith("test 1/6: AssertionError") and res[0].tests_passed == 0


def test_a_failure_kills_the_programs_running_tests():
    """With spare workers later tests run alongside; once one fails the others are killed."""
    tests = ["import time\ntime.sleep(30)"] * 3 + ["assert f(1) == 9"]
    t0 = time.monotonic()
    res = run_batch([SOLUTION], tests=[tests], timeout_s=60.0, max_workers=4)
    assert time.monotonic() - t0 < 5
    assert not res[0].ok and res[0].reason.startswith("test 4/4: AssertionError")


def test_tests_mixed_batch_keeps_order_and_guarantees(victim):
    d, f = victim
    programs = [SOLUTION, "def f(x):\n    return x", SOLUTION, SOLUTION, SOLUTION]
    tests = [
        ["assert f(1) == 8", "assert f(-3) == 4"],
        ["assert f(1) == 8"],
        ["while True: pass"],
        [f"import shutil\nshutil.rmtree({str(d)!r})"],
        [],  # no tests: the program itself is the unit
    ]
    res = run_batch(programs, tests=tests, timeout_s=TIMEOUT)
    assert [r.ok for r in res] == [True, False, False, False, True], [r.reason for r in res]
    assert "timeout" in res[2].reason or "SIGXCPU" in res[2].reason
    _intact(d, f)


def test_tests_argument_is_checked():
    with pytest.raises(ValueError):
        run_batch(["pass", "pass"], tests=[["pass"]])
    with pytest.raises(TypeError):
        run_batch(["pass"], tests=["assert True"])
