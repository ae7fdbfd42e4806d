"""Row-wise tables of pooled bags send each owner only the sub-bags it holds keys of: under ``mpiexec`` (2 and 3
ranks, workers/row_bags.py), every pooling against one process on the global batch, with empty bags and bags
whose keys all live on one owner, and the bytes of each tag against the cost model; and the same exchange on the
emulated device, its NCCL included."""
import pytest

from gpuemb.autograd import backend


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_row_wise_bags_train_like_one_process_and_send_what_the_cost_model_counts(ranks, rng, mpiexec):
    mpiexec(ranks, "row_bags.py", rng.integers(1 << 30))


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="2 ranks on the emulated device; on a GPU, NCCL wants a GPU a rank")
def test_row_wise_bags_on_the_emulated_device(rng, mpiexec):
    mpiexec(2, "row_bags.py", rng.integers(1 << 30), "small", timeout_s=600, GPUEMB_DEVICE="emulated",
            NUMBA_ENABLE_CUDASIM="1")
