"""Machine state of one workgroup: per-wave registers, the workgroup's LDS with its shadow
(who wrote each byte, in which barrier epoch, which DMA is still in flight), and global memory
as a table of registered host buffers (torch tensors' storages).

Units: addresses and sizes in bytes; lane vectors are numpy arrays of 64 entries.
Register definedness is tracked per VGPR lane and byte (4 bits per dword) and per SGPR, so
the checker can report a read before any write without false alarms on partial writes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from kernel.isa.errors import CheckFailed, Finding

LANES = 64
SGPR_FILE = 128  # s0..s101 + flat_scratch 102-103 + xnack 104-105 + vcc 106-107 + ... + m0 124 + exec 126-127
VCC = 106
EXEC = 126
M0 = 124
LANE_IDS = np.arange(LANES, dtype=np.int64)


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


class GlobalMemory:
    """64-bit global address space = the registered buffers; any other address is an error."""

    def __init__(self) -> None:
        self.regions: list[Region] = []

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

    def locate(self, addr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(region index per lane, -1 when [addr, addr + size) is not inside one region; byte
        offset inside it)."""
        addr = addr.astype(np.uint64)
        idx = np.full(addr.shape, -1, dtype=np.int64)
        off = np.zeros(addr.shape, dtype=np.int64)
        for i, r in enumerate(self.regions):
            inside = (addr >= np.uint64(r.start)) & (addr + np.uint64(size) <= np.uint64(r.end))
            if inside.any():
                idx = np.where(inside, i, idx)
                off = np.where(inside, (addr - np.uint64(r.start)).astype(np.int64), off)
        return idx, off

    def read(self, addr: np.ndarray, size: int, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes [n, size] at addr for the lanes set in `lanes` (others 0), and the lanes whose
        access fell outside every buffer."""
        out = np.zeros((addr.shape[0], size), dtype=np.uint8)
        idx, off = self.locate(addr, size)
        bad = lanes & (idx < 0)
        span = np.arange(size, dtype=np.int64)
        for i, r in enumerate(self.regions):
            sel = lanes & (idx == i)
            if sel.any():
                out[sel] = r.data[off[sel][:, None] + span]
        return out, bad

    def write(self, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """Write data [n, size] for the selected lanes (in lane order); return the lanes outside."""
        size = data.shape[1]
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
    lds_bytes: np.ndarray | None
    vgprs: tuple[int, int] | None
    pc: int
    sgprs: tuple[int, int] | None = None
    smem: bool = False  # SMEM returns out of order: only lgkmcnt(0) is sure to cover it


class Wave:
    """Registers and counters of one wave."""

    def __init__(self, wid: int, n_vgpr: int) -> None:
        self.wid = wid
        self.v = np.zeros((n_vgpr, LANES), dtype=np.uint32)
        self.vdef = np.zeros((n_vgpr, LANES), dtype=np.uint8)  # defined bytes, bit b = byte b
        self.vpend = np.zeros(n_vgpr, dtype=np.int64)  # token of an outstanding load into it, 0 none
        self.vfull = [False] * n_vgpr  # cache: every byte of every lane defined (fast check path)
        self.s = [0] * SGPR_FILE
        self.sdef = [False] * SGPR_FILE
        self.scc = 0
        self.scc_def = False
        self.exec = np.ones(LANES, dtype=bool)
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.vm: deque[PendingOp] = deque()
        self.lgkm: deque[PendingOp] = deque()  # LDS (in order) and SMEM operations
        self.spend = [0] * SGPR_FILE  # token of an outstanding SMEM load into the SGPR, 0 none
        self.executed = 0

    # ---- scalar registers
    def set_exec_from_sgprs(self) -> None:
        val = self.s[EXEC] | (self.s[EXEC + 1] << 32)
        self.exec = ((val >> LANE_IDS.astype(np.uint64)) & 1).astype(bool) if val != 0xFFFFFFFFFFFFFFFF else np.ones(LANES, dtype=bool)

    def exec_value(self) -> int:
        return self.s[EXEC] | (self.s[EXEC + 1] << 32)


def mask_to_int(mask: np.ndarray) -> int:
    """bool[64] -> 64-bit integer, bit i = lane i."""
    return int(np.packbits(mask.astype(np.uint8), bitorder="little").view(np.uint64)[0])


def int_to_mask(val: int) -> np.ndarray:
    return ((np.uint64(val & 0xFFFFFFFFFFFFFFFF) >> LANE_IDS.astype(np.uint64)) & np.uint64(1)).astype(bool)


class Workgroup:
    """LDS (bytes) and its shadow for one workgroup, plus the shared checker sink."""

    def __init__(self, wgid: int, lds_bytes: int, checks: Checks) -> None:
        self.wgid = wgid
        self.lds = np.zeros(max(lds_bytes, 0), dtype=np.uint8)
        self.lds_writer = np.full(self.lds.size, -1, dtype=np.int8)
        self.lds_epoch = np.full(self.lds.size, -1, dtype=np.int32)
        self.lds_pending = np.zeros(self.lds.size, dtype=np.int64)  # DMA token, 0 = landed
        self.epoch = 0  # barriers completed
        self.checks = checks
        self.token = 0

    def next_token(self) -> int:
        self.token += 1
        return self.token
