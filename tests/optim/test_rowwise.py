"""The fused row update against its reference (the rules' own update on gathered rows), on every backend."""
import numpy as np
import pytest

from gpuemb.autograd import backend

from gpuemb.autograd.backend import to_host
from gpuemb.kernels.embedding_bag import embedding_bag_backward
from gpuemb.optim import AdagradRule, AdamRule, FtrlRule, RowwiseAdagradRule, SGDRule
from gpuemb.optim.rowwise import apply_rows, apply_rows_ref, init_rows, row_layout, row_width
from gpuemb.optim.rowwise_kernels import apply_rows_cuda

RULES = {
    "sgd": SGDRule(),
    "sgd_wd": SGDRule(weight_decay=0.1),
    "momentum": SGDRule(momentum=0.9),
    "nesterov_wd": SGDRule(momentum=0.8, nesterov=True, weight_decay=0.05),
    "adagrad": AdagradRule(initial_accumulator_value=0.1),
    "adagrad_wd": AdagradRule(eps=1e-6, weight_decay=0.05),
    "rowwise_adagrad": RowwiseAdagradRule(initial_accumulator_value=0.1),
    "rowwise_adagrad_wd": RowwiseAdagradRule(eps=1e-6, weight_decay=0.05),
    "adam": AdamRule(),
    "adam_wd": AdamRule(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
    "adamw": AdamRule(weight_decay=0.1, decoupled=True),
    "ftrl": FtrlRule(l1=0.01, l2=0.1),
    "ftrl_wd": FtrlRule(l1=0.05, beta=0.5, lr_power=-0.6, weight_decay=0.05),
}
# One rule for each code path of the kernels, for the slow simulator.
CUDASIM_RULES = ["sgd", "nesterov_wd", "adagrad", "rowwise_adagrad_wd", "adam_wd", "adamw", "ftrl_wd"]
PAD = 2  # extra columns a store may keep after a row; the update must leave them alone
# float64 checks that the math is the same; float32 allows for the reference rounding each intermediate to
# float32 where the kernels keep float64 (measured over 10 seeds: at most 1.4e-6·(1 + |w|), FTRL's z and n).
TOL = {np.float64: 1e-12, np.float32: 3e-6}


def batches(rng, capacity, D, count=6, ids=96, dtype=np.float32):
    """``(unique slots, summed grads)`` per step from skewed IDs, so rows are touched different numbers of times.

    Low slots are hot; the top quarter of the table is never touched.
    """
    out = []
    for _ in range(count):
        slots = (0.75 * capacity * rng.random(ids) ** 3).astype(np.int64)
        out.append(embedding_bag_backward(rng.standard_normal((ids, D)).astype(dtype), slots))
    return out


def initial(rng, rule, capacity, D, dtype=np.float32):
    """Rows from random weights (plus PAD random columns) and zero step counts."""
    rows = init_rows(rule, rng.standard_normal((capacity, D)).astype(dtype))
    return np.concatenate([rows, rng.standard_normal((capacity, PAD)).astype(dtype)], 1), np.zeros(capacity, np.int32)


def run(update, storage, steps, data, rule, lr=0.05, xp=np):
    """``update`` applied for each batch of ``data`` on copies on ``xp``; returns host storage and steps."""
    storage, steps = xp.array(storage), None if steps is None else xp.array(steps)
    for slots, grads in data:
        update(storage, steps, xp.asarray(slots), xp.asarray(grads), rule, lr)
    return to_host(storage), None if steps is None else to_host(steps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", RULES)
def test_fused_update_matches_reference(xp, rng, name, dtype):
    rule, capacity, D = RULES[name], 64, 8
    storage, steps = initial(rng, rule, capacity, D, dtype)
    data = batches(rng, capacity, D, dtype=dtype)
    want, want_steps = run(apply_rows_ref, storage, steps, data, rule)
    got, got_steps = run(apply_rows, storage, steps, data, rule, xp=xp)

    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_array_equal(got_steps, want_steps)
    touched = np.unique(np.concatenate([s for s, _ in data]))
    assert len(np.unique(got_steps[touched])) >= 3, "rows should differ in their step counts"
    untouched = np.setdiff1d(np.arange(capacity), touched)
    assert untouched.size and np.array_equal(got[untouched], storage[untouched])
    assert not np.isclose(got[touched, :D], storage[touched, :D]).all(axis=1).any()
    np.testing.assert_array_equal(got[:, -PAD:], storage[:, -PAD:])


def test_rules_without_a_step_need_no_counter(rng):
    rule = RULES["nesterov_wd"]
    storage, steps = initial(rng, rule, 32, 4)
    data = batches(rng, 32, 4)
    np.testing.assert_allclose(run(apply_rows, storage, None, data, rule)[0],
                               run(apply_rows_ref, storage, None, data, rule)[0], rtol=TOL[np.float32],
                               atol=TOL[np.float32])


@pytest.mark.parametrize("name", ["rowwise_adagrad_wd", "adam_wd", "ftrl_wd"])
def test_same_data_gives_the_same_table_bit_for_bit(name):
    def once():
        rng = np.random.default_rng(7)
        storage, steps = initial(rng, RULES[name], 4096, 16)
        return run(apply_rows, storage, steps, batches(rng, 4096, 16, ids=3000), RULES[name])

    (a, a_steps), (b, b_steps) = once(), once()
    assert np.array_equal(a, b) and np.array_equal(a_steps, b_steps)


def test_row_layouts():
    widths = {"sgd": 8, "momentum": 16, "adagrad": 16, "rowwise_adagrad": 9, "adam": 24, "ftrl": 24}
    assert {name: row_width(RULES[name], 8) for name in widths} == widths
    assert row_layout(RULES["adam"], 8) == {"weights": slice(0, 8), "exp_avg": slice(8, 16),
                                            "exp_avg_sq": slice(16, 24)}
    assert row_layout(RULES["rowwise_adagrad"], 8) == {"weights": slice(0, 8), "sum": slice(8, 9)}


def test_init_rows_puts_weights_then_initial_state(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    rows = init_rows(AdagradRule(initial_accumulator_value=0.25), w)
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, np.concatenate([w, np.full((5, 3), 0.25, np.float32)], 1))
    np.testing.assert_array_equal(init_rows(RowwiseAdagradRule(0.5), w)[:, 3], np.full(5, 0.5, np.float32))
    np.testing.assert_array_equal(init_rows(FtrlRule(), w), np.concatenate([w, np.zeros((5, 6), np.float32)], 1))


def test_bad_arguments_are_refused(rng):
    rule = AdamRule()
    storage, steps = initial(rng, rule, 8, 4)
    slots, grads = np.array([1, 3]), rng.standard_normal((2, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="pass steps"):
        apply_rows(storage, None, slots, grads, rule, 0.1)
    with pytest.raises(ValueError, match="needs 12"):
        apply_rows(storage[:, :10], steps, slots, grads, rule, 0.1)
    with pytest.raises(ValueError, match="one float dtype"):
        apply_rows(storage, steps, slots, grads.astype(np.float64), rule, 0.1)
    with pytest.raises(ValueError, match="2 gradient rows"):
        apply_rows(storage, steps, slots[:1], grads, rule, 0.1)
    with pytest.raises(IndexError, match="outside the storage's 8 rows"):
        apply_rows(storage, steps, np.array([1, 8]), grads, rule, 0.1)
    with pytest.raises(TypeError, match="no fused row kernel"):
        apply_rows(storage, steps, slots, grads, type("MyAdam", (AdamRule,), {})(), 0.1)


@pytest.mark.cudasim
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CUDASIM_RULES)
def test_cuda_kernel_matches_reference(rng, name, dtype):
    rule, capacity, D = RULES[name], 128, 5
    storage, steps = initial(rng, rule, capacity, D, dtype)
    data = batches(rng, capacity, D, count=3, ids=250, dtype=dtype)
    assert all(s.size * D > 256 for s, _ in data)  # two blocks of (row, d) threads, so the grid index is tested
    steps = steps if rule.needs_step else None  # both kernel paths: with and without a step counter
    got, got_steps = run(apply_rows_cuda, storage, steps, data, rule)
    want, want_steps = run(apply_rows_ref, storage, steps, data, rule)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_array_equal(got_steps, want_steps)


@pytest.mark.real_gpu  # 64k rows of 64: what the simulator of the emulated device takes minutes per launch for
@pytest.mark.parametrize("name", ["momentum", "rowwise_adagrad_wd", "adam_wd", "ftrl_wd"])
def test_cuda_update_on_real_shapes(rng, name):
    cupy = backend.xp

    rule, capacity, D = RULES[name], 1 << 16, 64
    storage, steps = initial(rng, rule, capacity, D)
    data = batches(rng, capacity, D, count=5, ids=20000)
    want, want_steps = run(apply_rows_ref, storage, steps, data, rule)
    got, got_steps = run(apply_rows, storage, steps, data, rule, xp=cupy)
    again = run(apply_rows, storage, steps, data, rule, xp=cupy)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # the GPU may fuse multiply-adds
    np.testing.assert_array_equal(got_steps, want_steps)
    assert np.array_equal(got, again)
