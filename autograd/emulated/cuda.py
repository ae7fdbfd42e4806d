"""``cupy.cuda`` of the emulated device: devices, streams, events and the runtime's queries.

Work runs at once, so streams and events are always done. What they keep of CUDA is what code can get wrong:
- the current device is per thread, and a new thread starts on device 0, as in the CUDA runtime;
- a stream belongs to the device that was current when it was made, and entering it from a thread whose current
  device differs raises, as CuPy does;
- every wait (a stream's, an event's or the device's ``synchronize``) is counted in ``transfers``;
- each event knows the stream it was recorded on and when (``serial``), and each ``Stream.wait_event`` is logged in
  ``WAITS`` as (waiting stream, the event's stream, its serial), so that tests can check which work a stream was
  ordered after, which the real device would need and the emulation, running everything at once, cannot show.
``GPUEMB_EMULATED_GPUS`` sets how many devices there are (default 1).
"""
import collections
import itertools
import os
import threading
import time

from .. import transfers

_state = threading.local()
_pointers = itertools.count(0x1000)
_serials = itertools.count(1)
WAITS = collections.deque(maxlen=100_000)  # (waiting stream's ptr, event's stream's ptr, event's serial), in order;
# bounded, so a long emulated run does not grow it without end


def _count():
    return int(os.environ.get("GPUEMB_EMULATED_GPUS", "1"))


def _current_id():
    return getattr(_state, "device", 0)


def is_available():
    return True


class runtime:
    """The CUDA runtime's queries that the project makes."""

    @staticmethod
    def getDeviceCount():
        return _count()

    @staticmethod
    def getDevice():
        return _current_id()

    @staticmethod
    def getDeviceProperties(device_id):
        return {"name": b"emulated CUDA device (NumPy)", "totalGlobalMem": 80 * 2 ** 30, "major": 9, "minor": 0,
                "multiProcessorCount": 1}


class Device:
    """A device; as a context, it is current for the calling thread until the block ends."""

    def __init__(self, device=None):
        self.id = _current_id() if device is None else int(device)
        if not 0 <= self.id < _count():
            raise RuntimeError(f"cudaErrorInvalidDevice: device {self.id} of {_count()} (GPUEMB_EMULATED_GPUS)")
        self._saved = []

    compute_capability = "90"

    def use(self):
        _state.device = self.id

    def synchronize(self):
        transfers.sync()

    def __enter__(self):
        self._saved.append(_current_id())
        self.use()
        return self

    def __exit__(self, *exc):
        _state.device = self._saved.pop()
        return False

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


class Stream:
    """A stream of the device current when it was made."""

    null = None  # set below: the default stream, pointer 0

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.ptr = 0 if null else next(_pointers)
        self.device_id = _current_id()
        self._saved = []

    done = True

    def synchronize(self):
        transfers.sync()

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event):
        if event.stream_ptr is None:
            raise RuntimeError("cudaErrorInvalidResourceHandle: waiting on an event that was never recorded")
        WAITS.append((self.ptr, event.stream_ptr, event.serial))

    def use(self):
        self._check_device()
        _state.stream = self
        return self

    def _check_device(self):
        if self.device_id != _current_id():
            raise RuntimeError(f"The current device ({_current_id()}) is different from the device of the stream "
                               f"({self.device_id})")

    def __enter__(self):
        self._check_device()
        self._saved.append(get_current_stream())
        _state.stream = self
        return self

    def __exit__(self, *exc):
        _state.stream = self._saved.pop()
        return False


Stream.null = Stream(null=True)


def get_current_stream(device_id=None):
    return getattr(_state, "stream", None) or Stream.null


class Event:
    """An event: ``record`` takes the time, so ``get_elapsed_time`` measures the host's wall clock."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self._t = None
        self.disable_timing = disable_timing
        self.stream_ptr, self.serial = None, None

    done = True

    def record(self, stream=None):
        self._t = time.perf_counter()
        self.stream_ptr = (stream or get_current_stream()).ptr
        self.serial = next(_serials)

    def synchronize(self):
        transfers.sync()


def get_elapsed_time(start, end):
    if start.disable_timing or end.disable_timing:
        raise RuntimeError("cudaErrorInvalidResourceHandle: an event made with disable_timing=True has no time")
    return (end._t - start._t) * 1e3
