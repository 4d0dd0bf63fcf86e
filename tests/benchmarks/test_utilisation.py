"""benchmarks.utilisation: the host's busy share from two reads of /proc/stat, the GPUs' mean
utilisation from nvidia-smi's samples (by index or UUID), and the reasons when either is not read."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from benchmarks import utilisation as ut


def test_proc_stat_counts_idle_and_iowait_as_idle(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 20 300 40 1 2 3 50 7\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    busy, total = ut.read_proc_stat(str(stat))
    assert (busy, total) == (100 + 5 + 20 + 1 + 2 + 3, 100 + 5 + 20 + 300 + 40 + 1 + 2 + 3)  # guest is inside user


def test_proc_stat_that_is_not_the_all_cores_line_is_refused(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="all-cores line"):
        ut.read_proc_stat(str(stat))


def test_the_host_share_is_the_busy_ticks_between_the_two_reads() -> None:
    reads = iter([(1000, 4000), (1000 + 750, 4000 + 1000)])
    with ut.Sampler(cores=16, stat=lambda: next(reads)) as sampler:
        pass
    usage = sampler.result()
    assert usage.host_busy == pytest.approx(0.75)
    assert "75.0% busy (12.0 of 16 cores)" in usage.line() and "no GPU" in usage.line()


def test_an_unreadable_proc_stat_is_named() -> None:
    def broken() -> tuple[int, int]:
        raise OSError("no such file")

    with ut.Sampler(cores=2, stat=broken) as sampler:
        pass
    usage = sampler.result()
    assert usage.host_busy is None and "/proc/stat: no such file" in usage.line()


def _answers(*outputs: str) -> tuple[threading.Event, object]:
    """A query replaying `outputs` (the last one repeated), and an event set once all were given."""
    done = threading.Event()
    given = [0]

    def query() -> str:
        text = outputs[min(given[0], len(outputs) - 1)]
        given[0] += 1
        if given[0] >= len(outputs):
            done.set()
        return text

    return done, query


def test_gpu_means_per_named_gpu_by_index_or_uuid() -> None:
    done, query = _answers("0, GPU-aaa, 100\n1, GPU-bbb, 20\n", "0, GPU-aaa, 50\n1, GPU-bbb, 40\n")
    with ut.Sampler(["0", "GPU-bbb"], interval_s=0.01, stat=lambda: (0, 1), query=query) as sampler:  # type: ignore[arg-type]
        assert done.wait(5)
    usage = sampler.result()
    assert usage.gpu_samples >= 2
    # the first sample is 100 / 20, every later one 50 / 40
    n = usage.gpu_samples
    assert usage.gpu_busy["0"] == pytest.approx((100 + 50 * (n - 1)) / n)
    assert usage.gpu_busy["GPU-bbb"] == pytest.approx((20 + 40 * (n - 1)) / n)
    assert "GPU 0" in usage.line() and f"mean of {n} samples" in usage.line()


def test_a_failing_nvidia_smi_leaves_no_gpu_figure_and_says_why() -> None:
    def query() -> str:
        raise subprocess.CalledProcessError(9, ["nvidia-smi"], stderr="NVIDIA-SMI has failed")

    with ut.Sampler(["0"], interval_s=0.01, stat=lambda: (0, 1), query=query) as sampler:
        threading.Event().wait(0.1)
    usage = sampler.result()
    assert usage.gpu_busy == {} and "nvidia-smi failed" in usage.line()


def test_a_gpu_nvidia_smi_does_not_report_is_named() -> None:
    done, query = _answers("0, GPU-aaa, 10\n")
    with ut.Sampler(["3"], interval_s=0.01, stat=lambda: (0, 1), query=query) as sampler:  # type: ignore[arg-type]
        assert done.wait(5)
        threading.Event().wait(0.05)
    usage = sampler.result()
    assert usage.gpu_busy == {} and "no utilisation for GPU 3" in usage.line()


def test_unparsable_lines_are_left_out() -> None:
    assert ut.parse_nvidia_smi("0, GPU-a, [N/A]\nNo devices were found\n1, GPU-b, 7\n") == {"1": ("GPU-b", 7.0)}


def test_without_nvidia_smi_on_the_path_the_gpus_are_not_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with ut.Sampler(["0"], stat=lambda: (0, 1)) as sampler:
        pass
    assert "nvidia-smi is not on PATH" in sampler.result().line()
