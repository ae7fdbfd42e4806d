"""The steps since the last train record: their losses, their time, and what each paid the device for. The loop
fills it a step at a time (``measure``), and the train record empties it (``take``); it is the one owner of that
window, which a checkpoint keeps the losses of."""
import contextlib
import time

from gpuemb.autograd import launches, transfers


class StepWindow:
    """The window of a run whose steps are ``batch_size`` samples (this rank's)."""

    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.losses = []  # restored by a resume, so that the first record after it averages the same steps
        self._clear()

    def _clear(self):
        self.busy, self.crossings, self.launched = 0.0, [], []  # seconds in steps; each step's counts

    def __len__(self):
        return len(self.losses)

    @contextlib.contextmanager
    def measure(self):
        """Time one step and count its crossings (this thread's, all threads') and launches; the step's loss goes
        in with ``add``."""
        start = time.perf_counter()
        counted = transfers.COUNTS.snapshot(this_thread=True), transfers.COUNTS.snapshot()
        launched = launches.COUNTS.snapshot(this_thread=True)
        yield
        self.busy += time.perf_counter() - start
        self.crossings.append((transfers.COUNTS.since(counted[0], this_thread=True),
                               transfers.COUNTS.since(counted[1])))
        self.launched.append(launches.COUNTS.since(launched, this_thread=True))

    def add(self, loss):
        self.losses.append(loss)

    def take(self):
        """``(mean loss, samples/s over the timed steps, counts per step)``, and the window starts again.

        The counts: ``"transfers"``, the step's own host-device crossings, which stall it; ``"transfers_ahead"``,
        what the loader's and the prefetch's threads moved meanwhile, for the batches ahead
        (autograd/transfers.py); ``"launches"``, the step's own kernel launches and reads back, by phase
        (autograd/launches.py: all counted under the emulated device, the reads back only on a GPU, none on the
        CPU)."""
        loss = sum(self.losses) / len(self.losses)
        timed = len(self.crossings)
        rate = timed * self.batch_size / max(self.busy, 1e-9)
        steps, launched = self.crossings, self.launched
        self.losses = []
        self._clear()

        def mean(part):
            return {k: round(sum(part(c)[k] for c in steps) / max(len(steps), 1), 2) for k in transfers.FIELDS}
        counts = {"transfers": mean(lambda c: c[0]),
                  "transfers_ahead": mean(lambda c: {k: c[1][k] - c[0][k] for k in transfers.FIELDS}),
                  "launches": launches.per_step(launches.added(*launched), len(launched))}
        return loss, rate, counts
