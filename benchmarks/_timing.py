"""Timing shared by the benchmark scripts: medians of repeated runs."""

import statistics
import time


def median_seconds(fn, repeats):
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up run
    (which compiles on the tpu device)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
