"""Single keys sent once a rank, owner and stream (``dedup``, distributed/routing.py), under ``mpiexec`` on 2 and 3
ranks (workers/dedup.py): skewed batches train like one process on the whole batch, and each step sends what a
loop over the distinct keys counts; the same on the emulated device, its NCCL included. Under ``same_bits``
(``--deterministic``) it is refused."""
import numpy as np
import pytest

from gpuemb import comm
from gpuemb.autograd import backend
from gpuemb.distributed import ShardedEmbeddingCollection

from .test_routing import CONFIGS, one_rank_plan


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_deduplicated_keys_train_like_one_process_and_send_each_distinct_key_once(ranks, rng, mpiexec):
    mpiexec(ranks, "dedup.py", rng.integers(1 << 30))


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="2 ranks on the emulated device; on a GPU, NCCL wants a GPU a rank")
def test_deduplicated_keys_on_the_emulated_device(rng, mpiexec):
    mpiexec(2, "dedup.py", rng.integers(1 << 30), "small", timeout_s=600, GPUEMB_DEVICE="emulated",
            NUMBA_ENABLE_CUDASIM="1")


def test_a_world_of_one_with_dedup_looks_up_like_without(rng):
    plan = one_rank_plan(["table", "row", "column", "data"])
    a = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), plan, dedup=True)
    b = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), plan)
    for _ in range(3):
        keys = rng.zipf(1.3, (16, 4)) % 30
        gy = rng.standard_normal((16, 4, CONFIGS[0].dim)).astype(np.float32)
        got, want = a(keys), b(keys)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-6)
        got.backward(gy)
        want.backward(gy)


def test_dedup_is_refused_where_a_step_must_be_the_same_bits_on_any_world_size(rng):
    a = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), one_rank_plan(["table"] * 4), dedup=True)
    a.same_bits = True
    with pytest.raises(ValueError, match="leave dedup off"):
        a(rng.integers(0, 30, (4, 4)))
