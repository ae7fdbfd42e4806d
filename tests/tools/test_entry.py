"""tools/_entry.py, the floor under every tool: whatever reaches the top is one line and an exit code, a Ctrl-C
while the heavy imports load and a missing extra included."""
import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def start(tool, *args, env=None):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", **(env or {})}
    # the tool gets SIGINT as a terminal's Ctrl-C would reach it, whatever the test process inherited or set: a job
    # started in the background ignores SIGINT, and a child inherits that and the blocked signals, in which case
    # Python installs no Ctrl-C handler (the full suite in CI once ran these tools deaf to it)
    return subprocess.Popen([sys.executable, str(TOOLS / tool), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_hear_ctrl_c)


def _hear_ctrl_c():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def guarded(process, timeout=60):
    """Wait until ``process`` has installed the guard: its SIGTERM handler is in /proc, before the heavy imports."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{process.pid}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if caught & SIGTERM_BIT:
            return
        time.sleep(0.001)
    raise AssertionError("the tool never installed its guard")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads a process's signal handlers from /proc")
@pytest.mark.parametrize("tool, args", [("export.py", ["ckpt", "--out", "b"]),  # heavy imports at module level
                                        ("train.py", ["--steps", "1"])])  # inside main
def test_a_ctrl_c_while_the_imports_load_is_one_line(tool, args, tmp_path):
    # a numpy that takes a minute to import holds the tool inside its heavy imports, however fast the machine
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    process = start(tool, *args, env={"PYTHONPATH": str(tmp_path)})
    guarded(process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130 and err == f"{tool}: interrupted\n", err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_lost_in_a_callback_is_sent_again(signum, monkeypatch):
    """Python ignores what a weakref callback raises: a Ctrl-C landing in one (importlib's module locks) was lost,
    and a tool went on sleeping through the test above. The hook sends the signal again."""
    module, got = _entry(), []
    monkeypatch.setattr(signal, "signal", lambda *a: got.append(("handler", a[0])))  # the test's own stay
    sent = []
    monkeypatch.setattr(module.os, "kill", lambda pid, s: sent.append((pid, s)))
    lost = module.Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    module._unraisable(type("Info", (), {"exc_value": lost})())
    deadline = time.monotonic() + 10
    while not sent and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sent == [(os.getpid(), signum)]
    assert got == ([("handler", signal.SIGTERM)] if signum == signal.SIGTERM else [])  # SIGTERM's handler back


def test_a_lost_signal_at_shutdown_goes_to_pythons_hook(monkeypatch):
    module, seen = _entry(), []

    def no_thread(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")
    monkeypatch.setattr(module.threading.Timer, "start", no_thread)
    info = type("Info", (), {"exc_value": KeyboardInterrupt()})()
    module._unraisable(info, default=seen.append)
    assert seen == [info]


def test_other_unraisable_errors_go_to_pythons_hook():
    module, seen = _entry(), []
    info = type("Info", (), {"exc_value": ValueError("in a __del__")})()
    module._unraisable(info, default=seen.append)
    assert seen == [info]


def test_a_missing_extra_names_it(tmp_path):
    fake = tmp_path / "onnx"  # what the plain install, without the serve extra, finds
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'onnx'\", name='onnx')\n")
    out, err = start("export.py", "ckpt", "--out", tmp_path / "b", env={"PYTHONPATH": str(tmp_path)}).communicate()
    assert err == ("export.py: error: this needs onnx, which is not installed; pip install -e '.[serve]'\n"), err


def _entry():
    spec = importlib.util.spec_from_file_location("_entry", TOOLS / "_entry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_closed_output_is_one_line_and_the_shells_sigpipe_code(tmp_path):
    script = tmp_path / "talk.py"
    script.write_text(f"import sys, time; sys.path.insert(0, {str(TOOLS)!r}); import _entry; _entry.guard()\n"
                      "def main():\n    print('first', flush=True)\n    time.sleep(0.5)\n"
                      "    for _ in range(100000):\n        print('more')\n_entry.run(main)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "first\n"
    p.stdout.close()  # the reader goes, as head does after its lines
    err = p.stderr.read()
    assert p.wait(60) == 141, err
    assert err == "talk.py: stopped: its output was closed before it finished (a pipe into head?)\n", err


def test_memory_and_unexpected_errors_are_one_line_naming_where():
    entry = _entry()
    line, code = entry.line_of(MemoryError("Unable to allocate 8 GiB"))
    assert code == 1 and line.endswith(": error: out of memory (Unable to allocate 8 GiB); ask for less (smaller "
                                       "sizes, fewer rows or a smaller batch), or run where more memory is free")
    try:
        {}["crc32"]
    except KeyError as e:
        line, code = entry.line_of(e)
    assert code == 1 and "error: KeyError at test_entry.py:" in line and "GPUEMB_TRACEBACK=1" in line, line
    assert "\n" not in line


def test_every_extra_is_in_the_readme_and_the_extras_named_exist():
    import re
    import tomllib

    root = TOOLS.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = re.findall(r"^\| `([\w-]+)` \|", (root / "README.md").read_text(), re.M)
    assert sorted(set(extras) - set(listed)) == [], "README's extras table misses these"
    assert set(_entry().EXTRAS.values()) <= set(extras)


class _Writes:
    """A stderr that keeps each write apart."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)

    def flush(self):
        pass


@pytest.mark.parametrize("argv, env, says", [
    (["--link", "warp9"], {}, "argument --link: 'warp9' is not a link"),
    (["--comm-backend", "nccl"], {}, "--comm-backend: gpuemb.comm.init: backend='nccl' needs a GPU"),
    ([], {"GPUEMB_COMM_LINK": "warp9"}, "$GPUEMB_COMM_LINK 'warp9' is not a link"),
    # an explicit --link none wins over the environment's, so the local link has nothing between hosts
    (["--link", "none", "--local-link", "nvlink4"], {"GPUEMB_COMM_LINK": "ib100"},
     "argument --local-link: nvlink4 is the link within a host, and there is no --link between hosts"),
], ids=["link", "backend", "link-env", "local-link-alone"])
def test_train_startup_errors_are_one_write_each(argv, env, says, monkeypatch):
    """train.py's own errors before its flags are parsed (a link that does not exist, NCCL on a machine without a
    GPU): a line and its newline in one write, so that two ranks' lines under mpiexec cannot interleave (print
    writes them apart)."""
    spec = importlib.util.spec_from_file_location("train_tool", TOOLS / "train.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setenv("GPUEMB_DEVICE", "cpu")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    writes = _Writes()
    monkeypatch.setattr(sys, "stderr", writes)
    try:
        code = tool.main(argv)
    finally:
        os.environ.pop("GPUEMB_DEVICE", None)  # main() sets it for --device; monkeypatch restores the rest
    assert code == 2
    assert len(writes.writes) == 1 and writes.writes[0].startswith("train.py: error: ") \
        and writes.writes[0].endswith("\n") and writes.writes[0].count("\n") == 1, writes.writes
    assert says in writes.writes[0], writes.writes
