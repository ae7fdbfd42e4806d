"""Run by test_overlap.py under ``mpiexec -n 2``: a sharded DLRM steps on an ``OverlappedCommunicator`` while rank 1
fails in its backward: it raises (``raise``), or hangs (``hang``) before its gradients' all-to-all. Rank 0 has
started that all-to-all during its backward and holds its row updates for it; the job must end non-zero, in one
line that says why, within the comm timeout. "passed" must never print."""
import sys
import time

from common import batch, dlrm, plan
from gpuemb import comm, optim
from gpuemb.autograd import Tensor, bce_with_logits
from gpuemb.comm import OverlappedCommunicator
from gpuemb.distributed import distribute

MODE, G = sys.argv[1], 8
c = OverlappedCommunicator(comm.init("mpi"))
model = dlrm()
allreduce = distribute(model, c, plan("table", 2))
opt = optim.Adagrad(model.parameters(), 0.05)
dense, sparse, y = (a[c.rank * G // 2:(c.rank + 1) * G // 2] for a in batch(1, 0, G))
loss = bce_with_logits(model(dense, sparse), Tensor(y))
if c.rank == 1:
    if MODE == "raise":
        raise RuntimeError("planted failure in the backward")
    time.sleep(120)
loss.backward(on_ready=allreduce.ready)
allreduce()
opt.step()
model.embeddings.settle()
print(f"rank {c.rank}: passed the step", flush=True)
