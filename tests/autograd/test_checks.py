"""The shared value checks: an int is Python's or NumPy's but never a bool, and errors name their owner."""
import numpy as np
import pytest

from gpuemb.autograd.checks import check, check_int, fail, is_int


def test_an_int_is_not_a_bool_nor_a_float():
    assert is_int(3) and is_int(np.int32(3)) and is_int(-5)
    assert not is_int(True) and not is_int(3.0) and not is_int("3") and not is_int(None)
    assert is_int(2, low=2) and not is_int(1, low=2) and not is_int(np.int64(1), low=2)


def test_errors_name_the_owner_and_what_to_use():
    with pytest.raises(ValueError, match=r"^Thing: x=True; use an int >= 1 \(why\)$"):
        check_int("Thing", "x", True, 1, note=" (why)")
    with pytest.raises(ValueError, match=r"^Thing: x=0; use an int >= 1 or None$"):
        check_int("Thing", "x", 0, 1, allow_none=True)
    check_int("Thing", "x", None, 1, allow_none=True)
    check(True, "Thing", "not raised")
    with pytest.raises(ValueError, match=r"^Thing: bad$"):
        check(False, "Thing", "bad")
    with pytest.raises(ValueError, match=r"^f: bad$"):
        fail("f", "bad")
