"""How every single-op benchmark times a call: the median over repeats after a warm-up, with a sync after each.

Plain Python, with no gpuemb or torch import, so that a peer's process (``bench_ops_peer.py``) times its side as
gpuemb's process times ours without loading the other's threads.
"""
import statistics
import time


def median_seconds(fn, sync=lambda: None, warmup=2, budget=0.4, min_repeats=5, max_repeats=50, setup=None):
    """The median time of ``fn()`` after ``warmup`` calls, repeating until about ``budget`` seconds are spent.

    ``sync``: waits for the device's work (a GPU's), so that it is counted. ``setup``: called untimed before
    each call, its result passed to ``fn``: a backward timed alone needs a fresh forward before it."""
    def once():
        arg = (setup(),) if setup is not None else ()
        sync()
        start = time.perf_counter()
        fn(*arg)
        sync()
        return time.perf_counter() - start
    for _ in range(warmup):
        once()
    times = []
    while len(times) < min_repeats or (len(times) < max_repeats and sum(times) < budget):
        times.append(once())
    return statistics.median(times)
