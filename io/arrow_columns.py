"""One Arrow column of a record batch into what a Batch holds, with a reason code for each row it cannot take.

The Parquet reader's counterpart of :mod:`gpuemb.io.textparse`, and bound to give the same numbers: text is
parsed by the text reader's own numba functions (``parse_number``, ``fnv1a``, ``hex_value``, ``int64_token``), an
int column's value is hashed as the ``int`` kind hashes its digits (so a uint64 past int64's range is bad, as its
digits would be), labels pass textparse's ``label_code``, and the codes are textparse's, plus two that only typed
columns meet. Nothing here raises on a bad value: the reader reports the rows whose code is not OK.
"""
import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuemb.io.hashing import KIND_HEX, KIND_INT, KINDS, MISSING, fnv1a, hex_value, int64_token, missing_id, \
    mix_array, mix_salted, slot_salt
from gpuemb.io.textparse import BAD_HEX, BAD_INT, BAD_LABEL, BAD_NUMBER, BAD_RANGE, F32_MAX, OK, REASONS, \
    label_code, parse_number

NULL_LABEL, LONG_BAG = max(REASONS) + 1, max(REASONS) + 2
REASONS = {**REASONS, NULL_LABEL: "label is null", LONG_BAG: "more keys than max_bag"}
_EMPTY, _BAD = 1, 2  # what _text_numbers says of a value besides OK


@numba.njit(nogil=True, cache=True)
def _text_numbers(data, offsets, out, status):
    """Parse ``data[offsets[i]:offsets[i + 1]]`` as a number into ``out[i]``; ``status[i]``: OK, _EMPTY or _BAD."""
    for i in range(out.size):
        a, b = offsets[i], offsets[i + 1]
        if a == b:
            status[i] = _EMPTY
            continue
        v, ok = parse_number(data, a, b)
        out[i] = v
        status[i] = OK if ok else _BAD


@numba.njit(nogil=True, cache=True)
def _text_ids(data, offsets, kind, salt, out, reason):
    """The id of each token ``data[offsets[i]:offsets[i + 1]]``, as textparse gives a field of ``kind``."""
    for i in range(out.size):
        a, b = offsets[i], offsets[i + 1]
        if a == b:
            out[i] = mix_salted(MISSING, salt)
            continue
        if kind == KIND_HEX:
            v, ok = hex_value(data, a, b)
            reason[i] = OK if ok else BAD_HEX
        elif kind == KIND_INT:
            v, ok = int64_token(data, a, b)
            reason[i] = OK if ok else BAD_INT
        else:
            v = fnv1a(data, a, b)
        out[i] = mix_salted(v, salt)


@numba.njit(nogil=True, cache=True)
def _label_codes(values, soft, out):
    """``label_code`` of each of ``values`` into ``out``: the text reader's rule, not a second copy of it."""
    for i in range(values.size):
        out[i] = label_code(values[i], soft)


def _decoded(arr):
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _nulls(arr):
    return arr.is_null().to_numpy(zero_copy_only=False)


def _text_buffers(arr):
    """(bytes, offsets ``[n + 1]``) of a string or binary array, as NumPy views of its Arrow buffers."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offsets, data = arr.buffers()[:3]
    offsets = np.frombuffer(offsets, np.int64 if large else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    return (np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets


def _is_text(arr):
    t = arr.type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
        pa.types.is_large_binary(t)


def _numbers(arr):
    """(float64 values, missing, bad) of a numeric or text column: null, an empty string and NaN are missing."""
    arr = _decoded(arr)
    if _is_text(arr):
        values, status = np.zeros(len(arr)), np.zeros(len(arr), np.int8)
        _text_numbers(*_text_buffers(arr), values, status)
        return values, (status == _EMPTY) | _nulls(arr), status == _BAD
    values = pc.fill_null(pc.cast(arr, pa.float64(), safe=False), np.nan).to_numpy(zero_copy_only=False,
                                                                                      writable=True)
    return values, np.isnan(values), np.zeros(len(arr), bool)


def label_values(arr, soft=False):
    """(float32 labels, reason codes): a null label, one that is not a number, or one other than 0 or 1 (with
    ``soft``, outside [0, 1]) is bad, as a text label would be."""
    values, missing, bad = _numbers(arr)
    reason = np.zeros(len(values), np.int8)
    _label_codes(values, soft, reason)
    reason[np.abs(values) > F32_MAX] = BAD_RANGE
    reason[bad | missing] = BAD_LABEL
    reason[_nulls(arr)] = NULL_LABEL
    values[reason != OK] = 0.0  # the row is dropped; zero rather than a value float32 cannot hold
    return values.astype(np.float32), reason


def dense_values(arr, log1p):
    """(float32 values, reason codes): missing is 0 as an empty text field is; others ``log1p(max(x, 0))`` where
    ``log1p``, else ``x``."""
    values, missing, bad = _numbers(arr)
    values[missing] = 0.0
    reason = np.where(bad, BAD_NUMBER, np.where(np.abs(values) > F32_MAX, BAD_RANGE, OK)).astype(np.int8)
    values[reason != OK] = 0.0
    if log1p:
        values = np.log1p(np.maximum(values, 0.0))
    return values.astype(np.float32), reason


def token_ids(arr, slot, kind):
    """(int64 ids, reason codes) of a column of scalar tokens in sparse column ``slot``: a null is missing as an
    empty text field is; an int (or bool) column's values are hashed as the ``int`` kind hashes their digits,
    a text column's by ``kind``."""
    arr = _decoded(arr)
    salt = np.uint64(slot_salt(slot))  # numba returns it as a Python int, which it would read back as int64
    ids, reason = np.empty(len(arr), np.int64), np.zeros(len(arr), np.int8)
    if _is_text(arr):
        _text_ids(*_text_buffers(arr), KINDS.index(kind), salt, ids, reason)
    else:  # int64_token reads "-5" as the two's complement, as uint64 reads int64's bits
        wide = pa.uint64() if pa.types.is_unsigned_integer(arr.type) else pa.int64()
        values = pc.fill_null(pc.cast(arr, wide), 0).to_numpy(zero_copy_only=False).view(np.uint64)
        ids = mix_array(values, slot)
        if wide == pa.uint64():  # past int64's range: its digits would be a bad int token too
            reason[values >= np.uint64(1 << 63)] = BAD_INT
    ids[_nulls(arr)] = missing_id(slot)
    return ids, reason


def bag_ids(arr, slot, kind, max_bag=None):
    """(lengths ``[n]``, ids of all bags in row order, reason codes) of a list column in sparse column ``slot``.

    A null list is an empty bag; a null element is skipped (the bag is one key shorter), while an empty string
    is a token like any other (the missing id, as in a scalar column). A bag over ``max_bag`` keys, or with a
    token that ``kind`` cannot read, makes its row bad."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    items = pc.list_flatten(arr)
    rows = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
    null = _nulls(items)
    if null.any():
        lengths -= np.bincount(rows[null], minlength=len(arr))
        items, rows = items.filter(pa.array(~null)), rows[~null]
    ids, bad = token_ids(items, slot, kind)
    reason = np.zeros(len(arr), np.int8)
    reason[rows[bad != OK]] = bad[bad != OK]
    if max_bag is not None:
        reason[lengths > max_bag] = LONG_BAG
    return lengths, ids, reason
