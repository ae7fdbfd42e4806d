"""A line when numba compiles kernels, and the seconds it spent, so that a tool's rate can leave them out.

The CPU kernels are ``numba.njit(cache=True)``: the first run on a machine (or after an upgrade, or an edit of a
kernel's file) compiles them for half a minute or more, and later runs load them from numba's disk cache in
milliseconds. Rather than guess from the cache's files whether they are current (numba keys them by its
version, the source file's stamp and the CPU), this listens to numba itself: it announces a compile only when
numba's own cache missed. numba-cuda raises no such event for a CUDA kernel; ``autograd/launch.py`` raises
numba's for it where neither memory nor the disk cache holds the kernel, so a GPU's first step is announced too.
"""
import contextlib
import time

from numba.core import event

COMPILE_EVENT = "numba:compile"


class CompileWatch(event.Listener):
    """Hears numba compile (a disk cache miss; a hit is silent): calls ``say`` once, at the first compile, and
    sums the seconds spent compiling. ``about_s``: the seconds the announcement expects, measured by the tool."""

    def __init__(self, say, about_s):
        self.say, self.about_s = say, about_s
        self.seconds, self.announced = 0.0, False
        self._depth, self._began = 0, 0.0  # a kernel that calls another compiles it inside its own compile

    def on_start(self, _event):
        if self._depth == 0:
            self._began = time.perf_counter()
            if not self.announced:
                self.announced = True
                self.say(f"compiling kernels on first use, about {self.about_s:.0f} s; cached for later runs")
        self._depth += 1

    def on_end(self, _event):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._began


@contextlib.contextmanager
def watching(say, about_s):
    """A :class:`CompileWatch` listening for the ``with`` block (numba's compiles hold one lock, so one at a
    time reaches it)."""
    watch = CompileWatch(say, about_s)
    with event.install_listener(COMPILE_EVENT, watch):
        yield watch
