"""The emulated device's array: NumPy memory behind CuPy's ndarray API, strict about every crossing to the host.

What real CuPy refuses, this refuses too: ``np.asarray`` of a device array, an operation that mixes a device
array with a host one, a host array handed to a kernel. What CuPy does silently but a GPU waits for, this
refuses as well, so that the code says it: ``float()``, ``int()``, ``bool()`` and iteration (use the backend's
``item`` or ``to_host``). The crossings CuPy's API makes explicit (``get``, ``set``, ``item``, ``tolist``,
``cupy.asarray`` of host data, host indices) work and are counted in ``transfers``.

Results are always device arrays: where NumPy returns a scalar (``a.sum()``, ``a[3]``), CuPy returns a 0-d array.

What launches work on the device is counted too, as ``cupy`` in ``launches`` (``count``):
- a call (a function of ``cupy``, a method, an operator, a NumPy function or ufunc of device arrays) counts one
  launch when it writes device memory that has elements: a new result that is not a view of its operands (an
  elementwise op, a reduction, a sort, ``concatenate``, ``astype``, ``copy``, ``zeros``, ``arange``, a ``reshape``
  that must copy), or an array it was given (``out=``, an in-place operator, ``fill``, ``sort`` in place,
  ``copyto``, ``ufunc.at``, an assignment, ``cupyx.scatter_add``). One a call, however many kernels CuPy runs
  for it (a sort, a ``unique``, a ``cumsum`` run several);
- nothing launches for a view (basic indexing, ``reshape``, ``transpose``, ``broadcast_to``, ``split``), for
  ``empty`` and ``empty_like``, for a query of shapes, dtypes or attributes, for an upload or a copy back (the
  crossings ``transfers`` counts), or for a result without elements;
- a selection or an assignment by a boolean mask, and the calls of ``READBACKS`` (``nonzero``, ``flatnonzero``,
  ``unique``...), launch once and read their result's size back (``readbacks``) when their input has elements.
The reads back of values (``get``, ``item``, ``tolist``) count as ``readbacks`` as well as ``transfers``.
"""
import operator

import numpy as np

from .. import launches, transfers

IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array "
            "explicitly.")  # CuPy's own message


def wrap(a):
    """A device array over the NumPy array ``a`` (no copy)."""
    out = object.__new__(ndarray)
    out._a = a
    return out


def result(r):
    """A NumPy result as CuPy returns it: arrays and scalars become device arrays, containers are walked."""
    if isinstance(r, np.ndarray):
        return wrap(r)
    if isinstance(r, np.generic):
        return wrap(np.asarray(r))
    if isinstance(r, tuple):
        return tuple(result(x) for x in r)
    if isinstance(r, list):
        return [result(x) for x in r]
    return r


READBACKS = {"nonzero": 1, "flatnonzero": 1, "argwhere": 1, "unique": 1, "compress": 1, "extract": 1,
             "bincount": 2}
"""The calls whose result's size depends on the data, and how many values each reads back to learn it (CuPy's
``bincount`` reads whether a key is negative, then the largest key). ``where`` of one argument is ``nonzero``."""
NO_LAUNCH = frozenset({"empty", "empty_like"})  # new memory that nothing writes


def _arrays(x):
    """The NumPy arrays and scalars in ``x``, which may be a tuple or list of them."""
    if isinstance(x, (np.ndarray, np.generic)):
        return [x]
    if isinstance(x, (tuple, list)):
        return [a for v in x for a in _arrays(v)]
    return []


def _writes(r, args, kwargs):
    """Whether a call on the operands ``args`` and ``kwargs`` that NumPy answered with ``r`` wrote elements: into
    ``out=``, into its first operand where it returns nothing (``fill``, ``sort``, ``copyto``, ``ufunc.at``), or
    into a result that is not a view of an operand."""
    if r is None:
        return any(a.size for a in _arrays(args[:1]))
    operands = _arrays(args) + _arrays(list(kwargs.values()))
    new = [a for a in _arrays(r) if not any(np.may_share_memory(a, o) for o in operands)]
    return any(a.size for a in _arrays(kwargs.get("out")) + new)


def count(name, r, args, kwargs):
    """Count the launch and the reads back of CuPy's call ``name(*args, **kwargs)`` (operands unwrapped), which
    NumPy answered with ``r``."""
    if name == "where" and len(args) == 1:
        name = "nonzero"
    first = _arrays(args[:1])
    if name in READBACKS and first and first[0].size:
        launches.cupy()
        launches.readback(READBACKS[name])
    elif name not in NO_LAUNCH and _writes(r, args, kwargs):
        launches.cupy()


def call(name, fn, args, kwargs, where):
    """``fn(*args, **kwargs)`` on the NumPy values behind device operands, counted as CuPy's ``name``; its result
    as CuPy returns it."""
    args, kwargs = operand(args, where), {k: operand(v, where) for k, v in kwargs.items()}
    r = fn(*args, **kwargs)
    count(name, r, args, kwargs)
    return result(r)


def _index_arrays(key):
    """The arrays in the (unwrapped) index ``key``."""
    return [k for k in (key if isinstance(key, tuple) else (key,)) if isinstance(k, np.ndarray)]


def selection(key):
    """How the (unwrapped) index ``key`` selects: "basic" (ints, slices, None, Ellipsis: a view), "advanced"
    (integer arrays: a gather or a scatter) or "mask" (a boolean array: its count is read back first)."""
    arrays = _index_arrays(key)
    if any(k.dtype == bool for k in arrays):
        return "mask"
    return "advanced" if arrays else "basic"


def selected(a, key):
    """How many elements of ``a`` the index ``key`` selects, found on a one-byte stand-in of its shape."""
    return np.broadcast_to(np.False_, a.shape)[key].size


def count_scatter(a, key):
    """Count an assignment through ``key`` into ``a``: a boolean mask with elements launches and reads back its
    count; another index launches where it selects elements."""
    if selection(key) == "mask":
        if any(k.size for k in _index_arrays(key) if k.dtype == bool):
            launches.cupy()
            launches.readback()
    elif selected(a, key):
        launches.cupy()


def mixed(x, where):
    return TypeError(f"{where}: a host array (numpy.ndarray, shape {np.shape(x)}) met a device array; copy it "
                     f"across explicitly with backend.to_device or backend.to_host (CuPy raises here too)")


def operand(x, where):
    """The NumPy value behind an operand: device arrays unwrap, scalars pass, host arrays are refused."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray):
        raise mixed(x, where)
    if isinstance(x, (list, tuple)):
        return type(x)(operand(v, where) for v in x)
    return x


def index(key, where):
    """An index: device arrays unwrap; host arrays and lists are uploaded, as CuPy does, and counted."""
    if isinstance(key, tuple):
        return tuple(index(k, where) for k in key)
    if isinstance(key, ndarray):
        return key._a
    if isinstance(key, (np.ndarray, list)):
        a = np.asarray(key)
        transfers.to_device(a.nbytes)
        return a
    return key


def _scalar_read(name):
    def refuse(self, *args):
        raise TypeError(f"{name}() of a device array (shape {self.shape}) reads it back to the host and waits for "
                        f"the stream; the emulated device refuses it. Use backend.item(x) for a scalar or "
                        f"backend.to_host(x) for an array: they count the crossing")
    return refuse


class ndarray:
    """A device array of the emulated device."""

    __slots__ = ("_a", "__weakref__")
    __array_priority__ = 100

    def __init__(self, shape, dtype=float, order="C"):
        self._a = np.empty(shape, dtype=dtype, order=order)

    # -- what describes an array, read without a transfer
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: wrap(self._a.T))
    data = property(lambda self: MemoryPointer(self._a))

    @property
    def base(self):
        return None if self._a.base is None else wrap(self._a.base)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "data": (self._a.ctypes.data, False),
                "strides": None if self._a.flags.c_contiguous else self._a.strides, "version": 3}

    def __len__(self):
        if self._a.ndim == 0:
            raise TypeError("len() of unsized object")
        return self._a.shape[0]

    def __repr__(self):
        return repr(self._a).replace("array(", "emulated_array(", 1)

    __str__ = __repr__

    # -- the crossings: refused when implicit, counted when explicit
    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT)

    __bool__ = _scalar_read("bool")
    __int__ = _scalar_read("int")
    __float__ = _scalar_read("float")
    __complex__ = _scalar_read("complex")
    __index__ = _scalar_read("operator.index")

    def __iter__(self):
        raise TypeError(f"iterating over a device array (shape {self.shape}) reads every element back to the host; "
                        f"copy it with backend.to_host first")

    def get(self, stream=None, order="C", out=None):
        transfers.to_host(self._a.nbytes)
        transfers.sync()  # a copy to pageable host memory returns once it is done: the host waits for the stream
        launches.readback()
        if out is None:
            return np.array(self._a, order=order)
        out[...] = self._a
        return out

    def set(self, arr, stream=None):
        arr = np.asarray(arr)
        transfers.to_device(arr.nbytes)
        self._a[...] = arr

    def item(self, *args):
        transfers.to_host(self._a.itemsize)
        transfers.sync()
        launches.readback()
        return self._a.item(*args)

    def tolist(self):
        transfers.to_host(self._a.nbytes)
        transfers.sync()
        launches.readback()
        return self._a.tolist()

    # -- NumPy's protocols: a device array stays on the device, a host array may not join it
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return call(ufunc.__name__, getattr(ufunc, method), inputs, kwargs, f"numpy.{ufunc.__name__}")

    def __array_function__(self, func, types, args, kwargs):
        return call(func.__name__, func, args, kwargs, f"numpy.{func.__name__}")

    # -- indexing
    def __getitem__(self, key):
        key = index(key, "indexing")
        r = self._a[key]
        kind = selection(key)
        if kind == "mask":
            count_scatter(self._a, key)  # the same scan and read of the mask's count as an assignment's
        elif kind == "advanced" and r.size:
            launches.cupy()
        return result(r)

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray):  # CuPy uploads it
            transfers.to_device(value.nbytes)
        else:
            value = operand(value, "assignment")
        key = index(key, "assignment")
        self._a[key] = value
        count_scatter(self._a, key)


class MemoryPointer:
    """``ndarray.data``: ``ptr`` is the address of the first element, which the emulated NCCL reads and writes."""

    __slots__ = ("ptr", "mem")

    def __init__(self, a):
        self.mem = a  # keeps the memory alive while the pointer is held
        self.ptr = a.ctypes.data if a.size else 0


def _operator(fn, reflected=False):
    def apply(self, other):
        o = operand(other, f"the operator {fn.__name__}")
        r = fn(o, self._a) if reflected else fn(self._a, o)
        if np.size(r):
            launches.cupy()
        return result(r)
    return apply


def _inplace(fn):
    def apply(self, other):
        fn(self._a, operand(other, f"the operator {fn.__name__}"))
        if self._a.size:
            launches.cupy()
        return self
    return apply


def _unary(fn):
    def apply(self):
        r = fn(self._a)
        if np.size(r):
            launches.cupy()
        return result(r)
    return apply


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
              "rshift"):
    _fn = getattr(operator, _name + ("_" if _name in ("and", "or") else ""))
    setattr(ndarray, f"__{_name}__", _operator(_fn))
    setattr(ndarray, f"__r{_name}__", _operator(_fn, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(getattr(operator, f"i{_name}")))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(ndarray, f"__{_name}__", _operator(getattr(operator, _name)))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(ndarray, f"__{_name}__", _unary(getattr(operator, _name)))

# The methods of CuPy's ndarray that the project may call, each running NumPy's on the same memory.
METHODS = ("all", "any", "argmax", "argmin", "argsort", "astype", "clip", "conj", "copy", "cumsum", "diagonal",
           "dot", "fill", "flatten", "max", "mean", "min", "nonzero", "prod", "ravel", "repeat", "reshape", "round",
           "sort", "squeeze", "std", "sum", "swapaxes", "take", "transpose", "var", "view")


def _method(name):
    def method(self, *args, **kwargs):
        return call(name, getattr(np.ndarray, name), (self, *args), kwargs, f"ndarray.{name}")
    method.__name__ = name
    return method


for _name in METHODS:
    setattr(ndarray, _name, _method(_name))
