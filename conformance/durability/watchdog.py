"""A time limit on each kernel call: a hang becomes a failure with its recipe kept, never a stuck run.

`limit_call(timeout_s, on_hang)` guards a block (the kernel call and its device sync):

- soft limit, after `timeout_s` seconds (only in a process's main thread, where signals are
  delivered): SIGALRM interrupts the call with `KernelHung`. It is a BaseException, not an
  Exception, so Hypothesis does not shrink through further hangs and the kernel's own `except
  Exception` cannot swallow it;
- hard limit: the process's watchdog thread, which sees the block still running `grace_s` seconds
  after the soft limit (a call stuck in native code, where no signal handler can run: a GPU hang
  in a device sync, a spinning C loop), calls `on_hang(elapsed_s)` (which marks the write-ahead
  record as hung) and then SIGKILLs this process. Under xdist the controller records the crash
  entry from the write-ahead file and starts a replacement worker; without xdist the next session
  does. One watchdog thread serves every call of the process (started at the first limited call,
  again in a forked child): arming and disarming a call takes a lock and wakes no thread unless
  the new call's deadline comes before the one the thread is waiting for.
  `hard_only=True` skips the soft limit: in an xdist worker a hang always ends the worker, so the
  replacement starts from a clean device state.

A timeout of None or 0 disables the limit. Seconds are wall-clock seconds.
"""

from __future__ import annotations

import itertools
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
        super().__init__(f"the kernel call hung: no return within {timeout_s:g} s (--conformance-call-timeout)")
        self.timeout_s = timeout_s


def _can_use_alarm() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


class _Watchdog:
    """The process's watchdog thread and the calls it guards: token -> (deadline, on_hang, started),
    monotonic seconds. The thread sleeps until the earliest deadline (or until notified); a call
    still armed at its deadline is a hard hang."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Callable[[float], None] | None, float]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # when the thread's current wait ends; None: no limit or not waiting

    def arm(self, deadline: float, on_hang: Callable[[float], None] | None, started: float) -> int:
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = (deadline, on_hang, started)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="conformance-call-watchdog", daemon=True)
                self._thread.start()
            elif self._wake_at is None or deadline < self._wake_at:
                self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)  # the thread wakes at its planned time, finds nothing due and sleeps on

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = [entry for entry in self._armed.values() if entry[0] <= now]
                if due:
                    break
                self._wake_at = min((entry[0] for entry in self._armed.values()), default=None)
                self._cond.wait(None if self._wake_at is None else self._wake_at - now)
                self._wake_at = None
        _deadline, on_hang, started = due[0]
        if on_hang is not None:
            try:
                on_hang(time.monotonic() - started)
            except Exception:  # noqa: BLE001 - the kill must happen whatever the marker did
                pass
        os.kill(os.getpid(), signal.SIGKILL)


_WATCHDOG = _Watchdog()


def _after_fork() -> None:
    global _WATCHDOG
    _WATCHDOG = _Watchdog()  # the parent's thread and lock do not exist in the child


os.register_at_fork(after_in_child=_after_fork)


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
    started = time.monotonic()
    soft = not hard_only and _can_use_alarm()
    hard_after = timeout_s + (grace_s if soft else 0.0)
    previous = None
    if soft:

        def on_alarm(signum: int, frame: object) -> None:
            raise KernelHung(timeout_s)

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    watchdog = _WATCHDOG
    token = watchdog.arm(started + hard_after, on_hang, started)
    try:
        yield
    finally:
        watchdog.disarm(token)
        if soft:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
