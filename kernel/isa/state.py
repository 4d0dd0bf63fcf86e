"""Machine state of one workgroup: per-wave registers, the workgroup's LDS with its shadow
(who wrote each byte, in which barrier epoch, which DMA is still in flight), and global memory
as a table of registered host buffers (torch tensors' storages).

Units: addresses and sizes in bytes; lane vectors are numpy arrays of 64 entries.
Register definedness is tracked per VGPR lane and byte (4 bits per dword) and per SGPR, so
the checker can report a read before any write without false alarms on partial writes.
"""

from __future__ import annotations

from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from kernel.isa.consts import K
from kernel.isa.errors import CheckFailed, Finding

LANES = 64
SGPR_FILE = 128  # s0..s101 + flat_scratch 102-103 + xnack 104-105 + vcc 106-107 + ... + m0 124 + exec 126-127
VCC = 106
EXEC = 126
M0 = 124
LANE_IDS = np.arange(LANES, dtype=np.int64)
_LANE_SHIFTS = np.arange(LANES, dtype=np.uint64)
ALL_LANES = np.ones(LANES, dtype=bool)
ALL_LANES.setflags(write=False)
# run_workgroup runs every instruction under np.errstate(all="ignore") (IEEE specials are values
# there); the semantics use this no-op context where they would otherwise enter their own.
QUIET = nullcontext()
_SPANS: dict[int, np.ndarray] = {}


_NONE: dict[int, np.ndarray] = {}


def no_lanes(n: int) -> np.ndarray:
    """bool[n] of False (cached; read-only): 'no lane' results of the fast paths."""
    a = _NONE.get(n)
    if a is None:
        a = _NONE[n] = np.zeros(n, dtype=bool)
        a.setflags(write=False)
    return a


def byte_span(n: int) -> np.ndarray:
    """arange(n) as int64 (cached; read-only)."""
    a = _SPANS.get(n)
    if a is None:
        a = _SPANS[n] = np.arange(n, dtype=np.int64)
        a.setflags(write=False)
    return a  # shared by every wave whose EXEC is all ones: never written in place


class Checks:
    """Checker configuration and sink: mode 'raise' (stop at the first finding), 'collect'
    (keep them in .findings, at most `limit` per kind), or 'off'."""

    def __init__(self, mode: str = "raise", limit: int = 50) -> None:
        if mode not in ("raise", "collect", "off"):
            raise ValueError(f"checks mode must be raise, collect or off, not {mode!r}")
        self.mode = mode
        self.limit = limit
        self.findings: list[Finding] = []
        self.counts: dict[str, int] = {}

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def report(self, finding: Finding) -> None:
        if self.mode == "off":
            return
        if self.mode == "raise":
            raise CheckFailed(finding)
        n = self.counts.get(finding.kind, 0)
        self.counts[finding.kind] = n + 1
        if n < self.limit:
            self.findings.append(finding)


@dataclass
class Region:
    start: int
    end: int
    data: np.ndarray  # uint8 view of the buffer (shares memory)
    name: str
    _rows: dict[int, np.ndarray] = field(default_factory=dict)

    def rows(self, size: int) -> np.ndarray:
        """The data as [len // size, size // 4] uint32 rows (a view; size 4, 8 or 16)."""
        v = self._rows.get(size)
        if v is None:
            n = self.data.size // size * size
            v = self._rows[size] = self.data[:n].view(np.uint32).reshape(-1, size // 4)
        return v


class GlobalMemory:
    """64-bit global address space = the registered buffers; any other address is an error."""

    def __init__(self) -> None:
        self.regions: list[Region] = []
        self._sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # starts, ends, region index

    def add_tensor(self, t: torch.Tensor, name: str) -> None:
        """Register a CPU tensor's whole storage (strided views included)."""
        if t.device.type != "cpu":
            raise ValueError(f"{name}: the interpreter reads CPU tensors only, got {t.device}")
        st = t.untyped_storage()
        if st.nbytes() == 0:
            return
        flat = torch.empty(0, dtype=torch.uint8).set_(st, 0, (st.nbytes(),), (1,))
        self.add_array(st.data_ptr(), flat.numpy(), name)

    def add_array(self, address: int, data: np.ndarray, name: str) -> None:
        data = data.view(np.uint8).reshape(-1)
        start = int(address)
        end = start + data.size
        for r in self.regions:
            if start < r.end and r.start < end:
                if r.start == start and r.end == end:
                    return  # the same storage registered twice (e.g. out and its staging alias)
                raise ValueError(f"buffer {name} [{start:#x}, {end:#x}) overlaps {r.name} [{r.start:#x}, {r.end:#x})")
        self.regions.append(Region(start, end, data, name))

    def _region_of(self, lo: int, hi: int) -> Region | None:
        """The region holding all of [lo, hi), if one does."""
        for r in self.regions:
            if r.start <= lo and hi <= r.end:
                return r
        return None

    def _span(self, addr: np.ndarray, size: int, sel: np.ndarray) -> tuple[Region | None, np.ndarray]:
        """Fast path: the one region holding every selected lane's [addr, addr + size) and those
        lanes' byte offsets in it; (None, empty) when the lanes do not share one region."""
        a = addr[sel]
        r = self._region_of(int(a.min()), int(a.max()) + size)
        if r is None:
            return None, a
        return r, (a - np.uint64(r.start)).astype(np.int64)

    def locate(self, addr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(region index per lane, -1 when [addr, addr + size) is not inside one region; byte
        offset inside it)."""
        addr = addr.astype(np.uint64)
        if self._sorted is None or len(self._sorted[0]) != len(self.regions):
            order = sorted(range(len(self.regions)), key=lambda i: self.regions[i].start)
            starts = np.array([self.regions[i].start for i in order], dtype=np.uint64)
            ends = np.array([self.regions[i].end for i in order], dtype=np.uint64)
            self._sorted = (starts, ends, np.array(order, dtype=np.int64))
        starts, ends, order = self._sorted
        if not starts.size:
            return np.full(addr.shape, -1, dtype=np.int64), np.zeros(addr.shape, dtype=np.int64)
        pos = np.searchsorted(starts, addr, side="right") - 1  # the last region starting at or below
        p = np.maximum(pos, 0)
        end = ends[p]
        # regions do not overlap: only that one can hold [addr, addr + size) (no wrap-around)
        inside = (pos >= 0) & (addr < end) & (end - np.minimum(addr, end) >= np.uint64(size))
        idx = np.where(inside, order[p], -1)
        off = np.where(inside, (addr - starts[p]).astype(np.int64), 0)
        return idx, off

    def read_all(self, addr: np.ndarray, size: int) -> np.ndarray | None:
        """Fast path of read() for every lane of a lane vector (or of several waves' lanes,
        flattened): bytes [n, size] when every lane's [addr, addr + size) lies in the region of
        the first lane's, else None (use read())."""
        a = addr.astype(np.uint64, copy=False)
        a0 = int(a[0])
        r = self._region_of(a0, a0 + size)
        if r is None:
            return None
        sh = a.shape
        off = a - K(r.start, np.uint64, sh)  # wraps to huge below the start
        if np.count_nonzero(off > K(r.end - r.start - size, np.uint64, sh)):
            return None
        if size in (4, 8, 16) and not np.count_nonzero(off & K(size - 1, np.uint64, sh)):  # aligned: gather rows
            return r.rows(size)[(off >> K(size.bit_length() - 1, np.uint64, sh)).astype(np.intp)].view(np.uint8)
        return r.data[off.astype(np.intp)[:, None] + byte_span(size)]

    def read_lanes(self, addr: np.ndarray, size: int) -> np.ndarray | None:
        """Bytes [n, size] at addr (uint64 [n], every lane active) when each lane's bytes lie
        inside some registered buffer (any mix of buffers), else None: the bytes read() gives
        every lane of an all-active lane vector."""
        b = self.read_all(addr, size)
        if b is not None:
            return b
        idx, off = self.locate(addr, size)
        if np.count_nonzero(idx < 0):
            return None
        rows = size in (4, 8, 16) and not np.count_nonzero(off & (size - 1))  # aligned: uint32 rows
        out = np.empty((addr.shape[0], size // 4 if rows else size), dtype=np.uint32 if rows else np.uint8)
        for i in np.unique(idx).tolist():
            sel = np.flatnonzero(idx == i)
            r = self.regions[i]
            if rows:
                out[sel] = r.rows(size)[off[sel] >> (size.bit_length() - 1)]
            else:
                out[sel] = r.data[off[sel][:, None] + byte_span(size)]
        return out.view(np.uint8) if rows else out

    def read(self, addr: np.ndarray, size: int, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes [n, size] at addr for the lanes set in `lanes` (others 0), and the lanes whose
        access fell outside every buffer."""
        if lanes is ALL_LANES:
            b = self.read_all(addr, size)
            if b is not None:
                return b, no_lanes(addr.shape[0])
        out = np.zeros((addr.shape[0], size), dtype=np.uint8)
        sel = np.flatnonzero(lanes)
        if sel.size == 0:
            return out, no_lanes(addr.shape[0])
        addr = addr.astype(np.uint64, copy=False)
        r, off = self._span(addr, size, sel)
        if r is not None:
            out[sel] = r.data[off[:, None] + byte_span(size)]
            return out, no_lanes(addr.shape[0])
        idx, off = self.locate(addr, size)
        bad = lanes & (idx < 0)
        span = byte_span(size)
        for i in np.unique(idx[lanes & (idx >= 0)]):
            sel = lanes & (idx == i)
            out[sel] = self.regions[i].data[off[sel][:, None] + span]
        return out, bad

    def plan_write(self, addr: np.ndarray, size: int) -> tuple[Region, np.ndarray] | None:
        """(region, byte indices [n * size]) for writing `size` bytes at every lane of addr
        (uint64 [n], all active) at once: when one region holds every lane's bytes and no two
        lanes share a byte (so the order of the lanes' writes is moot), else None."""
        lo, hi = int(addr.min()), int(addr.max()) + size
        r = self._region_of(lo, hi)
        if r is None:
            return None
        off = (addr - np.uint64(r.start)).astype(np.int64)
        srt = np.sort(off)
        if srt.size > 1 and np.count_nonzero(srt[1:] - srt[:-1] < size):
            return None
        return r, (off[:, None] + byte_span(size)).reshape(-1)

    def write(self, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """Write data [n, size] for the selected lanes (in lane order: where two lanes' bytes
        coincide, the higher lane's win); return the lanes outside."""
        size = data.shape[1]
        sel = np.flatnonzero(lanes)
        if sel.size == 0:
            return no_lanes(addr.shape[0])
        addr = addr.astype(np.uint64, copy=False)
        r, off = self._span(addr, size, sel)
        if r is not None:
            srt = np.sort(off)
            if sel.size == 1 or (srt[1:] - srt[:-1] >= size).all():  # no two lanes share a byte: order is moot
                r.data[(off[:, None] + byte_span(size)).reshape(-1)] = data[sel].reshape(-1)
                return no_lanes(addr.shape[0])
        idx, off = self.locate(addr, size)
        bad = lanes & (idx < 0)
        span = np.arange(size, dtype=np.int64)
        for lane in np.nonzero(lanes & (idx >= 0))[0]:
            r = self.regions[idx[lane]]
            r.data[off[lane] + span] = data[lane]
        return bad

    def read_scalar(self, address: int, size: int) -> bytes | None:
        for r in self.regions:
            if r.start <= address and address + size <= r.end:
                o = address - r.start
                return r.data[o : o + size].tobytes()
        return None


@dataclass
class PendingOp:
    """A VMEM instruction still counted by vmcnt: its LDS DMA bytes (if any) and its VGPR
    destinations (register index range) for the checkers."""

    token: int
    lds_bytes: np.ndarray | slice | None  # LDS byte indices (or a slice) of a DMA
    vgprs: tuple[int, int] | None
    pc: int
    sgprs: tuple[int, int] | None = None
    smem: bool = False  # SMEM returns out of order: only lgkmcnt(0) is sure to cover it


class Wave:
    """Registers and counters of one wave."""

    def __init__(self, wid: int, n_vgpr: int, v: np.ndarray | None = None, vdef: np.ndarray | None = None) -> None:
        """`v` / `vdef`, when given, are this wave's [n_vgpr, 64] rows of a launch's stacked
        register files (views: the lockstep scheduler reads them across waves)."""
        self.wid = wid
        self.v = np.zeros((n_vgpr, LANES), dtype=np.uint32) if v is None else v
        self.vdef = np.zeros((n_vgpr, LANES), dtype=np.uint8) if vdef is None else vdef  # defined bytes, bit b = byte b
        self.vpend = [0] * n_vgpr  # token of an outstanding load into it, 0 none
        self.vfull = [False] * n_vgpr  # cache: every byte of every lane defined (fast check path)
        self.s = [0] * SGPR_FILE
        self.sdef = [False] * SGPR_FILE
        self.scc = 0
        self.scc_def = False
        self.exec = ALL_LANES
        self.exec_all = True  # cache: EXEC is all ones
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.vm: deque[PendingOp] = deque()
        self.lgkm: deque[PendingOp] = deque()  # LDS (in order) and SMEM operations
        self.spend = [0] * SGPR_FILE  # token of an outstanding SMEM load into the SGPR, 0 none
        self.executed = 0
        self.x = None  # the executor of the wave's workgroup (set by the scheduler)
        self.batch = None  # the lockstep batch running the wave, told when EXEC changes

    # ---- scalar registers
    def set_exec_from_sgprs(self) -> None:
        val = self.s[EXEC] | (self.s[EXEC + 1] << 32)
        self.exec_all = val == 0xFFFFFFFFFFFFFFFF
        self.exec = ALL_LANES if self.exec_all else int_to_mask(val)
        if self.batch is not None:
            self.batch.exec_dirty = True

    def exec_value(self) -> int:
        return self.s[EXEC] | (self.s[EXEC + 1] << 32)


def mask_to_int(mask: np.ndarray) -> int:
    """bool[64] -> 64-bit integer, bit i = lane i."""
    return int(np.packbits(mask.view(np.uint8), bitorder="little").view(np.uint64)[0])


_MASKS: dict[int, np.ndarray] = {}


def int_to_mask(val: int) -> np.ndarray:
    """64-bit integer -> bool[64], lane i = bit i (shared and read-only: never write into it)."""
    val &= 0xFFFFFFFFFFFFFFFF
    m = _MASKS.get(val)
    if m is None:
        m = ((np.uint64(val) >> _LANE_SHIFTS) & np.uint64(1)).astype(bool)
        m.setflags(write=False)
        if len(_MASKS) < 4096:
            _MASKS[val] = m
    return m


class StackedLds:
    """The LDS and its shadow of G workgroups run together, stacked ([G, size] arrays; slot g
    is workgroup g's), so that batched LDS reads gather across workgroups at once."""

    def __init__(self, groups: int, lds_bytes: int) -> None:
        n = max(lds_bytes, 0)
        self.size = n
        self.lds = np.zeros((groups, n), dtype=np.uint8)
        self.writer = np.full((groups, n), -1, dtype=np.int8)
        self.epoch = np.full((groups, n), -1, dtype=np.int32)
        self.pending = np.zeros((groups, n), dtype=np.int64)
        self._rows: dict[int, np.ndarray] = {}

    def rows(self, size: int) -> np.ndarray | None:
        """All slots' LDS as [G * size_of_slot // size, size // 4] uint32 rows (a view), when
        a slot is a whole number of rows (else None)."""
        if self.size % size:
            return None
        v = self._rows.get(size)
        if v is None:
            v = self._rows[size] = self.lds.reshape(-1).view(np.uint32).reshape(-1, size // 4)
        return v


class Workgroup:
    """LDS (bytes) and its shadow for one workgroup, plus the shared checker sink; with
    `stack`, slot `slot` of those stacked arrays (views)."""

    def __init__(self, wgid: int, lds_bytes: int, checks: Checks, stack: StackedLds | None = None, slot: int = 0) -> None:
        self.wgid = wgid
        self.slot = slot
        if stack is None:
            stack = StackedLds(1, lds_bytes)
            slot = 0
        self.lds = stack.lds[slot]
        self.lds_writer = stack.writer[slot]
        self.lds_epoch = stack.epoch[slot]
        self.lds_pending = stack.pending[slot]  # DMA token, 0 = landed
        self.epoch = 0  # barriers completed
        self.checks = checks
        self.token = 0
        self.dma_inflight = 0  # LDS DMAs issued and not yet retired (0: no byte is pending)
        self._rows: dict[int, np.ndarray] = {}  # LDS as uint32 rows of 4, 8, 16 bytes (views)
        self.writers: set[int] = set()  # waves that wrote LDS bytes in epoch writers_epoch
        self.writers_epoch = -1

    def lds_rows(self, a32: np.ndarray, off: int, size: int) -> np.ndarray | None:
        """[64, size // 4] uint32 LDS rows at a32 + off (a uint32 lane vector), when every lane's
        address is a multiple of size (4, 8 or 16) inside the allocation; else None."""
        if off % size:
            return None
        rows = self._rows.get(size)
        if rows is None:
            n = self.lds.size // size * size
            rows = self._rows[size] = self.lds[:n].view(np.uint32).reshape(-1, size // 4)
        lim = rows.shape[0] * size - size - off
        if lim < 0 or np.count_nonzero(a32 & K(size - 1)) or np.count_nonzero(a32 > K(lim)):
            return None
        r = a32 >> K(size.bit_length() - 1)
        return rows[r.astype(np.intp) + (off // size) if off else r.astype(np.intp)]

    def note_write(self, wid: int) -> None:
        """Wave `wid` wrote (or landed DMA) bytes in the current epoch."""
        if self.writers_epoch != self.epoch:
            self.writers_epoch = self.epoch
            self.writers = set()
        self.writers.add(wid)

    def others_wrote(self, wid: int) -> bool:
        """Whether a wave other than `wid` may have written LDS bytes in the current epoch
        (False means no LDS read of `wid` can race)."""
        return self.writers_epoch == self.epoch and bool(self.writers - {wid})

    def next_token(self) -> int:
        self.token += 1
        return self.token
