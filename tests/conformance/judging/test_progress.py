"""conformance.judging.progress: run_kernel ticks once per kernel call; the listener sees calls and seconds."""

from __future__ import annotations

from conformance.judging import progress
from conformance.judging.harness import run_kernel
from conformance.judging.target import build_target
from strategies.materialize import materialize
from tests.conformance.judging.streams import ClosedPipe
from tests.recipes import TINY


def test_each_kernel_call_ticks_the_listener() -> None:
    seen: list[tuple[int, float]] = []
    progress.reset()
    progress.listen(lambda calls, seconds: seen.append((calls, seconds)))
    try:
        problem = materialize(TINY)
        backend = build_target("emulated", device="cpu").backend
        for _ in range(2):
            run_kernel(problem, backend, property_name="t", kernel_name="emulated")
    finally:
        progress.listen(None)
    assert [calls for calls, _ in seen] == [1, 2] and all(seconds >= 0 for _, seconds in seen)
    progress.tick()  # no listener: nothing happens


def test_a_listener_on_a_closed_pipe_never_fails_the_judged_call() -> None:
    """The suite's progress line written to a closed stderr must not raise inside run_kernel (the
    differential check would report a contract violation of a correct kernel, "a valid call raised
    BrokenPipeError"): the failing listener is dropped and the call is judged as usual."""
    from conformance.judging.checks import differential

    pipe = ClosedPipe()

    def listener(calls: int, seconds: float) -> None:
        pipe.write(f"{calls} kernel calls in {seconds:.0f} s\n")

    progress.reset()
    progress.listen(listener)
    try:
        verdicts = differential(build_target("emulated", device="cpu"), TINY, use_target=False)
        assert all(v.ok for v in verdicts) and pipe.writes == 1
        progress.tick()  # the listener is gone: no second write
        assert pipe.writes == 1
    finally:
        progress.listen(None)


def test_the_fuzz_progress_line_on_a_closed_pipe_closes_quietly() -> None:
    """`fuzz ... 2>&1 | head -1`: the first status line after head exits used to raise inside
    the Hypothesis example (the campaign stopped at once with a FlakyFailure, exit 2)."""
    from conformance.campaign.fuzz import ProgressLine

    pipe = ClosedPipe()
    line = ProgressLine(pipe, every=0.0)  # type: ignore[arg-type]
    line.show("fuzz 1/2 s", force=True)
    line.show("fuzz 2/2 s", force=True)
    line.done()
    assert line.closed and pipe.writes == 1


def test_a_result_printed_into_a_closed_pipe_keeps_the_exit_code() -> None:
    """`python -m conformance fuzz ... | head -1` returned 0 whatever the campaign found: the
    summary's BrokenPipeError reached main's handler (exit 0). print_result keeps the code."""
    import subprocess
    import sys

    code = "import sys; from conformance.cli import print_result; print_result('x' * 200000); sys.exit(3)"
    run = subprocess.run(
        f'{sys.executable} -c "{code}" | head -c 1 >/dev/null; exit ${{PIPESTATUS[0]}}',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 3 and "Traceback" not in run.stderr and "BrokenPipe" not in run.stderr, run.stderr
