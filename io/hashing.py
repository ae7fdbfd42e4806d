"""Stable 64-bit ids for raw tokens, written in numba.

Python's built-in ``hash`` is salted per process, so it would give other ids on every run; nothing here uses it.
A token becomes a 64-bit value in one of three ways, chosen per column (its *kind*):

- ``str``: FNV-1a 64 over the token's bytes;
- ``hex``: the value of up to 16 hex digits (Criteo's 8-digit tokens), parsed, not hashed, because that is faster;
- ``int``: the value of a decimal integer in int64's range, its bits as uint64 (a negative one as two's
  complement); a token outside that range is a bad field.

:func:`mix` then scrambles the value with the column's slot through splitmix64's finalizer, so one token in two
columns gives two unrelated ids, and masks it to 63 bits, so ids are non-negative int64.
"""
import numba
import numpy as np

KINDS = ("str", "hex", "int")
KIND_STR, KIND_HEX, KIND_INT = 0, 1, 2

_U = np.uint64
_INT64_MIN = _U(1 << 63)  # -2**63 as int_value gives it: the first value with the sign bit
FNV_OFFSET = _U(0xCBF29CE484222325)
FNV_PRIME = _U(0x100000001B3)
GOLDEN = _U(0x9E3779B97F4A7C15)
ID_MASK = _U(0x7FFFFFFFFFFFFFFF)
# The values that stand for "no token" and "a token rarer than the threshold"; mixed with the slot like any other.
MISSING = _U(0x6D697373696E6721)
RARE = _U(0x7261726520696421)
_S30, _S27, _S31, _M1, _M2 = _U(30), _U(27), _U(31), _U(0xBF58476D1CE4E5B9), _U(0x94D049BB133111EB)
_ONE, _TEN, _SIXTEEN, _U64MAX = _U(1), _U(10), _U(16), _U(0xFFFFFFFFFFFFFFFF)


def splitmix64_finalizer(z):
    """splitmix64's finalizer of uint64 ``z``: a bijection in which every input bit moves every output bit.

    The one definition, in plain Python: it runs as is on NumPy uint64 arrays (overflow wraps), and its users
    compile it where they need it, ``numba.njit(inline="always")`` on the CPU and ``cuda.jit(device=True)`` on the
    GPU (the key index's probe hash)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


_finalizer = numba.njit(inline="always")(splitmix64_finalizer)


@numba.njit(nogil=True, cache=True, inline="always")
def splitmix64(x):
    """splitmix64's output function of ``x + golden``: a bijection of uint64 that scrambles every bit."""
    return _finalizer(x + GOLDEN)


@numba.njit(nogil=True, cache=True, inline="always")
def slot_salt(slot):
    """What :func:`mix` xors into the values of column ``slot``; parsers compute it once per column."""
    return splitmix64(_U(slot) + _ONE)


@numba.njit(nogil=True, cache=True, inline="always")
def mix_salted(value, salt):
    """:func:`mix` with the slot's salt given."""
    return np.int64(splitmix64(value ^ salt) & ID_MASK)


@numba.njit(nogil=True, cache=True, inline="always")
def mix(value, slot):
    """The id of a token value in sparse column ``slot``: non-negative, unrelated across slots."""
    return mix_salted(value, slot_salt(slot))


@numba.njit(nogil=True, cache=True, inline="always")
def fnv1a(buf, a, b):
    """FNV-1a 64 of ``buf[a:b]``."""
    h = FNV_OFFSET
    for i in range(a, b):
        h = (h ^ _U(buf[i])) * FNV_PRIME
    return h


@numba.njit(nogil=True, cache=True, inline="always")
def hex_value(buf, a, b):
    """(value, ok) of the hex digits ``buf[a:b]``; not ok for a non-hex byte or more than 16 digits."""
    if b - a > 16:
        return _U(0), False
    v = _U(0)
    for i in range(a, b):
        c = buf[i]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return _U(0), False
        v = v * _SIXTEEN + _U(d)
    return v, True


@numba.njit(nogil=True, cache=True, inline="always")
def int_value(buf, a, b):
    """(value, ok) of the decimal integer ``buf[a:b]`` as uint64; not ok for a non-digit or a value past 2**64-1."""
    neg = b > a and buf[a] == 45
    if neg:
        a += 1
    if b <= a:
        return _U(0), False
    v = _U(0)
    for i in range(a, b):
        d = buf[i] - 48
        if d < 0 or d > 9:
            return _U(0), False
        if v > (_U64MAX - _U(d)) // _TEN:
            return _U(0), False
        v = v * _TEN + _U(d)
    if neg:
        v = ~v + _ONE
    return v, True


@numba.njit(nogil=True, cache=True, inline="always")
def int64_token(buf, a, b):
    """(value, ok) of the decimal integer ``buf[a:b]``, its int64 bits as uint64; not ok outside int64's range.

    ``int_value`` reads every token from -(2**64-1) to 2**64-1 into uint64, negatives wrapped, so tokens meet: "-1"
    and "18446744073709551615" would be one id, "-18446744073709551615" and "1" another. Here a token's sign must
    be its value's, which leaves exactly int64's tokens."""
    v, ok = int_value(buf, a, b)
    return v, ok and (v == 0 or (v >= _INT64_MIN) == (buf[a] == 45))


@numba.njit(nogil=True, cache=True)
def mix_array(values, slot):
    """:func:`mix` of every uint64 in ``values``: the ids of parsed token values in column ``slot``."""
    out = np.empty(values.shape, np.int64)
    for i in range(values.size):
        out.flat[i] = mix(values.flat[i], slot)
    return out


def token_id(token, slot, kind="str"):
    """The id the readers give ``token`` (str or bytes) in sparse column ``slot``; ``None`` or "" is missing."""
    if not token:
        return missing_id(slot)
    buf = np.frombuffer(token.encode() if isinstance(token, str) else token, np.uint8)
    if kind == "str":
        value = fnv1a(buf, 0, buf.size)
    else:
        value, ok = (hex_value if kind == "hex" else int64_token)(buf, 0, buf.size)
        if not ok:
            raise ValueError(f"{token!r} is not a valid {kind} token")
    return int(mix(_U(value), slot))


def missing_id(slot):
    """The id that stands for an empty value in sparse column ``slot``."""
    return int(mix(MISSING, slot))


def rare_id(slot):
    """The id that every token under the frequency threshold becomes in sparse column ``slot``."""
    return int(mix(RARE, slot))
