"""xdist workers share the cores out as torch threads (conformance.suite.threads)."""

from __future__ import annotations

import torch

from conformance.suite import threads


def test_worker_threads_share_the_cores() -> None:
    assert threads.worker_threads(2, 2) == 1
    assert threads.worker_threads(16, 4) == 4
    assert threads.worker_threads(16, 3) == 5
    assert threads.worker_threads(2, 8) == 1  # never 0
    assert threads.worker_threads(8, 0) == 8


def test_only_a_worker_without_a_user_choice_is_changed() -> None:
    before = torch.get_num_threads()
    try:
        assert threads.share_cores_among_workers({}) is None  # not an xdist worker
        assert threads.share_cores_among_workers({"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "3"}) is None
        assert threads.share_cores_among_workers({"PYTEST_XDIST_WORKER_COUNT": "x"}) is None
        got = threads.share_cores_among_workers({"PYTEST_XDIST_WORKER_COUNT": str(4 * threads.cores())})
        assert got == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
