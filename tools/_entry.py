"""How every tool ends: one line on stderr and an exit code, never a traceback (README, "bad input gets one line").

A tool starts with ``guard()``, before its heavy imports, so that a Ctrl-C or a missing extra while they load is
one line too, and its ``__main__`` block is ``run(main)``. What reaches the top:

- a Ctrl-C (KeyboardInterrupt): "interrupted", exit 130;
- SIGTERM (Slurm, Kubernetes, systemd): raised in the main thread as :class:`Terminated`, a KeyboardInterrupt, so
  it unwinds as a Ctrl-C does (temporary folders removed, the last checkpoint kept), then exit 143;
- a missing optional package: the extra that brings it, exit 2;
- its output closed under it (``tool | head``): one line, exit 141, as a shell's SIGPIPE;
- MemoryError, and any other error: its line, exit 1; with ``GPUEMB_TRACEBACK=1`` its traceback above it.

A tool catches the errors it knows itself (a bad flag exits 2 with its own line); this is the floor beneath them.
"""
import os
import signal
import sys
import threading
import traceback

# a missing top-level module -> the extra of pyproject.toml that brings it
EXTRAS = {"onnx": "serve", "pyarrow": "parquet", "matplotlib": "plot", "mpi4py": "mpi", "cupy": "gpu",
          "nvmath": "gpu", "torch": "test", "hypothesis": "test", "onnxruntime": "test"}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where the tool is; ``exit_code`` is the shell's 128 + 15."""

    exit_code = 128 + signal.SIGTERM

    def __str__(self):
        return "terminated (SIGTERM)"


def _terminate(signum, frame):
    # a second SIGTERM while the first unwinds ends the process at once, as it would without this handler
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated()


def _prog():
    return os.path.basename(sys.argv[0]) or "tool"


def _text(error):
    return " ".join(str(error).split())  # a message of several lines, on one


def line_of(error):
    """``(line, exit code)`` that report ``error`` when it reaches the top of a tool."""
    if isinstance(error, KeyboardInterrupt):
        return f"{_prog()}: {str(error) or 'interrupted'}", getattr(error, "exit_code", 130)
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.split(".")[0]
        how = f"pip install -e '.[{EXTRAS[top]}]'" if top in EXTRAS else f"pip install {top}, or pip install -e ."
        return f"{_prog()}: error: this needs {top}, which is not installed; {how}", 2
    if isinstance(error, BrokenPipeError):  # `tool | head`: the reader had what it wanted
        return f"{_prog()}: stopped: its output was closed before it finished (a pipe into head?)", 128 + 13
    if isinstance(error, MemoryError):
        return (f"{_prog()}: error: out of memory ({_text(error) or 'no size given'}); ask for less (smaller "
                "sizes, fewer rows or a smaller batch), or run where more memory is free"), 1
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
    return (f"{_prog()}: error: {type(error).__name__}{at}: {_text(error)}; not an error this tool expected: "
            "report it, with the traceback that GPUEMB_TRACEBACK=1 prints"), 1


def _report(error):
    """Print ``error``'s line (or, with GPUEMB_TRACEBACK=1, its traceback); returns the exit code."""
    text, code = line_of(error)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # nothing more can reach a closed pipe; nor may the exit's own flush try again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if os.environ.get("GPUEMB_TRACEBACK") == "1":
        traceback.print_exception(error)
    tell(text)
    return code


def tell(line):
    """``line`` on stderr in one write: a non-terminal stderr writes through, so print() wrote the line and its
    newline apart, and under mpiexec two ranks' lines came out as one (gpuemb/train/cli.py's tell, for the code
    that runs once gpuemb is imported; a tool's own lines before that come here)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _uncaught(kind, error, tb):
    # every error but a Ctrl-C reaches this hook, so that a hook installed on top of it (the MPI backend's, which
    # then aborts the other ranks) still sees it. Python exits 1 after it, and re-raises SIGINT after a Ctrl-C
    # while the imports load: another code is this module's to give, with all unwound and nothing left to close
    code = _report(error)
    if code != 1:
        os._exit(code)


AGAIN_S = 0.01  # how soon a signal lost in a callback comes again


def _unraisable(info, default=sys.__unraisablehook__):
    """A Ctrl-C or SIGTERM raised inside a callback whose errors Python ignores (importlib's module-lock weakref,
    a ``__del__``) would be printed as "Exception ignored" and lost, and the tool would go on (CI once saw a Ctrl-C
    during the imports vanish so). The signal is sent again, from a thread, so that it lands after the callback."""
    if not isinstance(info.exc_value, KeyboardInterrupt):
        return default(info)
    signum = signal.SIGTERM if isinstance(info.exc_value, Terminated) else signal.SIGINT
    if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, _terminate)  # its first delivery set the default for a second one
    again = threading.Timer(AGAIN_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    try:
        again.start()
    except RuntimeError:  # the interpreter is shutting down: no thread can start, and the tool is ending anyway
        default(info)


def guard():
    """Install the policy: uncaught errors as one line, SIGTERM as :class:`Terminated`, and a signal lost in a
    callback sent again. Call it from the tool's ``if __name__ == "__main__":`` before the heavy imports (never on
    import, which would change a test's process)."""
    sys.excepthook = _uncaught
    sys.unraisablehook = _unraisable
    signal.signal(signal.SIGTERM, _terminate)


def run(main):
    """Exit with ``main()``'s code (None is 0), or after a Ctrl-C or SIGTERM with its line and code; any other
    error goes on to the hook ``guard`` installed."""
    try:
        code = main()
    except (KeyboardInterrupt, BrokenPipeError) as e:
        code = _report(e)
    sys.exit(code)
