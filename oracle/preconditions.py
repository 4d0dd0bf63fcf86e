"""Precondition checks for fp8_ds_mla KV caches and CSR index streams, as structured findings.

The gfx950 kernel relies on facts the host cannot check cheaply (docs/reference/contract.md, the seed's
"Preconditions the host cannot check"): every per-128 scale a power of two, every scale <= 2^7,
every consumed index in [0, kv rows). Under a violation the kernel still runs and its behaviour is
documented; these checks say where a cache or a call breaks a precondition and, per example, what
the kernel does there. Nothing here fails a test: callers decide.

Vocabulary and units:
- a *row* is one 656-byte record, addressed as a flat row id (byte offset row * 656) whatever the
  cache's leading shape; counts of rows are in rows, never bytes;
- a *scale* is one of the 4 f32 words at record bytes [512, 528), `block` 0..3 (it covers latent
  values [128 block, 128 block + 128));
- a *position* is an element offset into the 1-D `indices` stream; a *query row* q is the CSR slice
  indices[indptr[q] : indptr[q + 1]];
- a row is *consumed* when some query row's slice holds its id at a position the contract does not
  mask (inside the slice and inside the stream, >= 0, < kv rows).

Severities: "violation" = a precondition the kernel relies on is broken, its output is not promised;
"notice" = legal under the contract but worth knowing.

Scopes (where a finding was looked for): "input" (array dtypes and shapes), "index_stream",
"consumed_rows" (records the call reads), "all_rows" (every record of the cache),
"selected_rows" (rows a caller passed to `check_records`).

All scans are vectorised torch over fixed-size chunks (rows for caches, positions for index
streams): memory is bounded by a chunk's temporaries plus small per-item facts (24 bytes per
scanned row: its scale bits and NaN-code count; one bool per position and per kv row), a cache
is never copied as a whole, and CPU, CUDA and memory-mapped numpy-backed tensors all work.
Progress callbacks receive (items_done, items_total) after every chunk. Counts and examples stay
on the device until the end of a check, which reads them back in at most two transfers (every
kind's count; then, for the kinds found, their details and first examples).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from kernel.contract import ContractError, validate_call
from kernel.fp8 import E4M3_NAN_CODE
from kernel.host_copy import to_device
from kernel.record import RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET

Severity = Literal["violation", "notice"]
Progress = Callable[[int, int], None]

DEFAULT_CHUNK_ROWS = 1 << 14  # rows per chunk: 10.25 MiB of records, ~8 MiB of temporaries (cache-friendly)
DEFAULT_CHUNK_ENTRIES = 1 << 22  # index-stream positions per chunk
DEFAULT_MAX_EXAMPLES = 5
TILE = 128  # keys per kernel tile

KIND_SCALE_NOT_POW2 = "scale_not_pow2"
KIND_SCALE_ABOVE_CAP = "scale_above_cap"
KIND_SCALE_BAD = "scale_nonpositive_or_nonfinite"
KIND_NAN_CODES = "nan_codes"
KIND_INDEX_OOR = "index_out_of_range"
KIND_INDPTR_BEYOND = "indptr_beyond_stream"
KIND_NEG_ROW_LEN = "negative_row_length"
KIND_ROW0_NAN = "row0_nan_masked_reads"
KIND_BAD_DTYPE = "bad_dtype"
KIND_BAD_SHAPE = "bad_shape"
KIND_SCALE_OVERFLOW = "softmax_scale_overflow_f32"
KIND_SCORE_OVERFLOW = "score_overflow_f32"

#: Every kind this module can report, in report order, with its severity.
KINDS: dict[str, Severity] = {
    KIND_BAD_DTYPE: "violation",
    KIND_BAD_SHAPE: "violation",
    KIND_INDPTR_BEYOND: "violation",
    KIND_INDEX_OOR: "violation",
    KIND_SCALE_BAD: "violation",
    KIND_SCALE_ABOVE_CAP: "violation",
    KIND_SCALE_NOT_POW2: "violation",
    KIND_NAN_CODES: "violation",
    KIND_SCALE_OVERFLOW: "violation",
    KIND_SCORE_OVERFLOW: "violation",
    KIND_NEG_ROW_LEN: "notice",
    KIND_ROW0_NAN: "notice",
}

_F32_BITS_CAP = 0x43000000  # bits of 128.0 = 2^7, the kernel's PV scale cap
_F32_BITS_MIN_NORMAL = 0x00800000
_I64_M7F = 0x7F7F7F7F7F7F7F7F
_I64_M01 = 0x0101010101010101
_I64_M80 = 0x8080808080808080 - (1 << 64)  # as a signed int64


@dataclass(frozen=True)
class Finding:
    """One kind of problem, aggregated over a scan.

    kind: stable snake_case id (see KINDS); severity: "violation" or "notice";
    count: how many `unit`s are affected (exact, every chunk counted);
    unit: what `count` counts ("scales", "codes", "query rows", "consumed entries", "arrays");
    examples: the first few occurrences in scan order, as JSON-serialisable dicts;
    consequence: one sentence on what the gfx950 kernel does under it, computed from the examples;
    scope: where it was looked for ("input", "index_stream", "consumed_rows", "all_rows",
    "selected_rows"); details: further exact totals (e.g. rows affected).
    """

    kind: str
    severity: Severity
    count: int
    unit: str
    examples: list[dict[str, Any]]
    consequence: str
    scope: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable: no NaN or inf floats inside)."""
        return asdict(self)


def has_violation(findings: Sequence[Finding]) -> bool:
    """True when any finding has severity "violation"."""
    return any(f.severity == "violation" for f in findings)


def sort_findings(findings: Sequence[Finding]) -> list[Finding]:
    """Findings in report order: violations first, then by kind order of KINDS, then by scope."""
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(findings, key=lambda f: (f.severity != "violation", order.get(f.kind, len(order)), f.scope))


# --------------------------------------------------------------------------- formatting helpers


def _fmt_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _f32_from_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _pow2_str(exponent: int) -> str:
    return f"2^{exponent} = {_fmt_float(math.ldexp(1.0, exponent))}"


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else _fmt_float(x)


def scale_effect(bits: int) -> dict[str, Any]:
    """What the gfx950 kernel uses for a stored f32 scale (given as its 32-bit pattern).

    QK feeds the scale's biased exponent field (bits 23..30, sign dropped) to the scaled MFMA as
    an E8M0 byte: 2^(field - 127), and 0xFF is NaN. PV clamps the scale's bits, read as a signed
    int32, to [1, bits(2^7)], so negative scales and zero become the smallest subnormal 2^-149
    (P' = P * scale underflows f16 to 0), scales above 2^7 and +NaN / +inf become 2^7.
    Returns value (as stored), qk, pv (JSON-safe floats or "nan"/"inf" strings) and a sentence.
    """
    bits &= 0xFFFFFFFF
    value = _f32_from_bits(bits)
    field_ = (bits >> 23) & 0xFF
    signed = bits - (1 << 32) if bits >= 1 << 31 else bits
    pv_bits = min(max(signed, 1), _F32_BITS_CAP)
    pv = _f32_from_bits(pv_bits)
    if field_ == 0xFF:
        qk_text = "QK's E8M0 byte is 0xFF (NaN), so the key's scores, and out/lse of every query row consuming it, are NaN;"
        qk: float = math.nan
    else:
        qk = math.ldexp(1.0, field_ - 127)
        qk_text = f"QK uses {_pow2_str(field_ - 127)}"
        if field_ == 0:
            qk_text += " (E8M0 byte 0: exponent field 0)"
        elif bits & 0x7FFFFF:
            qk_text += " (exponent only)"
        if bits >> 31:
            qk_text += ", sign dropped"
    if pv_bits == 1:
        pv_text = (
            "PV uses 2^-149 (bits clamped to 1: P' underflows f16 to 0, so the block's V drops out "
            "while the key still counts in the softmax sum)"
        )
    elif pv_bits == _F32_BITS_CAP and signed > _F32_BITS_CAP:
        pv_text = "PV clamps it to 2^7 = 128.0"
    else:
        pv_text = f"PV uses {_fmt_float(pv)}"
        if field_ == 0:
            pv_text += " (P' underflows f16 to 0)"
    sep = " " if qk_text.endswith(";") else ", "
    sentence = f"scale {_fmt_float(value)} (bits 0x{bits:08x}): {qk_text}{sep}{pv_text}"
    return {
        "value": _json_float(value),
        "bits": f"0x{bits:08x}",
        "qk_uses": _json_float(qk),
        "pv_uses": _json_float(pv),
        "effect": sentence,
    }


_SCALE_GENERAL = {
    KIND_SCALE_NOT_POW2: (
        "QK takes only the scale's exponent field as its E8M0 scale while PV uses the stored f32 scale, "
        "so scores and values use different dequantisations and the output is inexact"
    ),
    KIND_SCALE_ABOVE_CAP: (
        "PV clamps scales above 2^7 to 2^7 (fp16 headroom of P' = P * scale) while QK uses the true exponent, "
        "so the output stays finite but is inexact"
    ),
    KIND_SCALE_BAD: (
        "a zero or negative scale gives PV 2^-149 (the block's V drops out) and QK the exponent of |scale|; "
        "a NaN or infinite scale has exponent field 0xFF, a NaN E8M0 scale in QK, "
        "so the output of every query row consuming it is NaN"
    ),
}


def _consequence(general: str, examples: list[dict[str, Any]]) -> str:
    """The general sentence plus what the kernel does for the first example (every example
    carries its own computed `effect`)."""
    effect = next((e["effect"] for e in examples if "effect" in e), None)
    return general + (f"; first: {effect}" if effect else "") + "."


# --------------------------------------------------------------------------- input validation


def _kv_flat(kv_cache: torch.Tensor) -> torch.Tensor:
    """kv_cache as a [rows, 656] view (no copy); ContractError when it cannot be one."""
    problems = check_arrays(kv_cache=kv_cache)
    if problems:
        raise ContractError(problems[0].consequence)
    if not kv_cache.is_contiguous():
        raise ContractError("kv_cache must be contiguous: rows are addressed as flat rows (byte offset row * 656)")
    return kv_cache.view(-1, RECORD_BYTES)


def _input_finding(kind: str, name: str, message: str, **example: Any) -> Finding:
    return Finding(
        kind=kind, severity="violation", count=1, unit="arrays", examples=[{"array": name, **example}], consequence=message, scope="input"
    )


def check_arrays(
    kv_cache: torch.Tensor | None = None,
    indices: torch.Tensor | None = None,
    indptr: torch.Tensor | None = None,
    *,
    n_q: int | None = None,
    names: dict[str, str] | None = None,
) -> list[Finding]:
    """dtype and shape problems of the arrays, as bad_dtype / bad_shape findings (scope "input").

    kv_cache must be uint8 [..., 656] with at least 2 dims; indices int32 1-D; indptr int32 1-D of
    length >= 1 (n_q + 1 when n_q is given). `names` maps "kv_cache"/"indices"/"indptr" to what
    the message should call them (a file name, say). Reads no data; never raises.
    """
    names = names or {}
    out: list[Finding] = []

    def nm(key: str) -> str:
        return names.get(key, key)

    def where(key: str) -> str:  # message prefix naming the array when it has a name of its own
        return f"{names[key]}: " if key in names else ""

    if kv_cache is not None:
        if kv_cache.dtype != torch.uint8:
            out.append(
                _input_finding(
                    KIND_BAD_DTYPE,
                    nm("kv_cache"),
                    f"{where('kv_cache')}kv_cache must be uint8 records, got {_dtype_name(kv_cache.dtype)}",
                    dtype=_dtype_name(kv_cache.dtype),
                    expected="uint8",
                )
            )
        if kv_cache.dim() < 2 or kv_cache.shape[-1] != RECORD_BYTES:
            out.append(
                _input_finding(
                    KIND_BAD_SHAPE,
                    nm("kv_cache"),
                    f"{where('kv_cache')}kv_cache must be [..., {RECORD_BYTES}] (one {RECORD_BYTES}-byte record per row), "
                    f"got shape {list(kv_cache.shape)}",
                    shape=list(kv_cache.shape),
                    expected=f"[..., {RECORD_BYTES}]",
                )
            )
    for key, tensor in (("indices", indices), ("indptr", indptr)):
        if tensor is None:
            continue
        if tensor.dtype != torch.int32:
            out.append(
                _input_finding(
                    KIND_BAD_DTYPE,
                    nm(key),
                    f"{where(key)}{key} must be int32, got {_dtype_name(tensor.dtype)}",
                    dtype=_dtype_name(tensor.dtype),
                    expected="int32",
                )
            )
        if tensor.dim() != 1:
            out.append(
                _input_finding(
                    KIND_BAD_SHAPE,
                    nm(key),
                    f"{where(key)}{key} must be 1-D, got shape {list(tensor.shape)}",
                    shape=list(tensor.shape),
                    expected="1-D",
                )
            )
    if indptr is not None and indptr.dim() == 1:
        if n_q is not None and indptr.shape[0] != n_q + 1:
            out.append(
                _input_finding(
                    KIND_BAD_SHAPE,
                    nm("indptr"),
                    f"{where('indptr')}indptr must have n_q + 1 = {n_q + 1} entries, got {indptr.shape[0]}",
                    shape=list(indptr.shape),
                    expected=[n_q + 1],
                )
            )
        elif indptr.shape[0] < 1:
            out.append(
                _input_finding(
                    KIND_BAD_SHAPE,
                    nm("indptr"),
                    f"{where('indptr')}indptr must have n_q + 1 >= 1 entries, got 0",
                    shape=[0],
                    expected="[n_q + 1]",
                )
            )
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _require_stream(indices: torch.Tensor, indptr: torch.Tensor) -> None:
    problems = check_arrays(indices=indices, indptr=indptr)
    if problems:
        raise ContractError(problems[0].consequence)


# --------------------------------------------------------------------------- device facts, read back in batches


class _Reads:
    """int64 device values gathered while a check runs, read back to the host in one transfer.

    `add` queues a tensor (any shape, flattened) and returns its handle; `read` concatenates the
    queued tensors and reads them with a single Tensor.tolist (one host read; none when nothing
    is queued), returning one list of Python ints per handle."""

    def __init__(self) -> None:
        self._parts: list[torch.Tensor] = []

    def add(self, t: torch.Tensor) -> int:
        self._parts.append(t.reshape(-1).to(torch.int64))
        return len(self._parts) - 1

    def read(self) -> list[list[int]]:
        if not self._parts:
            return []
        dev = self._parts[0].device
        flat = (torch.cat([p.to(dev) for p in self._parts]) if len(self._parts) > 1 else self._parts[0]).tolist()
        out, at = [], 0
        for p in self._parts:
            out.append(flat[at : at + p.numel()])
            at += p.numel()
        return out


class _Picks:
    """The first k True entries of several 1-D bool masks (any lengths), found together with one
    cumsum and one scatter (fixed shapes: no host read).

    `add(mask)` returns a handle; after `run()`, `local(handle)` is int64 [k]: the indices of
    the mask's first k True entries in order, then -1s."""

    def __init__(self, k: int, device: torch.device) -> None:
        self.k = k
        self.device = device
        self._masks: list[torch.Tensor] = []
        self._local: torch.Tensor | None = None

    def add(self, mask: torch.Tensor) -> int:
        self._masks.append(mask.reshape(-1).to(self.device))
        return len(self._masks) - 1

    def run(self) -> None:
        k, dev, n_seg = self.k, self.device, len(self._masks)
        if k == 0 or n_seg == 0:
            return
        if n_seg == 1:
            every = self._masks[0]
            rank = torch.cumsum(every, 0)
            slot = torch.where(every & (rank <= k), rank - 1, k)
            out = torch.full((k + 1,), -1, dtype=torch.int64, device=dev)
            out.scatter_(0, slot, torch.arange(every.numel(), device=dev))  # the last slot collects the rest
            self._local = out[:k].view(1, k)
            return
        sizes = [m.numel() for m in self._masks]
        starts = [sum(sizes[:i]) for i in range(n_seg)]
        every = torch.cat(self._masks)
        rank = torch.cumsum(every, 0)  # inclusive count of True entries, over all segments
        pos = torch.arange(every.numel(), device=dev)
        seg = torch.searchsorted(to_device(starts[1:], dtype=torch.int64, device=dev), pos, right=True)
        firsts = to_device(starts, dtype=torch.int64, device=dev)
        before = torch.cat((torch.zeros(1, dtype=torch.int64, device=dev), rank))[firsts]  # [segments]
        rel = rank - before[seg]  # 1-based rank within the segment
        slot = torch.where(every & (rel <= k), seg * k + rel - 1, n_seg * k)
        out = torch.full((n_seg * k + 1,), -1, dtype=torch.int64, device=dev)
        out.scatter_(0, slot, pos)  # the last slot collects the rest
        base = to_device([s for s in starts for _ in range(k)], dtype=torch.int64, device=dev)
        self._local = torch.where(out[:-1] >= 0, out[:-1] - base, -1).view(n_seg, k)

    def local(self, handle: int) -> torch.Tensor:
        assert self._local is not None
        return self._local[handle]


def _valid_rows(values: list[int], width: int) -> list[list[int]]:
    """The rows (column 0 >= 0) of a read-back [k, width] example tensor."""
    rows = [values[i : i + width] for i in range(0, len(values), width)]
    return [r for r in rows if r[0] >= 0]


Values = tuple[list[list[int]], list[list[int]]]


def _read_back(first: _Reads, parts: Sequence[Any], max_examples: int, device: torch.device) -> Values:
    """At most two host reads for all `parts`: first every part's totals (queued into `first`,
    which may already hold the caller's own values), then, only for the kinds found, the exact
    details and the first max_examples examples (picked together). A part has queue(first),
    queue_details(second, picks, values of the first read) and queue_examples(second, picks).
    Returns (values of the first read, values of the second: [] when nothing was found)."""
    for part in parts:
        part.queue(first)
    v1 = first.read()
    second = _Reads()
    picks = _Picks(max(0, max_examples), device)
    for part in parts:
        part.queue_details(second, picks, v1)
    picks.run()
    for part in parts:
        part.queue_examples(second, picks)
    return v1, second.read()


# --------------------------------------------------------------------------- record scan

_SCALE_KINDS = (KIND_SCALE_BAD, KIND_SCALE_ABOVE_CAP, KIND_SCALE_NOT_POW2)
_BAD_CLASSES = ("nan", "+inf", "-inf", "zero", "negative")


def _nan_codes_per_row(chunk: torch.Tensor) -> torch.Tensor:
    """int64 [c]: e4m3 NaN codes (0x7F / 0xFF) in each row's latent bytes of records uint8 [c, 656].

    Fast path: 8 codes per int64 word; a byte b has (b & 0x7F) + 1 == 0x80 exactly when it is a
    NaN code, and the add never carries into the next byte; bit 7 of each byte, shifted to bit 0
    and summed over a row's 64 words, counts per byte lane (<= 64, no carry), and the 8 lanes add
    up to the row's count. Falls back to bytes when the chunk's address is not 8-byte aligned."""
    words = None
    if chunk.data_ptr() % 8 == 0 and chunk.is_contiguous():
        try:
            words = chunk.view(torch.int64)[:, : SCALE_OFFSET // 8]
        except RuntimeError:
            words = None
    if words is None:
        return ((chunk[:, :SCALE_OFFSET] & 0x7F) == E4M3_NAN_CODE).sum(dim=1)
    t = words & _I64_M7F
    t += _I64_M01
    t &= _I64_M80
    lanes = ((t >> 7) & _I64_M01).sum(dim=1)
    return lanes.view(torch.uint8).reshape(-1, 8).sum(dim=1)


def _as_dtype(byte_cols: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Columns of records (uint8 [c, w]) reinterpreted as `dtype` [c, w / size]: a view where
    the records' offset and row stride allow one, else a contiguous copy first."""
    try:
        return byte_cols.view(dtype)
    except RuntimeError:
        return byte_cols.contiguous().view(dtype)


def _k_max_rows(recs: torch.Tensor) -> torch.Tensor:
    """float64 [c]: the largest |K| element of each record: max(max |scale| * 448, max |rope|)."""
    scale = _as_dtype(recs[:, SCALE_OFFSET:ROPE_OFFSET], torch.float32).abs().amax(dim=-1).to(torch.float64)
    rope = _as_dtype(recs[:, ROPE_OFFSET:], torch.bfloat16).abs().amax(dim=-1).to(torch.float64)
    return torch.maximum(scale * 448.0, rope)


class _RecordFacts:
    """Exact counts and first examples of record findings over the rows a scan admits.

    `add` keeps, per admitted chunk row, its 4 scale bit patterns and its NaN-code count (24
    bytes a row, on the scan's device; rows a filter leaves out get a good scale and no NaN
    codes) and, with want_k_max, the largest |K| element so far (float64, 0 when none: the score
    check's bound). Then, through `_read_back`: `queue` classifies every kept row at once and
    queues the count of each kind; `queue_details` / `queue_examples`, for the kinds found, the
    rows holding them, the classes of bad scales and the first max_examples examples in scan
    order; `findings` builds the findings. No host reads of its own.
    """

    def __init__(self, scope: str, max_examples: int, lead_shape: tuple[int, ...], flat: torch.Tensor, want_k_max: bool = False) -> None:
        self.scope = scope
        self.k = max(0, max_examples)
        self.lead_shape = lead_shape
        self.flat = flat
        self._bits: list[torch.Tensor] = []
        self._codes: list[torch.Tensor] = []
        self._ids: list[torch.Tensor] = []
        self.k_max = torch.zeros((), dtype=torch.float64, device=flat.device) if want_k_max else None

    def add(self, chunk: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Fold in records uint8 [c, 656] whose flat row ids are `ids` (int64 [c]); rows where
        `keep` (bool [c]) is False are ignored."""
        if chunk.shape[0] == 0:
            return
        bits = _as_dtype(chunk[:, SCALE_OFFSET:ROPE_OFFSET], torch.int32)  # [c, 4], signed
        codes = _nan_codes_per_row(chunk)
        if self.k_max is not None:
            k_row = _k_max_rows(chunk)
            if keep is not None:
                k_row = torch.where(keep, k_row, 0.0)
            self.k_max = torch.maximum(self.k_max, k_row.amax())
        if keep is not None:
            bits = torch.where(keep.unsqueeze(1), bits, _F32_BITS_CAP)  # 2^7: a good scale
            codes = torch.where(keep, codes, 0)
        self._bits.append(bits)
        self._codes.append(codes)
        self._ids.append(ids)

    def queue(self, first: _Reads) -> None:
        """Classify the kept rows; queue the count of each kind (scales of each of _SCALE_KINDS,
        NaN codes)."""
        if not self._bits:
            self._h1 = first.add(torch.zeros(4, dtype=torch.int64, device=self.flat.device))
            return
        cat = len(self._bits) > 1
        bits = self._all_bits = torch.cat(self._bits) if cat else self._bits[0]
        self._all_codes = torch.cat(self._codes) if cat else self._codes[0]
        self._all_ids = torch.cat(self._ids) if cat else self._ids[0]
        # good = a positive normal power of two <= 2^7: zero mantissa, bits (as int32) in
        # [bits(2^-126), bits(2^7)]; negative patterns are < 0 as int32
        field_ = (bits >> 23) & 0xFF
        self._mant_nz = (bits & 0x7FFFFF) != 0
        self._all_ones = field_ == 0xFF
        nonpos_nonfinite = (bits <= 0) | self._all_ones
        above_cap = (bits > _F32_BITS_CAP) & ~self._all_ones
        not_pow2 = ~nonpos_nonfinite & (self._mant_nz | (field_ == 0))
        self._kinds = torch.stack((nonpos_nonfinite, above_cap, not_pow2))  # [3, rows, 4]
        self._h1 = first.add(torch.cat((self._kinds.sum(dim=(1, 2)), self._all_codes.sum().reshape(1))))

    def queue_details(self, second: _Reads, picks: _Picks, v1: list[list[int]]) -> None:
        """For the kinds found: rows holding them (all three scale kinds together), the classes
        of bad scales, the rows holding NaN codes; their example masks into `picks`."""
        counts = v1[self._h1]
        self._present = [i for i in range(3) if counts[i]]
        self._nan = counts[3] > 0
        self._h2 = -1
        parts = []
        if self._present:
            parts.append(self._kinds.any(dim=2).sum(dim=1))
        if counts[0]:
            bits, mant_nz, all_ones = self._all_bits, self._mant_nz, self._all_ones
            negative = bits < 0
            nan = all_ones & mant_nz
            inf = all_ones & ~mant_nz
            zero = (bits & 0x7FFFFFFF) == 0
            classes = torch.stack((nan, inf & ~negative, inf & negative, zero, negative & ~nan & ~inf & ~zero))
            parts.append(classes.sum(dim=(1, 2)))
        if self._nan:
            self._nan_rows = self._all_codes > 0
            parts.append(self._nan_rows.sum().reshape(1))
        if parts:
            self._h2 = second.add(torch.cat(parts) if len(parts) > 1 else parts[0])
        if self.k:
            self._pick = [picks.add(self._kinds[i]) for i in self._present]
            if self._nan:
                self._pick_nan = picks.add(self._nan_rows)

    def queue_examples(self, second: _Reads, picks: _Picks) -> None:
        """After picks.run(): queue the examples (row, block, bits) of each scale kind found and
        (row, NaN codes, first NaN position, its code) of NaN codes."""
        self._h_scale = self._h_nan = -1
        if not self.k or self._h2 < 0:
            return
        if self._present:
            loc = torch.cat([picks.local(h) for h in self._pick]) if len(self._pick) > 1 else picks.local(self._pick[0])
            at = loc.clamp(min=0)  # into [rows * 4]
            bits = self._all_bits.reshape(-1)[at].to(torch.int64) & 0xFFFFFFFF
            self._h_scale = second.add(torch.stack((torch.where(loc >= 0, self._all_ids[at // 4], -1), at % 4, bits), dim=1))
        if self._nan:
            loc = picks.local(self._pick_nan)
            at = loc.clamp(min=0)
            ids = self._all_ids[at]
            latent = self.flat.index_select(0, ids)[:, :SCALE_OFFSET]
            is_nan = (latent & 0x7F) == E4M3_NAN_CODE
            first = is_nan.to(torch.uint8).argmax(dim=1)
            code = latent.gather(1, first.unsqueeze(1)).squeeze(1)
            self._h_nan = second.add(torch.stack((torch.where(loc >= 0, ids, -1), self._all_codes[at], first, code.to(torch.int64)), dim=1))

    def _where(self, row: int) -> dict[str, Any]:
        where: dict[str, Any] = {"row": row}
        if len(self.lead_shape) > 1:
            idx, rem = [], row
            for size in reversed(self.lead_shape):
                idx.append(rem % size)
                rem //= size
            where["cache_index"] = idx[::-1]
        return where

    def findings(self, values: Values) -> list[Finding]:
        """The findings, from what `_read_back` returned."""
        v1, v2 = values
        counts = v1[self._h1]
        if not any(counts):
            return []
        details = v2[self._h2]
        rows: list[int] = details[0:3] if self._present else [0, 0, 0]
        classes = details[3:8] if counts[0] else []
        nan_rows = details[-1] if self._nan else 0
        k = self.k
        scale_rows = [v2[self._h_scale][i : i + 3] for i in range(0, len(v2[self._h_scale]), 3)] if self._h_scale >= 0 else []
        scale_ex = {kind: [r for r in scale_rows[j * k : (j + 1) * k] if r[0] >= 0] for j, kind in enumerate(self._present)}
        nan_ex = _valid_rows(v2[self._h_nan], 4) if self._h_nan >= 0 else []
        out: list[Finding] = []
        for i, kind in enumerate(_SCALE_KINDS):
            if not counts[i]:
                continue
            exs = []
            for row, bl, bv in scale_ex.get(i, []):
                ex = self._where(row)
                ex["block"] = bl
                ex["byte_offset"] = row * RECORD_BYTES + SCALE_OFFSET + 4 * bl
                ex.update(scale_effect(bv))
                exs.append(ex)
            extra: dict[str, Any] = {"rows": rows[i]}
            if kind == KIND_SCALE_BAD:
                extra["by_class"] = dict(sorted((c, n) for c, n in zip(_BAD_CLASSES, classes) if n))
            out.append(Finding(kind, "violation", counts[i], "scales", exs, _consequence(_SCALE_GENERAL[kind], exs), self.scope, extra))
        if counts[3]:
            exs = []
            for row, cnt, pos, c in nan_ex:
                ex = self._where(row)
                ex.update(position=pos, block=pos // 128, code=f"0x{c:02x}", nan_codes_in_row=cnt, byte_offset=row * RECORD_BYTES + pos)
                exs.append(ex)
            first = exs[0]
            who = "the query rows that consume these rows" if self.scope == "consumed_rows" else "any query row that consumes such a row"
            consequence = (
                f"e4m3 codes 0x7F/0xFF are NaN: the QK scores and V of such a row are NaN, so out and lse are NaN for {who} "
                f"(row {first['row']} holds {first['nan_codes_in_row']} NaN code(s), the first at latent position {first['position']})."
            )
            out.append(Finding(KIND_NAN_CODES, "violation", counts[3], "codes", exs, consequence, self.scope, {"rows": nan_rows}))
        return out


def _scan_records(
    flat: torch.Tensor,
    rows: torch.Tensor | None,
    facts: Sequence[tuple[_RecordFacts, torch.Tensor | None]],
    chunk_rows: int,
    progress: Progress | None,
    total: int | None = None,
    sentinel: int | None = None,
) -> None:
    """Feed every chunk of records uint8 [kv rows, 656] to each (facts, row filter) pair: a
    contiguous scan of views when rows is None, else gathers of chunk_rows listed row ids at a
    time (the first `total` of them; ids equal to `sentinel` pad the list and are skipped). A row
    filter is bool [kv rows] (None: every row). No host reads."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    if total is None:
        total = flat.shape[0] if rows is None else rows.numel()
    if progress is not None:
        progress(0, total)
    for start in range(0, total, chunk_rows):
        stop = min(start + chunk_rows, total)
        pad: torch.Tensor | None = None
        if rows is None:
            chunk = flat[start:stop]
            ids = torch.arange(start, stop, dtype=torch.int64, device=flat.device)
        else:
            ids = rows[start:stop]
            if sentinel is not None:
                pad = ids < sentinel
                ids = ids.clamp(max=flat.shape[0] - 1)
            chunk = flat.index_select(0, ids)
        for acc, row_filter in facts:
            keep = pad if row_filter is None else (row_filter[ids] if pad is None else row_filter[ids] & pad)
            acc.add(chunk, ids, keep)
        if progress is not None:
            progress(stop, total)


def _normalise_rows(rows: torch.Tensor | Sequence[int], kv_rows: int, device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(rows, dtype=torch.int64).to(device).reshape(-1)
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= kv_rows:
            raise ValueError(f"row ids must lie in [0, {kv_rows}), got [{lo}, {hi}]")
    return torch.unique(ids)


def check_records(
    kv_cache: torch.Tensor,
    rows: torch.Tensor | Sequence[int] | None = None,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    scope: str | None = None,
) -> list[Finding]:
    """Scale and NaN-code findings of the records of a KV cache.

    kv_cache: uint8 [..., 656] contiguous (CPU, CUDA, or memory-mapped), rows addressed flat.
    rows: None scans every row (scope "all_rows"); else the flat row ids to scan (any order,
    duplicates ignored; scope "selected_rows"), e.g. `consumed_rows(...)`; `scope` overrides the
    label (pass "consumed_rows" for rows a call consumes).
    chunk_rows: rows per chunk (memory: about chunk_rows * 1.2 KiB of temporaries; a full scan
    reads views of the cache, a row list gathers chunk_rows rows at a time).
    progress: called with (rows_done, rows_total) before the first and after every chunk.
    Kinds: scale_nonpositive_or_nonfinite, scale_above_cap, scale_not_pow2 (count in scales; a
    scale above 2^7 that is not a power of two counts in both), nan_codes (count in codes,
    details["rows"] the rows holding them). Examples are the first ones in row order.
    Host reads: one on a clean cache, two when something is found (two more to check a row
    list's range).
    Raises ContractError for a wrong dtype or shape or a non-contiguous cache, ValueError for row
    ids outside [0, kv rows).
    """
    label = scope or ("all_rows" if rows is None else "selected_rows")
    flat = _kv_flat(kv_cache)
    ids = None if rows is None else _normalise_rows(rows, flat.shape[0], flat.device)
    acc = _RecordFacts(label, max_examples, tuple(kv_cache.shape[:-1]), flat)
    _scan_records(flat, ids, [(acc, None)], chunk_rows, progress)
    return acc.findings(_read_back(_Reads(), [acc], max_examples, flat.device))


def check_records_split(
    kv_cache: torch.Tensor,
    consumed: torch.Tensor,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> tuple[list[Finding], list[Finding]]:
    """One pass over every row giving (consumed-row findings, whole-cache findings).

    consumed: flat row ids (e.g. from `consumed_rows`); their findings get scope "consumed_rows",
    the whole cache's get "all_rows". Costs one bool per kv row besides the chunk temporaries.
    Raises as `check_records`.
    """
    flat = _kv_flat(kv_cache)
    ids = _normalise_rows(consumed, flat.shape[0], flat.device)
    mask = torch.zeros(flat.shape[0], dtype=torch.bool, device=flat.device)
    mask[ids] = True
    lead = tuple(kv_cache.shape[:-1])
    acc_c = _RecordFacts("consumed_rows", max_examples, lead, flat)
    acc_a = _RecordFacts("all_rows", max_examples, lead, flat)
    _scan_records(flat, None, [(acc_c, mask), (acc_a, None)], chunk_rows, progress)
    values = _read_back(_Reads(), [acc_c, acc_a], max_examples, flat.device)
    return acc_c.findings(values), acc_a.findings(values)


# --------------------------------------------------------------------------- index stream scan


@dataclass
class StreamScan:
    """Everything one pass over an index stream learns (see `scan_index_stream`).

    findings: index_stream findings; consumed: unique valid consumed row ids (int64, sorted);
    masked_rows: bool [n_q], query rows whose processed tiles hold a masked position (the gfx950
    kernel reads row 0 there); n_q, n_indices: sizes in elements; consumed_entries: total keys.
    """

    findings: list[Finding]
    consumed: torch.Tensor
    masked_rows: torch.Tensor
    n_q: int
    n_indices: int
    consumed_entries: int


class _StreamFacts:
    """One chunked pass over a CSR stream, every fact kept on the stream's device (no host read).

    Through `_read_back`: `queue` queues the negative-length rows, the rows reaching outside the
    stream, the out-of-range consumed entries (each once per query row holding it) and the
    consumed entries; `queue_details` / `queue_examples`, for the kinds found, the positions
    outside those rows, the distinct out-of-range positions, and the first max_examples
    negative-length rows (q, start, end), rows outside (q, start, end) and out-of-range
    positions (position, index, first query row holding it, that row's start).
    masked_rows: bool [n_q] (see StreamScan). The valid consumed ids go either into `bitmap`
    (bool [kv_rows + 1], slot kv_rows unused) or, with collect="ids", into `ids` (int64, one per
    position, kv_rows where not valid, plus one for row 0 when some slice reaches outside the
    stream), or with kv_rows None into `uniques` (host reads per chunk).
    Memory: O(n_q) plus O(chunk_entries) temporaries per chunk, plus one bool per position (the
    out-of-range mask), plus the bitmap or the ids.
    """

    def __init__(
        self,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        kv_rows: int | None,
        *,
        has_invalid: bool,
        chunk_entries: int,
        progress: Progress | None,
        max_examples: int,
        collect: Literal["bitmap", "ids"],
    ) -> None:
        _require_stream(indices, indptr)
        dev = indices.device
        n = indices.numel()
        ptr = indptr.to(device=dev, dtype=torch.int64)
        n_q = ptr.numel() - 1
        begin, end = ptr[:-1], ptr[1:]
        length = end - begin
        active = length > 0
        self.indices = indices
        self.n, self.n_q, self.k, self.kv_rows = n, n_q, max(0, max_examples), kv_rows
        self.begin, self.end, self.length, self.active = begin, end, length, active

        self.negative = length < 0
        self.beyond = active & ((begin < 0) | (end > n))

        # Coverage: how many active slices hold each stream position (clipped to the stream);
        # an inactive slice is [0, 0) and covers nothing.
        cb = torch.where(active, begin.clamp(0, n), 0)
        ce = torch.where(active, end.clamp(0, n), 0)
        cb_sorted = torch.sort(cb).values
        ce_sorted = torch.sort(ce).values
        self._cb, self._ce, self._has_invalid, self._chunk_entries = cb, ce, has_invalid, chunk_entries
        self._masked: torch.Tensor | None = None

        oor: list[torch.Tensor] = []
        entries: list[torch.Tensor] = []
        self._bad: list[torch.Tensor] = []
        self.bitmap = None
        self.ids: torch.Tensor | None = None
        self.uniques: list[torch.Tensor] = []
        self.sentinel = kv_rows if kv_rows is not None else 0
        parts: list[torch.Tensor] = []
        if kv_rows is not None and collect == "bitmap":
            self.bitmap = torch.zeros(kv_rows + 1, dtype=torch.bool, device=dev)
        if progress is not None:
            progress(0, n)
        for start in range(0, n, chunk_entries):
            stop = min(start + chunk_entries, n)
            vals = indices[start:stop].to(torch.int64)
            pos = torch.arange(start, stop, device=dev)
            cov = torch.searchsorted(cb_sorted, pos, right=True) - torch.searchsorted(ce_sorted, pos, right=True)
            consumed = cov > 0
            entries.append(cov.sum())
            is_neg = vals < 0
            if kv_rows is not None:
                high = vals >= kv_rows
                bad = consumed & ((high | is_neg) if not has_invalid else high)
                oor.append((cov * bad).sum())
                self._bad.append(bad)
                kept = torch.where(consumed & ~(is_neg | high), vals, kv_rows)
                if self.bitmap is not None:
                    self.bitmap.index_fill_(0, kept, True)
                else:
                    parts.append(kept)
            else:
                self.uniques.append(torch.unique(vals[consumed & ~is_neg]))
            if progress is not None:
                progress(stop, n)

        # positions outside the stream read index 0 on the gfx950 kernel: row 0 is read as a key
        row0 = self.beyond.any()
        if kv_rows is None:
            self.uniques.append(torch.zeros(1, dtype=torch.int64, device=dev)[row0.reshape(1)])
        elif self.bitmap is not None:
            self.bitmap[:1] |= row0 & (kv_rows > 0)
        else:
            parts.append(torch.where(row0, 0, kv_rows).reshape(1) if kv_rows > 0 else torch.zeros(1, dtype=torch.int64, device=dev))
            self.ids = torch.cat(parts)

        zero = torch.zeros((), dtype=torch.int64, device=dev)
        n_oor = (oor[0] if len(oor) == 1 else torch.stack(oor).sum()) if oor else zero
        n_entries = (entries[0] if len(entries) == 1 else torch.stack(entries).sum()) if entries else zero
        self.totals = torch.stack((self.negative.sum(), self.beyond.sum(), n_oor, n_entries))

    def masked_rows(self) -> torch.Tensor:
        """bool [n_q]: query rows whose processed tiles hold a masked position (see StreamScan),
        computed on first use by a second pass over the stream (no host read)."""
        if self._masked is not None:
            return self._masked
        cb, ce, n, dev = self._cb, self._ce, self.n, self.begin.device
        # Prefix facts at a slice's clipped start / end p: entries < 0 in [0, p), the last
        # position < p holding an entry >= 0 (-1: none).
        neg_at_sb = torch.zeros_like(cb)
        neg_at_se = torch.zeros_like(cb)
        lv_at_se = torch.full_like(cb, -1)
        carry_neg = torch.zeros(1, dtype=torch.int64, device=dev)
        carry_lv = torch.full((1,), -1, dtype=torch.int64, device=dev)
        step = self._chunk_entries
        for start in range(0, n, step):
            stop = min(start + step, n)
            is_neg = self.indices[start:stop] < 0
            cum_neg = torch.cumsum(is_neg, 0)
            lv = torch.cummax(torch.where(is_neg, -1, torch.arange(start, stop, device=dev)), 0).values
            if start:
                cum_neg += carry_neg
                lv = torch.maximum(lv, carry_lv)
            # the value at a point p in [start, stop] is pad[p - start]
            pad_neg = torch.cat((carry_neg, cum_neg))
            pad_lv = torch.cat((carry_lv, lv))
            if n <= step:
                neg_at_sb, neg_at_se, lv_at_se = pad_neg[cb], pad_neg[ce], pad_lv[ce]
            else:
                for p, targets in ((cb, ((neg_at_sb, pad_neg),)), (ce, ((neg_at_se, pad_neg), (lv_at_se, pad_lv)))):
                    here = (p >= start) & (p <= stop)
                    at = (p - start).clamp(0, stop - start)
                    for target, source in targets:
                        target.copy_(torch.where(here, source[at], target))
            carry_neg = cum_neg[-1:]
            carry_lv = lv[-1:]
        masked = _masked_tile_rows(self.begin, self.end, n, neg_at_sb, neg_at_se, lv_at_se, self._has_invalid)
        self._masked = masked & self.active
        return self._masked

    def consumed_ids(self) -> torch.Tensor:
        """Unique valid consumed row ids, int64 sorted (one host read: a data-dependent size)."""
        if self.bitmap is not None:
            return self.bitmap[: self.sentinel].nonzero(as_tuple=True)[0]
        if self.ids is not None:
            return torch.unique(self.ids[self.ids < self.sentinel])
        dev = self.begin.device
        return torch.unique(torch.cat(self.uniques)) if self.uniques else torch.empty(0, dtype=torch.int64, device=dev)

    def padded_ids(self) -> torch.Tensor:
        """The unique valid consumed row ids, sorted, then kv_rows: int64 of a fixed length
        min(positions + 1, kv_rows) (no host read). Needs collect="ids"."""
        assert self.ids is not None and self.kv_rows is not None
        s = torch.sort(self.ids).values
        keep = s < self.sentinel
        keep[1:] &= s[1:] != s[:-1]  # first occurrences
        m = min(s.numel(), self.kv_rows)
        out = torch.full((m + 1,), self.sentinel, dtype=torch.int64, device=s.device)
        out.scatter_(0, torch.where(keep, torch.cumsum(keep, 0) - 1, m), s)  # slot m collects duplicates and kv_rows
        return out[:m]

    def queue(self, first: _Reads) -> None:
        """Queue the counts of each kind and of consumed entries."""
        self._h1 = first.add(self.totals)

    def queue_details(self, second: _Reads, picks: _Picks, v1: list[list[int]]) -> None:
        """For the kinds found: positions outside the stream, distinct out-of-range positions;
        their example masks into `picks`."""
        n_neg, n_beyond, n_oor, _ = v1[self._h1]
        self._found = (n_neg > 0, n_beyond > 0, n_oor > 0)
        begin, end, n = self.begin, self.end, self.n
        parts = []
        if n_beyond:
            before = (end.clamp(max=0) - begin).clamp(min=0)
            after = (end - begin.clamp(min=n)).clamp(min=0)
            parts.append(((before + after) * self.beyond).sum())
        if n_oor:
            self._bad_all = self._bad[0] if len(self._bad) == 1 else torch.cat(self._bad)
            parts.append(self._bad_all.sum())
        self._h2 = second.add(torch.stack(parts)) if parts else -1
        self._pick = {}
        if self.k:
            for i, mask in enumerate((self.negative, self.beyond)):
                if self._found[i]:
                    self._pick[i] = picks.add(mask)
            if n_oor:
                self._pick[2] = picks.add(self._bad_all)

    def queue_examples(self, second: _Reads, picks: _Picks) -> None:
        """After picks.run(): queue the examples of the kinds found."""
        self._h_ex = {}
        begin, end = self.begin, self.end
        for i in (0, 1):
            if i in self._pick:
                loc = picks.local(self._pick[i])  # query rows, -1: none
                at = loc.clamp(min=0)
                self._h_ex[i] = second.add(torch.stack((loc, begin[at], end[at]), dim=1))
        if 2 in self._pick:
            p = picks.local(self._pick[2])  # stream positions, -1: none
            v = self.indices[p.clamp(min=0)].to(torch.int64)
            holds = self.active.unsqueeze(0) & (begin.unsqueeze(0) <= p.unsqueeze(1)) & (p.unsqueeze(1) < end.unsqueeze(0))
            first_q = holds.to(torch.uint8).argmax(dim=1)
            self._h_ex[2] = second.add(torch.stack((p, v, first_q, begin[first_q]), dim=1))

    def findings(self, values: Values) -> list[Finding]:
        """The index_stream findings, from what `_read_back` returned."""
        v1, v2 = values
        n_neg, n_beyond, oor_count, _ = v1[self._h1]
        details = v2[self._h2] if self._h2 >= 0 else []
        outside_total = details[0] if n_beyond else 0
        oor_positions = details[-1] if oor_count else 0
        neg_rows, beyond_rows, oor_rows = (_valid_rows(v2[self._h_ex[i]], 4 if i == 2 else 3) if i in self._h_ex else [] for i in range(3))
        n = self.n
        findings: list[Finding] = []
        if n_neg:
            exs = [{"query_row": q, "start": b, "end": e, "length": e - b} for q, b, e in neg_rows]
            findings.append(
                Finding(
                    KIND_NEG_ROW_LEN,
                    "notice",
                    n_neg,
                    "query rows",
                    exs,
                    "legal: the contract and the kernel treat a negative length as an empty row (out = 0, lse = -inf); "
                    f"query row {exs[0]['query_row']} has length {exs[0]['length']}.",
                    "index_stream",
                )
            )
        if n_beyond:
            exs = []
            for q, b, e in beyond_rows:
                outside = max(0, min(e, 0) - b) + max(0, e - max(b, n))
                exs.append({"query_row": q, "start": b, "end": e, "length": e - b, "stream_length": n, "positions_outside": outside})
            first = exs[0]
            findings.append(
                Finding(
                    KIND_INDPTR_BEYOND,
                    "violation",
                    n_beyond,
                    "query rows",
                    exs,
                    f"index reads go through a buffer descriptor sized to indices, which returns 0 out of range, so each position outside "
                    f"[0, {n}) becomes a key on KV row 0 (query row {first['query_row']}: slice [{first['start']}, {first['end']}) has "
                    f"{first['positions_outside']} position(s) outside the stream); the output is not what the contract promises.",
                    "index_stream",
                    {"positions_outside": outside_total},
                )
            )
        if oor_count:
            assert self.kv_rows is not None
            exs = [_oor_example(p, v, q, b, self.kv_rows) for p, v, q, b in oor_rows]
            first = exs[0]
            findings.append(
                Finding(
                    KIND_INDEX_OOR,
                    "violation",
                    oor_count,
                    "consumed entries",
                    exs,
                    "an index >= kv rows makes the kernel load 656 bytes past the cache with unbounded 64-bit loads (garbage "
                    "output or a memory fault); a negative index without has_invalid breaks the contract, and the gfx950 kernel "
                    f"masks it like has_invalid would (first: {first['effect']}).",
                    "index_stream",
                    {"positions": oor_positions},
                )
            )
        return findings


def scan_index_stream(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_rows: int | None,
    *,
    has_invalid: bool,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
    progress: Progress | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> StreamScan:
    """One chunked pass over the CSR stream; see `check_index_stream` for the findings.

    kv_rows None skips the range check (index_out_of_range) and keeps every id >= 0 in `consumed`.
    Memory: O(n_q) for the slice bounds plus O(chunk_entries) per chunk, plus one bool per kv row.
    Host reads: two on a clean stream, three when something is found (the consumed rows' count,
    every kind's count, then the details and examples of the kinds found; with kv_rows None one
    more per chunk).
    Raises ContractError when indices / indptr are not int32 1-D (indptr of length >= 1).
    """
    facts = _StreamFacts(
        indices,
        indptr,
        kv_rows,
        has_invalid=has_invalid,
        chunk_entries=chunk_entries,
        progress=progress,
        max_examples=max_examples,
        collect="bitmap",
    )
    consumed = facts.consumed_ids()
    values = _read_back(_Reads(), [facts], max_examples, indices.device)
    return StreamScan(facts.findings(values), consumed, facts.masked_rows(), facts.n_q, facts.n, values[0][facts._h1][3])


def _oor_example(p: int, v: int, q: int, b: int, kv_rows: int) -> dict[str, Any]:
    """The example of an out-of-range entry: index v at stream position p, in query row q (the
    first whose slice holds p; its slice starts at b)."""
    if v < 0:
        reason = "negative without has_invalid"
        effect = f"index {v} at position {p} (query row {q}) is masked by the gfx950 kernel (the key is dropped)"
    else:
        reason = "index >= kv rows"
        effect = (
            f"index {v} at position {p} (query row {q}) >= {kv_rows} kv rows: "
            f"reads bytes [{v * RECORD_BYTES}, {(v + 1) * RECORD_BYTES}) past the cache's {kv_rows * RECORD_BYTES} bytes"
        )
    return {
        "position": p,
        "query_row": q,
        "offset_in_row": p - b,
        "index": v,
        "kv_rows": kv_rows,
        "reason": reason,
        "byte_offset": v * RECORD_BYTES if v >= 0 else None,
        "effect": effect,
    }


def _masked_tile_rows(
    b: torch.Tensor, e: torch.Tensor, n: int, neg_at_sb: torch.Tensor, neg_at_se: torch.Tensor, lv_at_se: torch.Tensor, has_invalid: bool
) -> torch.Tensor:
    """For active query rows (slice [b, e), e > b): does a tile the gfx950 kernel processes hold a
    masked position? Positions outside the stream read index 0 (>= 0, so valid). Without
    has_invalid the kernel runs ceil(len / 128) tiles; with it, ceil(end_rel / 128) where end_rel is
    one past the last entry >= 0. Masked: positions past end_rel in the last tile, entries < 0."""
    length = e - b
    negs_in = neg_at_se - neg_at_sb
    if not has_invalid:
        end_rel = length
        negs = negs_in
    else:
        sb = b.clamp(0, n)
        se = e.clamp(0, n)
        all_through = (e > n) | (e <= 0)
        lv_ok = lv_at_se >= sb
        end_rel = torch.where(all_through, length, torch.where(lv_ok, lv_at_se - b + 1, torch.where(b < 0, -b, torch.zeros_like(b))))
        negs = torch.where(all_through, negs_in, torch.where(lv_ok, negs_in - (se - lv_at_se - 1), torch.zeros_like(b)))
    return (end_rel > 0) & (((end_rel % TILE) != 0) | (negs > 0))


def check_index_stream(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_rows: int,
    *,
    has_invalid: bool,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
    progress: Progress | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> list[Finding]:
    """Findings of a CSR index stream against a cache of `kv_rows` rows (scope "index_stream").

    indices: int32 1-D; indptr: int32 [n_q + 1] (any device; read in chunks of chunk_entries).
    Kinds: negative_row_length (notice, count in query rows), indptr_beyond_stream (a slice with
    positive length starting < 0 or ending > len(indices); count in query rows,
    details["positions_outside"]), index_out_of_range (a consumed entry >= kv_rows, or < 0 without
    has_invalid; count in consumed entries, each occurrence once per query row holding it,
    details["positions"] distinct stream positions).
    Raises ContractError when indices / indptr are not int32 1-D or indptr is empty.
    """
    return scan_index_stream(
        indices, indptr, kv_rows, has_invalid=has_invalid, chunk_entries=chunk_entries, progress=progress, max_examples=max_examples
    ).findings


def consumed_rows(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    *,
    has_invalid: bool,
    kv_rows: int | None = None,
    chunk_entries: int = DEFAULT_CHUNK_ENTRIES,
) -> torch.Tensor:
    """Unique flat row ids (int64, sorted, on indices' device) that some query row consumes.

    A position is consumed when it lies in a slice of positive length and inside the stream;
    entries < 0 are never rows (masked under has_invalid, a violation without it), and with
    kv_rows given, ids >= kv_rows are dropped (they are index_out_of_range findings). When a slice
    of positive length reaches outside the stream (indptr_beyond_stream), row 0 is included: the
    gfx950 kernel reads index 0 at such positions.
    Raises ContractError when indices / indptr are not int32 1-D.
    """
    return scan_index_stream(indices, indptr, kv_rows, has_invalid=has_invalid, chunk_entries=chunk_entries).consumed


class _Row0:
    """What the row-0 notice needs: NaN codes of row 0 (none for a cache of no rows) and, only
    when there are some, the masked query rows (`masked()`: bool [n_q]) and the first
    max_examples of them."""

    def __init__(self, flat: torch.Tensor, masked: Callable[[], torch.Tensor], max_examples: int) -> None:
        self.flat, self.masked, self.k = flat, masked, max(0, max_examples)
        self._h1 = self._h2 = self._hn = -1

    def queue(self, first: _Reads) -> None:
        if self.flat.shape[0]:
            self._h1 = first.add(((self.flat[0, :SCALE_OFFSET] & 0x7F) == E4M3_NAN_CODE).sum())

    def queue_details(self, second: _Reads, picks: _Picks, v1: list[list[int]]) -> None:
        self._pick = -1
        if self._h1 >= 0 and v1[self._h1][0]:
            masked = self.masked()
            self._hn = second.add(masked.sum())
            if self.k:
                self._pick = picks.add(masked)

    def queue_examples(self, second: _Reads, picks: _Picks) -> None:
        if self._pick >= 0:
            self._h2 = second.add(picks.local(self._pick))

    def findings(self, values: Values) -> list[Finding]:
        if self._hn < 0:
            return []
        nan_codes, n_rows = values[0][self._h1][0], values[1][self._hn][0]
        if n_rows == 0:
            return []
        first = values[1][self._h2] if self._h2 >= 0 else []
        exs = [{"query_row": q, "row0_nan_codes": nan_codes} for q in first if q >= 0]
        return [
            Finding(
                KIND_ROW0_NAN,
                "notice",
                n_rows,
                "query rows",
                exs,
                f"legal under the contract (unreferenced rows may hold anything), but the gfx950 kernel loads KV row 0 for masked "
                f"positions and row 0 holds {nan_codes} NaN code(s): its PV multiplies them by P' = 0, and 0 * NaN is NaN, so these "
                f"query rows (first: {exs[0]['query_row']}) are expected to get NaN output from it.",
                "index_stream",
                {"row0_nan_codes": nan_codes},
            )
        ]


def row0_notice(kv_cache: torch.Tensor, scan: StreamScan, *, max_examples: int = DEFAULT_MAX_EXAMPLES) -> list[Finding]:
    """The row0_nan_masked_reads notice: row 0 holds NaN codes and some query rows have masked
    positions in processed tiles. Legal under the contract, but the gfx950 kernel loads row 0 for
    masked positions and its PV multiplies row 0's V by P' = 0, and 0 * NaN is NaN."""
    flat = _kv_flat(kv_cache)
    part = _Row0(flat, lambda: scan.masked_rows, max_examples)
    return part.findings(_read_back(_Reads(), [part], max_examples, scan.masked_rows.device))


F32_MAX = 3.4028234663852886e38
#: relative slack on f32 partial sums of q . K: the conservative accumulation (1088 products,
#: sequential or fused without guard bits, toward zero: oracle.accumulation) errs by < 2^-10
_QK_SLACK = 1 + 2.0**-10


def check_call(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    *,
    has_invalid: bool,
    softmax_scale: float | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> list[Finding]:
    """Every precondition finding for one kernel call: the index stream, then the records of the
    consumed rows only (scope "consumed_rows"; bytes of unreferenced rows may hold anything), plus
    the row0_nan_masked_reads notice, and, when `softmax_scale` is given, the f32 range of the
    score arithmetic (softmax_scale_overflow_f32, score_overflow_f32; see `score_range_findings`),
    left out when the stream reads outside the stream or the cache.

    Host reads: one on a clean call (every check's count, read back together), two when
    something is found or row 0 holds NaN codes (then the details and examples of the kinds
    found, picked together, and the query rows with masked reads of row 0),
    plus, only when the cheap score bound flags a query row, those of the exact per-key score
    check, and one for the consumed rows' count when `progress` is given. Order: only the
    contract check must come first (it reads no data, and the scans index with the call's arrays
    as it validated them); the stream, record, row-0 and score-bound checks then run
    unconditionally on the device, and what is reported (the score check's findings only for a
    stream inside the stream and the cache, the exact score check only for flagged rows, the
    masked-reads pass over the stream only when row 0 holds NaN codes) is decided after the
    first read. Memory: the stream's positions as int64 (sorted once), the
    cache's consumed rows gathered chunk_rows at a time, 24 bytes per consumed row kept.

    Raises ContractError (via kernel.contract.validate_call) when the call's shapes, dtypes or
    devices break the contract. progress gets (consumed rows done, consumed rows total).
    """
    info = validate_call(q, kv_cache, indices, indptr, 1.0, has_invalid=has_invalid)
    stream = _StreamFacts(
        indices,
        indptr,
        info.kv_rows,
        has_invalid=has_invalid,
        chunk_entries=DEFAULT_CHUNK_ENTRIES,
        progress=None,
        max_examples=max_examples,
        collect="ids",
    )
    flat = _kv_flat(kv_cache)
    rows = stream.padded_ids().to(flat.device)
    with_score = softmax_scale is not None and q.shape[0] > 0
    acc = _RecordFacts("consumed_rows", max_examples, tuple(kv_cache.shape[:-1]), flat, want_k_max=with_score)
    total = int((rows < info.kv_rows).sum()) if progress is not None else None
    _scan_records(flat, rows, [(acc, None)], chunk_rows, progress, total=total, sentinel=info.kv_rows)
    reads = _Reads()
    row0 = _Row0(flat, stream.masked_rows, max_examples)
    suspect: torch.Tensor | None = None
    suspect_handle = -1
    if with_score:
        assert acc.k_max is not None
        q_l1 = q.to(torch.float64).abs().sum(dim=-1).amax(dim=-1)  # [n_q]
        suspect = (q_l1 * acc.k_max * _QK_SLACK >= F32_MAX) & (stream.length > 0)
        suspect_handle = reads.add(suspect.any())
    values = _read_back(reads, [stream, acc, row0], max_examples, indices.device)
    found = stream.findings(values) + acc.findings(values) + row0.findings(values)
    if softmax_scale is not None and not any(f.kind in (KIND_INDEX_OOR, KIND_INDPTR_BEYOND) for f in found):
        found += _softmax_scale_findings(softmax_scale)
        if suspect is not None and values[0][suspect_handle][0]:
            found += _score_exact(q, kv_cache, indices, indptr, suspect, has_invalid=has_invalid, max_examples=max_examples)
    return sort_findings(found)


def _consumed_positions(start: torch.Tensor, length: torch.Tensor, n: int) -> torch.Tensor:
    """bool [n]: stream positions inside some slice [start, start + length) (length >= 0), clipped
    to the stream [0, n)."""
    delta = torch.zeros(n + 1, dtype=torch.int64, device=start.device)
    live = length > 0
    delta.index_add_(0, start[live].clamp(0, n), torch.ones_like(start[live]))
    delta.index_add_(0, (start + length)[live].clamp(0, n), -torch.ones_like(start[live]))
    return torch.cumsum(delta, 0)[:n] > 0


def _softmax_scale_findings(softmax_scale: float) -> list[Finding]:
    """softmax_scale_overflow_f32 when c_log2 = f32(softmax_scale * log2 e) is not finite."""
    sigma = float(softmax_scale)
    if math.isfinite(sigma) and abs(sigma) * math.log2(math.e) * (1 + 2.0**-20) < F32_MAX:
        return []
    return [
        Finding(
            KIND_SCALE_OVERFLOW,
            "violation",
            1,
            "calls",
            [{"softmax_scale": _json_float(sigma)}],
            f"softmax_scale {sigma:g}: c_log2 = softmax_scale * log2(e) overflows f32, so every score of the call is "
            "inf or NaN and out and lse are NaN.",
            "input",
        )
    ]


def score_range_findings(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> list[Finding]:
    """f32 overflow of the score arithmetic (TOLERANCES.md section 7), for an in-range stream.

    - softmax_scale_overflow_f32: c_log2 = f32(softmax_scale * log2 e) is not finite (|scale| >=
      ~2.36e38): every score of the call is inf or NaN.
    - score_overflow_f32: for some (query row, head, key), sum_d |q_d| |K_d| (1 + 2^-10) reaches
      f32's largest finite value, so a partial sum of q . K may overflow in f32 (K's latent as the
      stored code * scale). Checked exactly per key, but only for query rows whose cheap bound
      ||q||_1 * max|K| could reach it.
    Only consumed entries count (an unconsumed entry may hold anything, a 0-row cache included).
    Vectorised over the oracle's padded row chunks; never raises for in-range inputs."""
    found = _softmax_scale_findings(softmax_scale)
    n_q = q.shape[0]
    if n_q == 0:
        return found
    kv = kv_cache.reshape(-1, RECORD_BYTES)
    start = indptr[:-1].to(torch.int64)
    length = (indptr[1:].to(torch.int64) - start).clamp_min(0)
    # cheap bound per query row: ||q||_1 (over heads: the largest) times the largest |K| it may
    # read; only consumed entries are keys (unconsumed entries of the stream may hold anything)
    ids = indices.to(torch.int64)
    usable = ids[_consumed_positions(start, length, ids.numel()) & (ids >= 0) & (ids < kv.shape[0])]
    if usable.numel() == 0:
        return found
    k_max = _k_max_rows(kv[usable.to(kv.device)]).max()
    q_l1 = q.to(torch.float64).abs().sum(dim=-1).amax(dim=-1)  # [n_q]
    suspect = (q_l1 * k_max * _QK_SLACK >= F32_MAX) & (length > 0)
    if not bool(suspect.any()):
        return found
    return found + _score_exact(q, kv_cache, indices, indptr, suspect, has_invalid=has_invalid, max_examples=max_examples)


def _score_exact(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    suspect: torch.Tensor,
    *,
    has_invalid: bool,
    max_examples: int,
) -> list[Finding]:
    """score_overflow_f32, checked per key for the query rows flagged in `suspect` (bool [n_q],
    only rows of positive length), over the oracle's padded row chunks."""
    from oracle.rows import iter_chunks  # the oracle's gathering step (no import cycle at module load)

    q64 = q.to(torch.float64).abs()
    start = indptr[:-1].to(torch.int64)
    length = (indptr[1:].to(torch.int64) - start).clamp_min(0)
    rows = torch.nonzero(suspect).flatten()
    sub_ptr = torch.cat((torch.zeros(1, dtype=torch.int64, device=length.device), length[rows].cumsum(0)))
    sub_idx = torch.cat([indices[int(start[r]) : int(start[r] + length[r])] for r in rows.tolist()]) if rows.numel() else indices[:0]
    bad_pairs = 0
    examples: list[dict[str, Any]] = []
    for chunk in iter_chunks(sub_idx, sub_ptr.to(torch.int32), kv_cache, has_invalid=has_invalid):
        if not bool(chunk.valid.any()):
            continue
        keys = torch.cat((chunk.k_latent, chunk.rope), dim=-1).abs()  # [R, L, 576]
        mag = torch.bmm(q64[rows[chunk.rows].to(q64.device)], keys.transpose(1, 2))  # [R, H, L]
        over = (mag * _QK_SLACK >= F32_MAX) & chunk.valid.unsqueeze(1)
        bad_pairs += int(over.any(dim=-1).sum())
        for r_local, h, k in torch.nonzero(over).tolist()[: max(0, max_examples - len(examples))]:
            examples.append(
                {
                    "query_row": int(rows[chunk.rows[r_local]]),
                    "head": h,
                    "kv_row": int(chunk.slots[r_local, k]),
                    "sum_abs_q_times_abs_k": _json_float(float(mag[r_local, h, k])),
                }
            )
    if not bad_pairs:
        return []
    return [
        Finding(
            KIND_SCORE_OVERFLOW,
            "violation",
            bad_pairs,
            "(query row, head) pairs",
            examples,
            f"sum_d |q_d| |K_d| reaches f32's largest value {F32_MAX:.4g} (first: query row {examples[0]['query_row']}, head "
            f"{examples[0]['head']}): a partial sum of q . K may overflow in f32, "
            "so that head's scores, out and lse may be inf or NaN.",
            "consumed_rows",
        )
    ]
