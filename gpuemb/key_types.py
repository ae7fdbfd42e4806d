"""Keys are integers: the one check of the type of the keys given to a table, a collection or a Predictor.

A key is an id, and the store holds int64 ids. Cast to int64, float keys would be truncated without a word (1.5
and 1.0 one row, 1e30 a warning and some row), and bools or objects are no ids at all; so anything but an int or
uint dtype is refused. Only the dtype is read, never a value, so the check costs a device array no readback and
no launch. A uint64 key keeps its bits: 2**64-1 is the int64 key -1, as it always was.

It lives outside ``gpuemb.store`` because the inference runtime (``gpuemb.serve``) checks its keys with it and
must load without the training store.
"""
import numpy as np


class KeyTypeError(TypeError):
    """Keys that are not integers; the message says where they were given and what to do."""


def integer_keys(keys, where, error=KeyTypeError):
    """``keys`` as they are (an array: a list becomes a NumPy one), or ``error`` naming ``where`` when their dtype
    is not an integer one. An empty batch passes whatever its dtype (``[]`` is float64): it holds nothing to
    truncate."""
    if not hasattr(keys, "dtype"):
        keys = np.asarray(keys)
    if keys.dtype.kind not in "iu" and keys.size:
        raise error(f"{where}: keys of dtype {keys.dtype}; keys are integer ids, and a float would be truncated "
                    "(1.5 would read key 1's row), so cast them to int64 where they are made")
    return keys
