import numpy as np
import pytest
from numba import cuda

from gpuemb.autograd.launch import blocks_for
from gpuemb.kernels.philox import philox4x32_10, philox4x32_10_cpu, philox4x32_10_device, random_bits_ref

# Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
@pytest.mark.parametrize("philox", [philox4x32_10, philox4x32_10_cpu], ids=["python", "numba"])
def test_known_answers(philox, counter, key, expected):
    assert tuple(int(w) for w in philox(*counter, *key)) == expected


def test_python_on_arrays_matches_numba_on_scalars(rng):
    c = rng.integers(0, 2 ** 32, (4, 50), dtype=np.uint64)
    k = rng.integers(0, 2 ** 32, 2, dtype=np.uint64)
    vectorized = np.stack(philox4x32_10(*c, *k))
    scalar = np.array([philox4x32_10_cpu(*c[:, j], *k) for j in range(50)]).T
    np.testing.assert_array_equal(vectorized, scalar)


def test_stream_takes_lane_i_mod_4_of_counter_i_div_4():
    seed, step = 0x1234_5678_9ABC_DEF0, 2 ** 33 + 7
    index = np.array([0, 1, 2, 3, 4, 4 * 2 ** 32 + 1, 2 ** 40 + 2])  # the last two use the counter's high word
    got = random_bits_ref(seed, step, index)
    for i, g in zip(index.tolist(), got):
        q = i // 4
        words = philox4x32_10_cpu(q & 0xFFFFFFFF, q >> 32, step & 0xFFFFFFFF, step >> 32,
                                  seed & 0xFFFFFFFF, seed >> 32)
        assert int(g) == int(words[i % 4])


def test_stream_depends_on_seed_and_step():
    index = np.arange(4096)
    base = random_bits_ref(1, 0, index)
    assert (base != random_bits_ref(2, 0, index)).mean() > 0.99
    assert (base != random_bits_ref(1, 1, index)).mean() > 0.99
    np.testing.assert_array_equal(base, random_bits_ref(1, 0, index))


def test_draws_look_uniform():
    u = random_bits_ref(7, 3, np.arange(200_000)) / 2.0 ** 32
    # The mean of n uniforms has standard deviation sqrt(1/12n), about 0.00065 here: allow 5 of them.
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    assert np.all(np.abs(np.histogram(u, bins=16, range=(0, 1))[0] / u.size - 1 / 16) < 0.003)


def test_seed_outside_64_bits_is_refused():
    with pytest.raises(ValueError, match="64-bit"):
        random_bits_ref(-1, 0, np.arange(3))


@cuda.jit
def _philox_kernel(counters, key, out):
    j = cuda.grid(1)
    if j < counters.shape[1]:
        w0, w1, w2, w3 = philox4x32_10_device(counters[0, j], counters[1, j], counters[2, j], counters[3, j],
                                              key[0], key[1])
        out[0, j] = w0
        out[1, j] = w1
        out[2, j] = w2
        out[3, j] = w3


@pytest.mark.cudasim
def test_device_draws_the_same_bits_as_the_cpu(rng):
    counters = np.concatenate([np.array([c for c, _, _ in KAT], dtype=np.uint64).T,
                               rng.integers(0, 2 ** 32, (4, 37), dtype=np.uint64)], axis=1)
    key = np.array([0xA4093822, 0x299F31D0], dtype=np.uint64)
    out = np.zeros(counters.shape, dtype=np.uint64)
    _philox_kernel[blocks_for(counters.shape[1], 32), 32](counters, key, out)
    cpu = np.array([philox4x32_10_cpu(*counters[:, j], *key) for j in range(counters.shape[1])]).T
    np.testing.assert_array_equal(out, cpu)
    assert tuple(out[:, 2]) == KAT[2][2]  # same counter and key as the third known answer
