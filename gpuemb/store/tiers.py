"""Row storage of one tier: device memory, pinned host memory, or an HDF5 file (``ssd_tier.py``; docs/design.md,
"The embedding store").

Every tier stores rows of ``width`` elements of ``dtype`` (a row is ``[weights | optimizer state]``, laid out by
the store) in slabs of ``slab_rows`` rows, grown by ``add_slab()``, with one API: ``read(rows)``,
``write(rows, values)``, ``capacity``, ``nbytes``, ``close()``, and ``bytes_read``/``bytes_written`` counters.
Rows never written read as zeros. Rows within one ``write`` must be distinct.
"""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd import backend
from gpuemb.kernels.gather import gather_rows, scatter_rows

from .slab import grown_to


@dataclass(frozen=True)
class TierSpec:
    """The rows of a tier: ``width`` elements of ``dtype``, ``slab_rows`` per slab, ``chunk_rows`` per HDF5 chunk."""
    width: int
    dtype: str = "float32"
    slab_rows: int = 1 << 16
    chunk_rows: int = 256  # SSD only: each touched chunk is read whole; smaller ones read fewer bytes, more calls

    def validate(self):
        if self.width < 1 or self.slab_rows < 1:
            raise ValueError(f"TierSpec: width={self.width} and slab_rows={self.slab_rows} must be positive")
        if self.chunk_rows < 1 or self.slab_rows % self.chunk_rows:
            raise ValueError(f"TierSpec: chunk_rows={self.chunk_rows} must divide slab_rows={self.slab_rows}; "
                             "powers of two for both always fit")
        if np.dtype(self.dtype).kind not in "fiu":
            raise ValueError(f"TierSpec: dtype={self.dtype!r} is not a numeric dtype; use e.g. float32 or float16")
        return self

    @property
    def row_bytes(self):
        return self.width * np.dtype(self.dtype).itemsize


def _gather(table, idx):
    """``table[idx]`` by the gather kernel, moving rows as unsigned integers: numba's CPU target has no float16."""
    bits = np.dtype(f"u{table.dtype.itemsize}")
    return gather_rows(table.view(bits), idx).view(table.dtype)


def _scatter(table, idx, values):
    """``table[idx] = values`` by the scatter kernel, as unsigned integers like ``_gather``."""
    bits = np.dtype(f"u{table.dtype.itemsize}")
    xp = backend.get_array_module(table)
    scatter_rows(table.view(bits), idx, xp.ascontiguousarray(values, dtype=table.dtype).view(bits))


class Tier:
    """What every tier shares: the spec, the argument checks, and the byte counters.

    ``stores_steps``: whether the tier keeps each row's update count beside the row (the SSD tier does, so its
    level keeps no per-slot array of them in memory); then ``read(rows, with_steps=True)`` returns ``(rows,
    steps)`` and ``write(rows, values, steps=...)`` stores them. ``sync()`` waits until every write has reached
    the tier's storage and raises the error of any that failed (only the SSD tier writes in the background).
    """
    stores_steps = False

    def __init__(self, spec, name):
        self.spec, self.name = spec.validate(), name
        self.slab_rows, self.width, self.dtype = spec.slab_rows, spec.width, np.dtype(spec.dtype)
        self.bytes_read = self.bytes_written = 0

    @property
    def nbytes(self):
        return self.capacity * self.spec.row_bytes

    def _check_rows(self, rows, op):
        """Shapes always; the range of host row ids only. Device row ids come from the level's ``DeviceSlots``,
        below the capacity by construction (it adds slabs before handing slots out), so no read checks them."""
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise ValueError(f"{self.name}.{op}: want 1-D integer row ids, got {rows.dtype} of shape {rows.shape}")
        if (not backend.is_device_array(rows) and rows.size
                and (int(rows.min()) < 0 or int(rows.max()) >= self.capacity)):
            raise IndexError(f"{self.name}.{op}: row ids span [{int(rows.min())}, {int(rows.max())}], outside the "
                             f"capacity of {self.capacity} rows ({self.capacity // self.slab_rows} slabs of "
                             f"{self.slab_rows}); take row ids from this tier's SlabAllocator")

    def _check_values(self, values, n, op):
        if values.shape != (n, self.width) or values.dtype != self.dtype:
            raise ValueError(f"{self.name}.{op}: want values of shape ({n}, {self.width}) and dtype {self.dtype} "
                             f"for {n} rows, got {values.shape} {values.dtype}; cast or reshape them first")

    def sync(self):
        """Nothing to wait for: this tier writes in the caller's thread."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _SlabTier(Tier):
    """Rows in a list of ``[slab_rows, width]`` arrays; a subclass says where they live."""

    def __init__(self, spec, name):
        super().__init__(spec, name)
        self.slabs = []

    @property
    def capacity(self):
        return len(self.slabs) * self.slab_rows

    def add_slab(self):
        """Add ``slab_rows`` zeroed rows."""
        self.slabs.append(self._new_slab())

    def _by_slab(self, rows):
        """``(slab, positions in rows, offsets in the slab)`` for each slab that ``rows`` touch."""
        xp = backend.get_array_module(rows)
        slab = rows // self.slab_rows
        order = xp.argsort(slab)
        ends = np.cumsum(backend.to_host(xp.bincount(slab, minlength=len(self.slabs))))
        start = 0
        for s, end in enumerate(ends.tolist()):
            if end > start:
                sel = order[start:end]
                yield s, sel, rows[sel] - s * self.slab_rows
            start = end

    def read(self, rows, out=None):
        """Rows ``[n, width]``, into ``out`` when given (e.g. a pinned staging buffer)."""
        rows = self._index(rows)
        self._check_rows(rows, "read")
        n = rows.shape[0]
        if out is None:
            out = self._empty((n, self.width))
        self._check_values(out, n, "read(out=)")
        for s, sel, off in self._by_slab(rows):
            out[sel] = _gather(self.slabs[s], off)
        self.bytes_read += n * self.spec.row_bytes
        return out

    def write(self, rows, values, where=None):
        """Store ``values[i]`` as row ``rows[i]``; with a host mask ``where``, only where it is set."""
        rows = self._index(rows)
        if where is not None:
            rows, values = rows[where], backend.to_host(values)[where]
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        values = self._values(values)
        for s, sel, off in self._by_slab(rows):
            _scatter(self.slabs[s], off, values[sel])
        self.bytes_written += rows.shape[0] * self.spec.row_bytes

    def close(self):
        self.slabs = []


class DeviceTier(Tier):
    """Rows in one array of the backend's (CuPy on a GPU, NumPy on the CPU), grown a slab at a time.

    One array rather than a list of slabs, so a read or write is one gather or scatter whatever the rows touch:
    splitting rows by slab needs the count per slab on the host, a read per call. The array grows by a quarter at
    least on a GPU and doubles on the host (``add_slab``), so adding slabs copies each row O(1) times; the price is
    a copy while it grows, up to 2.25 times the rows for a moment on a GPU. A bounded level (a cache, ``max_rows``)
    stops growing at its bound.
    """

    def __init__(self, spec):
        super().__init__(spec, "DeviceTier")
        self.rows = backend.xp.zeros((0, self.width), self.dtype)
        self._capacity = 0

    @property
    def capacity(self):
        return self._capacity

    def add_slab(self):
        """Add ``slab_rows`` zeroed rows.

        On a GPU the array's slack is memory, so it grows by a quarter. On the host it doubles: a large ``zeros`` is
        mapped, not written, so its slack costs address space until rows land there, and each row is copied about
        once as the table grows rather than four times (MLPerf DLRM-DCNv2's rows of weights and Adagrad state, 1 KB
        each, took 57 ms of a 447 ms CPU step growing by a quarter)."""
        self._capacity += self.slab_rows
        # One row more than the slots: row -1 is no slot's, so a fixed-size unique's padding reads and writes it
        # (``RowLevel.acquire``) whatever the capacity when its update comes.
        self.rows = grown_to(self.rows, self._capacity + 1, ahead=4 if backend.is_device_array(self.rows) else 1)

    def read(self, rows, out=None):
        """Rows ``[n, width]``, into ``out`` when given."""
        rows = backend.to_device(rows)
        self._check_rows(rows, "read")
        got = _gather(self.rows, rows)
        if out is not None:
            self._check_values(out, rows.shape[0], "read(out=)")
            out[...] = got
        self.bytes_read += rows.shape[0] * self.spec.row_bytes
        return got if out is None else out

    def write(self, rows, values, where=None):
        """Store ``values[i]`` as row ``rows[i]``; with a mask ``where``, only where it is set (the others keep
        their rows, read back and written again: no count of the set ones leaves the device)."""
        rows = backend.to_device(rows)
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        values = backend.to_device(values)
        if where is not None and backend.is_device_array(rows):  # a count of the set ones would leave the device
            values = backend.xp.where(where[:, None], values, _gather(self.rows, rows))
        elif where is not None:
            rows, values = rows[where], values[where]
        _scatter(self.rows, rows, values)
        self.bytes_written += rows.shape[0] * self.spec.row_bytes

    def close(self):
        self.rows = backend.xp.zeros((0, self.width), self.dtype)
        self._capacity = 0


class HostTier(_SlabTier):
    """Rows in slabs of pinned host memory, so copies up to the device can be asynchronous; NumPy on the CPU."""

    def __init__(self, spec):
        super().__init__(spec, "HostTier")

    def _new_slab(self):
        slab = backend.pinned_empty((self.slab_rows, self.width), self.dtype)
        slab.fill(0)
        return slab

    def _empty(self, shape):
        return np.empty(shape, self.dtype)

    def _index(self, rows):
        return backend.to_host(rows)

    def _values(self, values):
        return backend.to_host(values)
