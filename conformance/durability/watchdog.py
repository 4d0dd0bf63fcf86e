"""A time limit on each kernel call: a hang becomes a failure with its recipe kept, never a stuck run.

`limit_call(timeout_s, on_hang)` guards a block (the kernel call and its device sync):

- soft limit, after `timeout_s` seconds (only in a process's main thread, where signals are
  delivered): SIGALRM interrupts the call with `KernelHung`. It is a BaseException, not an
  Exception, so Hypothesis does not shrink through further hangs and the kernel's own `except
  Exception` cannot swallow it;
- hard limit: a watchdog thread that sees the block still running `grace_s` seconds after the
  soft limit (a call stuck in native code, where no signal handler can run: a GPU hang in a
  device sync, a spinning C loop) calls `on_hang(elapsed_s)` (which marks the write-ahead record
  as hung) and then SIGKILLs this process. Under xdist the controller records the crash entry
  from the write-ahead file and starts a replacement worker; without xdist the next session does.
  `hard_only=True` skips the soft limit: in an xdist worker a hang always ends the worker, so the
  replacement starts from a clean device state.

A timeout of None or 0 disables the limit. Seconds are wall-clock seconds.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_GRACE_S = 10.0


class KernelHung(BaseException):
    """The kernel call did not return within the per-call time limit."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the kernel call hung: no return within {timeout_s:g} s (--call-timeout)")
        self.timeout_s = timeout_s


def _can_use_alarm() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextmanager
def limit_call(
    timeout_s: float | None,
    on_hang: Callable[[float], None] | None = None,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    hard_only: bool = False,
) -> Iterator[None]:
    """Run the block under the time limit described in the module docstring."""
    if not timeout_s or timeout_s <= 0:
        yield
        return
    done = threading.Event()
    started = time.monotonic()
    soft = not hard_only and _can_use_alarm()
    hard_after = timeout_s + (grace_s if soft else 0.0)

    def watchdog() -> None:
        if done.wait(hard_after):
            return
        if on_hang is not None:
            try:
                on_hang(time.monotonic() - started)
            except Exception:  # noqa: BLE001 - the kill must happen whatever the marker did
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watchdog, name="conformance-call-watchdog", daemon=True)
    previous = None
    if soft:

        def on_alarm(signum: int, frame: object) -> None:
            raise KernelHung(timeout_s)

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    thread.start()
    try:
        yield
    finally:
        done.set()
        if soft:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
