"""The numba core of every text reader: one block of whole lines in, label/dense/sparse arrays out.

A block is a uint8 buffer of complete lines. Lines are parsed in parallel (``prange``), each independently: split
on the delimiter, numbers parsed by hand (no Python objects per value), tokens turned into ids as
:mod:`gpuemb.io.hashing` says. A line that cannot be parsed gets a reason code and the byte range of the offending
field, from which :mod:`gpuemb.io.reader` writes its file:line report; the parser itself never raises.
"""
import numba
import numpy as np

from gpuemb.io.hashing import KIND_HEX, KIND_INT, MISSING, fnv1a, hex_value, int64_token, mix_salted, slot_salt

ROLE_CODES = {"ignore": 0, "label": 1, "dense": 2, "categorical": 3}
OK, BAD_FIELDS, BAD_NUMBER, BAD_HEX, BAD_INT, BAD_LABEL, BAD_RANGE, NOT_BINARY, NOT_SOFT = range(9)
REASONS = {BAD_FIELDS: "wrong field count", BAD_NUMBER: "dense value is not a number", BAD_HEX: "bad hex token",
           BAD_INT: "bad integer token (kind int takes int64s, -2**63 to 2**63-1; read others as kind str)",
           BAD_LABEL: "label is not a number", BAD_RANGE: "number is out of float32 range (|x| > 3.4e38)",
           NOT_BINARY: "label is not 0 or 1 (soft labels in [0, 1] need soft_labels=True)",
           NOT_SOFT: "label is outside [0, 1]"}
_POW10 = np.array([10.0 ** k for k in range(23)])
# Values are stored as float32: a larger one would be inf, which the model cannot learn from.
F32_MAX = float(np.finfo(np.float32).max)
# Digits past this many significant ones cannot change a double, so they only move the decimal point.
_MAX_SIGNIFICANT = 19


@numba.njit(nogil=True, cache=True, inline="always")
def parse_number(buf, a, b):
    """(value, ok) of a decimal number ``[-+]digits[.digits][e[-+]digits]`` in ``buf[a:b]``.

    The digits are gathered as an integer and scaled once by an exact power of ten, so ``260`` and ``260.0``
    give the same double, and so does any number with at most 15 significant digits and a short exponent. Only
    the first 19 significant digits are gathered, so ``1.000...`` with a million zeros is 1.0, not inf/inf, and
    a number a million digits long is +-inf (which the callers reject), parsed in one linear pass.
    """
    i, neg = a, False
    if i < b and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    m, digits, significant, exp10 = 0.0, 0, 0, 0
    while i < b and 48 <= buf[i] <= 57:
        if significant < _MAX_SIGNIFICANT:
            m = m * 10.0 + (buf[i] - 48)
            significant += m > 0.0
        else:
            exp10 += 1
        digits += 1
        i += 1
    if i < b and buf[i] == 46:
        i += 1
        while i < b and 48 <= buf[i] <= 57:
            if significant < _MAX_SIGNIFICANT:
                m = m * 10.0 + (buf[i] - 48)
                significant += m > 0.0
                exp10 -= 1
            digits += 1
            i += 1
    if digits == 0:
        return 0.0, False
    if i < b and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = i < b and buf[i] == 45
        if i < b and (buf[i] == 45 or buf[i] == 43):
            i += 1
        e, edigits = 0, 0
        while i < b and 48 <= buf[i] <= 57 and edigits < 5:
            e = e * 10 + (buf[i] - 48)
            edigits += 1
            i += 1
        if edigits == 0:
            return 0.0, False
        exp10 += -e if eneg else e
    if i != b:
        return 0.0, False
    if m == 0.0:
        return 0.0, True  # 0e99999 is 0, not 0 * inf
    # Scale by exact powers of ten, 22 at a time: 10.0 ** -317 alone underflows though m * 10 ** -317 need not.
    while exp10 < -22 and m != 0.0:
        m, exp10 = m / _POW10[22], exp10 + 22
    while exp10 > 22 and m != np.inf:
        m, exp10 = m * _POW10[22], exp10 - 22
    exp10 = min(max(exp10, -22), 22)  # where a loop stopped early m is 0 or inf, which further scaling keeps
    m = m / _POW10[-exp10] if exp10 < 0 else m * _POW10[exp10]
    return -m if neg else m, True


@numba.njit(nogil=True, cache=True, inline="always")
def label_code(v, soft):
    """OK for a label the log loss can learn from: 0 or 1, or with ``soft`` any value in [0, 1] (never NaN)."""
    if soft:
        return OK if 0.0 <= v <= 1.0 else NOT_SOFT
    return OK if v == 0.0 or v == 1.0 else NOT_BINARY


@numba.njit(nogil=True, cache=True, inline="always")
def _equals(buf, a, b, tok, t0, t1):
    if b - a != t1 - t0:
        return False
    for k in range(b - a):
        if buf[a + k] != tok[t0 + k]:
            return False
    return True


@numba.njit(nogil=True, cache=True, inline="always")
def _field(buf, a, b, i, role, kind, slot, salt, pos_tok, pos_off, log1p, soft, label, dense, sparse):
    """Parse field ``buf[a:b]`` of line ``i`` into its output; return a reason code (OK when it parsed)."""
    if role == 1:
        if pos_off[slot, 1] >= 0:  # a positive token: the label is 0 or 1 by construction
            label[i, slot] = 1.0 if _equals(buf, a, b, pos_tok, pos_off[slot, 0], pos_off[slot, 1]) else 0.0
            return OK
        v, ok = parse_number(buf, a, b)
        label[i, slot] = v
        return BAD_LABEL if not ok else BAD_RANGE if not abs(v) <= F32_MAX else label_code(v, soft)
    if role == 2:
        if a == b:
            dense[i, slot] = 0.0
            return OK
        v, ok = parse_number(buf, a, b)
        if not ok:
            return BAD_NUMBER
        if not abs(v) <= F32_MAX:
            return BAD_RANGE
        dense[i, slot] = np.log1p(max(v, 0.0)) if log1p else v
        return OK
    if role == 3:
        if a == b:
            sparse[i, slot] = mix_salted(MISSING, salt)
            return OK
        if kind == KIND_HEX:
            v, ok = hex_value(buf, a, b)
            if not ok:
                return BAD_HEX
        elif kind == KIND_INT:
            v, ok = int64_token(buf, a, b)
            if not ok:
                return BAD_INT
        else:
            v = fnv1a(buf, a, b)
        sparse[i, slot] = mix_salted(v, salt)
    return OK


@numba.njit(nogil=True, cache=True, parallel=True)
def parse_block(buf, starts, ends, delim, roles, kinds, slots, pos_tok, pos_off, log1p, soft,
                label, dense, sparse, reason, where):
    """Parse lines ``buf[starts[i]:ends[i]]`` into row i of label/dense/sparse.

    Per field f: ``roles[f]`` (ROLE_CODES), ``kinds[f]`` (hashing's KIND_*), ``slots[f]`` (its column in the output
    of its role). A label slot t whose ``pos_off[t, 1] >= 0`` is 1.0 where the field equals
    ``pos_tok[pos_off[t, 0]:pos_off[t, 1]]``, else it is parsed as a number, which must be 0 or 1 (with ``soft``,
    in [0, 1]). ``log1p``: dense values become ``log1p(max(x, 0))``.

    ``reason[i]`` (zeros on entry) gets a code (OK for a good line). Only for a bad line, ``where[i]`` gets the
    offending field's index and byte range, or for a wrong field count the count found. A trailing carriage return
    is dropped.
    """
    nf = roles.size
    salts = np.empty(nf, np.uint64)
    for f in range(nf):
        salts[f] = slot_salt(slots[f])
    for i in numba.prange(starts.size):
        a, e = starts[i], ends[i]
        if e > a and buf[e - 1] == 13:
            e -= 1
        f = 0
        while True:
            b = a
            while b < e and buf[b] != delim:
                b += 1
            if f < nf and reason[i] == OK:
                r = _field(buf, a, b, i, roles[f], kinds[f], slots[f], salts[f], pos_tok, pos_off, log1p, soft,
                           label, dense, sparse)
                if r != OK:
                    reason[i] = r
                    where[i, 0], where[i, 1], where[i, 2] = f, a, b
            f += 1
            if b >= e:
                break
            a = b + 1
        if f != nf:
            reason[i] = BAD_FIELDS
            where[i, 0] = f
