"""Counting the torch ops of one call: aten ops by name (on a GPU about one kernel launch each)
and host synchronisations (ops that read device data back to the host). Used by the benchmarks
that count a call's cost (`python -m benchmarks per_call`, `campaign_stages --ops`) and by the tests
that hold the references' host reads."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that launch no device work: views, metadata and allocation without a fill
HOST_ONLY_OPS = frozenset(
    {"view", "slice", "alias", "squeeze", "select", "empty", "as_strided", "unsqueeze", "expand", "detach"}
    | {"_reshape_alias", "reshape", "t"}
)

SYNC_OPS = ("_local_scalar_dense", "tolist", "nonzero", "unique", "masked_select", "repeat_interleave", "equal", "is_nonzero")
#: the dispatched ops that read device values back one by one (a scalar read, nonzero's size)
SCALAR_READS = ("_local_scalar_dense", "nonzero", "item")


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (by overload packet name); with `key`, also by
    what key() names at each op (e.g. the stage a profiler is in): `by_key`; with `in_order`,
    also every op's name in dispatch order: `names`."""

    def __init__(self, key: Callable[[], str] | None = None, *, in_order: bool = False) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.by_key: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.names: list[str] = []
        self._key = key
        self._in_order = in_order

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if self._in_order:
            self.names.append(name)
        if self._key is not None:
            self.by_key[self._key()][name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def count(self, names: tuple[str, ...]) -> int:
        """How many of the dispatched ops were one of `names`."""
        return sum(self.ops[name] for name in names)

    @property
    def launched(self) -> dict[str, int]:
        """Ops outside HOST_ONLY_OPS (about one device launch each on a GPU) and how often each ran."""
        return {name: n for name, n in self.ops.items() if name not in HOST_ONLY_OPS}

    def launched_by_key(self) -> dict[str, Counter[str]]:
        """`by_key` less HOST_ONLY_OPS (keys with no launched op left out)."""
        out = {k: Counter({n: c for n, c in ops.items() if n not in HOST_ONLY_OPS}) for k, ops in self.by_key.items()}
        return {k: ops for k, ops in out.items() if ops}

    @property
    def syncs(self) -> dict[str, int]:
        """Ops among SYNC_OPS and how often each ran (repeat_interleave syncs only without output_size)."""
        return {name: n for name, n in self.ops.items() if any(name.startswith(s) for s in SYNC_OPS)}


def count_ops(fn: Callable[[], object]) -> OpCounter:
    """The ops of one call of fn; Tensor.tolist calls (a host sync that dispatches no scalar read
    on the CPU) are counted as the op "tolist"."""
    counter = OpCounter()
    original = torch.Tensor.tolist
    own = "tolist" in vars(torch.Tensor)  # else inherited (torch._C.TensorBase): put back by deleting the wrapper

    def tolist(self: torch.Tensor) -> Any:
        counter.ops["tolist"] += 1
        return original(self)

    torch.Tensor.tolist = tolist  # type: ignore[method-assign]
    try:
        with counter:
            fn()
    finally:
        if own:
            torch.Tensor.tolist = original  # type: ignore[method-assign]
        else:
            del torch.Tensor.tolist
    return counter
