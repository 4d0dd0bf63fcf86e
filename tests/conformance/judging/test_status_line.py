"""conformance.judging.progress.StatusLine and rate_text: rewritten in place on a terminal, one line
per interval elsewhere, closed quietly on a dead pipe; the rate text's parts."""

from __future__ import annotations

import io

import pytest

from conformance.judging import progress
from conformance.judging.progress import StatusLine, rate_text
from tests.conformance.judging.streams import ClosedPipe


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_rewritten_and_padded() -> None:
    stream = _Terminal()
    line = StatusLine(stream, every=60.0)
    assert line.tty and line.every == 0.2
    line.show("a long first status", force=True)
    line.show("short", force=True)
    line.done()
    assert stream.getvalue() == "\ra long first status" + "\r" + "short".ljust(len("a long first status")) + "\n"


def test_off_a_terminal_one_line_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    line = StatusLine(stream, every=10.0)
    line.show("first")
    clock[0] += 5.0
    line.show("too soon")
    line.show("forced", force=True)
    clock[0] += 10.0
    line.show("later")
    line.done()
    assert stream.getvalue() == "first\nforced\nlater\n"


def test_tty_can_be_forced_either_way() -> None:
    assert not StatusLine(_Terminal(), every=1.0, tty=False).tty
    assert StatusLine(io.StringIO(), every=1.0, tty=True).tty


def test_a_dead_pipe_closes_the_line_without_raising() -> None:
    pipe = ClosedPipe()
    line = StatusLine(pipe, every=0.0)  # type: ignore[arg-type]
    line.show("one", force=True)
    line.show("two", force=True)
    line.done()
    assert line.closed and pipe.writes == 1


def test_rate_text() -> None:
    text = rate_text("records", 500, 2000, "rows", 2.0, bytes_per_item=1 << 20)
    assert text == "records: 500/2,000 rows ( 25.0%)  250 rows/s  0.24 GiB/s  ETA 6 s"
    assert rate_text("scan", 10, 10, "entries", 1.0) == "scan: 10/10 entries (100.0%)  10 entries/s"
    assert rate_text("scan", 0, 0, "entries", 0.0) == "scan: 0/0 entries (100.0%)  0 entries/s"
