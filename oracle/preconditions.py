"""Precondition checks for fp8_ds_mla KV caches and CSR index streams, as structured findings.

The gfx950 kernel relies on facts the host cannot check cheaply (docs/design.md section 2, the seed's
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
streams): memory is bounded by a chunk's temporaries (plus one bool per kv row for the consumed-row
bitmap), a cache is never copied as a whole, and CPU, CUDA and memory-mapped numpy-backed tensors
all work. Progress callbacks receive (items_done, items_total) after every chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from kernel.contract import ContractError, validate_call
from kernel.fp8 import E4M3_NAN_CODE
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
    return torch.tensor([bits - (1 << 32) if bits >= 1 << 31 else bits], dtype=torch.int32).view(torch.float32).item()


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


# --------------------------------------------------------------------------- record scan


@dataclass
class _ChunkEvents:
    """What one chunk of records holds that matters, with local row indices (int64):
    bad scales (not a positive normal power of two <= 2^7) and rows holding NaN codes."""

    start: int  # global id of local row 0 when ids is None (a contiguous scan)
    ids: torch.Tensor | None  # global ids of the chunk's rows when gathered
    n_rows: int
    scale_local: torch.Tensor  # local row of each bad scale
    scale_block: torch.Tensor  # its block 0..3
    scale_bits: torch.Tensor  # its 32-bit pattern, int64 in [0, 2^32)
    nan_local: torch.Tensor  # local rows holding NaN codes
    nan_counts: torch.Tensor  # NaN codes in each such row
    nan_first: torch.Tensor  # latent position of its first NaN code
    nan_first_code: torch.Tensor  # that code (0x7F or 0xFF)

    def global_ids(self, local: torch.Tensor) -> torch.Tensor:
        return local + self.start if self.ids is None else self.ids[local]


class _RecordAccumulator:
    """Exact counts and first examples of record findings over the rows a scan admits."""

    def __init__(self, scope: str, max_examples: int, lead_shape: tuple[int, ...], row_filter: torch.Tensor | None):
        self.scope = scope
        self.max_examples = max_examples
        self.lead_shape = lead_shape
        self.row_filter = row_filter  # bool [kv_rows] on the scan device, or None = every row
        self.counts = {KIND_SCALE_NOT_POW2: 0, KIND_SCALE_ABOVE_CAP: 0, KIND_SCALE_BAD: 0, KIND_NAN_CODES: 0}
        self.rows = {k: 0 for k in self.counts}
        self.classes: dict[str, int] = {}
        self.examples: dict[str, list[dict[str, Any]]] = {k: [] for k in self.counts}

    def _where(self, row: int) -> dict[str, Any]:
        where: dict[str, Any] = {"row": row}
        if len(self.lead_shape) > 1:
            idx, rem = [], row
            for size in reversed(self.lead_shape):
                idx.append(rem % size)
                rem //= size
            where["cache_index"] = idx[::-1]
        return where

    def _keep(self, ev: _ChunkEvents, local: torch.Tensor) -> torch.Tensor | None:
        if self.row_filter is None:
            return None
        return self.row_filter[ev.global_ids(local)]

    def add(self, ev: _ChunkEvents) -> None:
        """Fold one chunk's events in (rows outside row_filter ignored)."""
        if ev.scale_local.numel():
            self._add_scales(ev)
        if ev.nan_local.numel():
            self._add_nans(ev)

    def _add_scales(self, ev: _ChunkEvents) -> None:
        local, block, b = ev.scale_local, ev.scale_block, ev.scale_bits
        keep = self._keep(ev, local)
        if keep is not None:
            local, block, b = local[keep], block[keep], b[keep]
            if local.numel() == 0:
                return
        field_ = (b >> 23) & 0xFF
        nonpos_nonfinite = ((b >> 31) == 1) | (b == 0) | (field_ == 0xFF)
        above_cap = ~nonpos_nonfinite & (b > _F32_BITS_CAP)
        not_pow2 = ~nonpos_nonfinite & (((b & 0x7FFFFF) != 0) | (field_ == 0))
        for kind, mask in ((KIND_SCALE_BAD, nonpos_nonfinite), (KIND_SCALE_ABOVE_CAP, above_cap), (KIND_SCALE_NOT_POW2, not_pow2)):
            n = int(mask.sum())
            if n == 0:
                continue
            self.counts[kind] += n
            self.rows[kind] += int(torch.unique(local[mask]).numel())
            if kind == KIND_SCALE_BAD:
                for cls, m in _bad_scale_classes(b[mask]).items():
                    self.classes[cls] = self.classes.get(cls, 0) + m
            room = self.max_examples - len(self.examples[kind])
            if room > 0:
                sel = mask.nonzero(as_tuple=True)[0][:room]
                for row, bl, bv in zip(ev.global_ids(local[sel]).tolist(), block[sel].tolist(), b[sel].tolist()):
                    ex = self._where(row)
                    ex["block"] = bl
                    ex["byte_offset"] = row * RECORD_BYTES + SCALE_OFFSET + 4 * bl
                    ex.update(scale_effect(bv))
                    self.examples[kind].append(ex)

    def _add_nans(self, ev: _ChunkEvents) -> None:
        local, counts, first, code = ev.nan_local, ev.nan_counts, ev.nan_first, ev.nan_first_code
        keep = self._keep(ev, local)
        if keep is not None:
            local, counts, first, code = local[keep], counts[keep], first[keep], code[keep]
            if local.numel() == 0:
                return
        self.counts[KIND_NAN_CODES] += int(counts.sum())
        self.rows[KIND_NAN_CODES] += int(local.numel())
        room = self.max_examples - len(self.examples[KIND_NAN_CODES])
        if room > 0:
            for row, cnt, pos, c in zip(
                ev.global_ids(local[:room]).tolist(), counts[:room].tolist(), first[:room].tolist(), code[:room].tolist()
            ):
                ex = self._where(row)
                ex.update(position=pos, block=pos // 128, code=f"0x{c:02x}", nan_codes_in_row=cnt, byte_offset=row * RECORD_BYTES + pos)
                self.examples[KIND_NAN_CODES].append(ex)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for kind in (KIND_SCALE_BAD, KIND_SCALE_ABOVE_CAP, KIND_SCALE_NOT_POW2):
            if self.counts[kind]:
                details: dict[str, Any] = {"rows": self.rows[kind]}
                if kind == KIND_SCALE_BAD:
                    details["by_class"] = dict(sorted(self.classes.items()))
                exs = self.examples[kind]
                out.append(
                    Finding(
                        kind, "violation", self.counts[kind], "scales", exs, _consequence(_SCALE_GENERAL[kind], exs), self.scope, details
                    )
                )
        if self.counts[KIND_NAN_CODES]:
            exs = self.examples[KIND_NAN_CODES]
            first = exs[0]
            who = "the query rows that consume these rows" if self.scope == "consumed_rows" else "any query row that consumes such a row"
            consequence = (
                f"e4m3 codes 0x7F/0xFF are NaN: the QK scores and V of such a row are NaN, so out and lse are NaN for {who} "
                f"(row {first['row']} holds {first['nan_codes_in_row']} NaN code(s), the first at latent position {first['position']})."
            )
            out.append(
                Finding(
                    KIND_NAN_CODES,
                    "violation",
                    self.counts[KIND_NAN_CODES],
                    "codes",
                    exs,
                    consequence,
                    self.scope,
                    {"rows": self.rows[KIND_NAN_CODES]},
                )
            )
        return out


def _bad_scale_classes(b: torch.Tensor) -> dict[str, int]:
    field_ = (b >> 23) & 0xFF
    mant = b & 0x7FFFFF
    neg = (b >> 31) == 1
    nan = (field_ == 0xFF) & (mant != 0)
    inf = (field_ == 0xFF) & (mant == 0)
    zero = (b & 0x7FFFFFFF) == 0
    classes = {"nan": nan, "+inf": inf & ~neg, "-inf": inf & neg, "zero": zero, "negative": neg & ~nan & ~inf & ~zero}
    return {k: int(v.sum()) for k, v in classes.items() if bool(v.any())}


def _chunk_events(chunk: torch.Tensor, start: int, ids: torch.Tensor | None) -> _ChunkEvents:
    """Events of records uint8 [c, 656] (a view or a gathered copy)."""
    # Scales as signed int32 bits: good = positive normal power of two <= 2^7, i.e. a zero
    # mantissa and bits in [bits(2^-126), bits(2^7)] (negative patterns are < 0 as int32).
    bits32 = chunk[:, SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32)
    bad = ((bits32 & 0x007FFFFF) != 0) | (bits32 < _F32_BITS_MIN_NORMAL) | (bits32 > _F32_BITS_CAP)
    if bool(bad.any()):
        local, block = bad.nonzero(as_tuple=True)
        sbits = bits32[local, block].to(torch.int64) & 0xFFFFFFFF
    else:
        local = block = sbits = torch.empty(0, dtype=torch.int64, device=chunk.device)
    nan_local = _rows_with_nan_codes(chunk)
    if nan_local.numel():
        latent = chunk[nan_local, :SCALE_OFFSET]
        is_nan = (latent & 0x7F) == E4M3_NAN_CODE
        counts = is_nan.sum(dim=1)
        first = is_nan.to(torch.uint8).argmax(dim=1)
        first_code = latent.gather(1, first.unsqueeze(1)).squeeze(1).to(torch.int64)
    else:
        counts = first = first_code = nan_local
    return _ChunkEvents(start, ids, chunk.shape[0], local, block, sbits, nan_local, counts, first, first_code)


def _rows_with_nan_codes(chunk: torch.Tensor) -> torch.Tensor:
    """Local indices (int64) of the chunk's rows holding an e4m3 NaN code (0x7F / 0xFF).

    Fast path: 8 codes per int64 word; a byte b has (b & 0x7F) + 1 == 0x80 exactly when it is a
    NaN code, and the add never carries into the next byte; one whole-chunk any() first, the
    per-row reduction only for a chunk that has a NaN. Falls back to bytes when the chunk's
    address is not 8-byte aligned."""
    words = None
    if chunk.data_ptr() % 8 == 0 and chunk.is_contiguous():
        try:
            words = chunk.view(torch.int64)[:, : SCALE_OFFSET // 8]
        except RuntimeError:
            words = None
    if words is not None:
        t = words & _I64_M7F
        t += _I64_M01
        t &= _I64_M80
        if not bool(t.any()):
            return torch.empty(0, dtype=torch.int64, device=chunk.device)
        return t.any(dim=1).nonzero(as_tuple=True)[0]
    return ((chunk[:, :SCALE_OFFSET] & 0x7F) == E4M3_NAN_CODE).any(dim=1).nonzero(as_tuple=True)[0]


def _scan_records(
    kv_cache: torch.Tensor,
    rows: torch.Tensor | None,
    accumulators: Sequence[_RecordAccumulator],
    chunk_rows: int,
    progress: Progress | None,
) -> None:
    """Feed every chunk's events to the accumulators: a contiguous scan of views when rows is
    None, else gathers of chunk_rows listed rows at a time."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    flat = _kv_flat(kv_cache)
    total = flat.shape[0] if rows is None else rows.numel()
    if progress is not None:
        progress(0, total)
    for start in range(0, total, chunk_rows):
        stop = min(start + chunk_rows, total)
        if rows is None:
            ev = _chunk_events(flat[start:stop], start, None)
        else:
            ids = rows[start:stop]
            ev = _chunk_events(flat.index_select(0, ids), 0, ids)
        for acc in accumulators:
            acc.add(ev)
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
    Raises ContractError for a wrong dtype or shape or a non-contiguous cache, ValueError for row
    ids outside [0, kv rows).
    """
    label = scope or ("all_rows" if rows is None else "selected_rows")
    return _check_records(kv_cache, rows, label, chunk_rows, progress, max_examples)


def _check_records(
    kv_cache: torch.Tensor,
    rows: torch.Tensor | Sequence[int] | None,
    scope: str,
    chunk_rows: int,
    progress: Progress | None,
    max_examples: int,
) -> list[Finding]:
    flat = _kv_flat(kv_cache)
    ids = None if rows is None else _normalise_rows(rows, flat.shape[0], flat.device)
    acc = _RecordAccumulator(scope, max_examples, tuple(kv_cache.shape[:-1]), None)
    _scan_records(kv_cache, ids, [acc], chunk_rows, progress)
    return acc.findings()


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
    acc_c = _RecordAccumulator("consumed_rows", max_examples, lead, mask)
    acc_a = _RecordAccumulator("all_rows", max_examples, lead, None)
    _scan_records(kv_cache, None, [acc_c, acc_a], chunk_rows, progress)
    return acc_c.findings(), acc_a.findings()


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
    Raises ContractError when indices / indptr are not int32 1-D (indptr of length >= 1).
    """
    _require_stream(indices, indptr)
    dev = indices.device
    n = indices.numel()
    ptr = indptr.to(device=dev, dtype=torch.int64)
    n_q = ptr.numel() - 1
    begin, end = ptr[:-1], ptr[1:]
    length = end - begin
    active = length > 0
    findings: list[Finding] = []

    neg = (length < 0).nonzero(as_tuple=True)[0]
    if neg.numel():
        exs = [
            {"query_row": q, "start": b, "end": e, "length": e - b}
            for q, b, e in zip(neg[:max_examples].tolist(), begin[neg[:max_examples]].tolist(), end[neg[:max_examples]].tolist())
        ]
        findings.append(
            Finding(
                KIND_NEG_ROW_LEN,
                "notice",
                int(neg.numel()),
                "query rows",
                exs,
                "legal: the contract and the kernel treat a negative length as an empty row (out = 0, lse = -inf); "
                f"query row {exs[0]['query_row']} has length {exs[0]['length']}.",
                "index_stream",
            )
        )

    beyond = (active & ((begin < 0) | (end > n))).nonzero(as_tuple=True)[0]
    if beyond.numel():
        sel = beyond[:max_examples]
        exs = []
        for q, b, e in zip(sel.tolist(), begin[sel].tolist(), end[sel].tolist()):
            outside = max(0, min(e, 0) - b) + max(0, e - max(b, n))
            exs.append({"query_row": q, "start": b, "end": e, "length": e - b, "stream_length": n, "positions_outside": outside})
        first = exs[0]
        findings.append(
            Finding(
                KIND_INDPTR_BEYOND,
                "violation",
                int(beyond.numel()),
                "query rows",
                exs,
                f"index reads go through a buffer descriptor sized to indices, which returns 0 out of range, so each position outside "
                f"[0, {n}) becomes a key on KV row 0 (query row {first['query_row']}: slice [{first['start']}, {first['end']}) has "
                f"{first['positions_outside']} position(s) outside the stream); the output is not what the contract promises.",
                "index_stream",
                {"positions_outside": int(_outside_total(begin[beyond], end[beyond], n))},
            )
        )

    # Coverage: how many active slices hold each stream position (clipped to the stream).
    cb = begin.clamp(0, n)[active]
    ce = end.clamp(0, n)[active]
    cb_sorted, _ = torch.sort(cb)
    ce_sorted, _ = torch.sort(ce)
    # Prefix facts at points (for the row-0 notice): negatives before p, last entry >= 0 before p.
    points = torch.cat([cb, ce])
    order = torch.argsort(points)
    pts_sorted = points[order]
    neg_before = torch.zeros_like(points)
    last_valid = torch.full_like(points, -1)

    oor_count = 0
    oor_positions = 0
    oor_examples: list[dict[str, Any]] = []
    bitmap = torch.zeros(kv_rows, dtype=torch.bool, device=dev) if kv_rows is not None else None
    uniques: list[torch.Tensor] = []
    carry_neg = 0
    carry_lv = -1
    consumed_entries = 0
    if progress is not None:
        progress(0, n)
    for start in range(0, n, chunk_entries):
        stop = min(start + chunk_entries, n)
        vals = indices[start:stop].to(torch.int64)
        pos = torch.arange(start, stop, device=dev)
        cov = torch.searchsorted(cb_sorted, pos, right=True) - torch.searchsorted(ce_sorted, pos, right=True)
        consumed = cov > 0
        consumed_entries += int(cov.sum())
        is_neg = vals < 0
        if kv_rows is not None:
            bad = consumed & ((vals >= kv_rows) | (is_neg if not has_invalid else torch.zeros_like(is_neg)))
            if bool(bad.any()):
                oor_count += int(cov[bad].sum())
                oor_positions += int(bad.sum())
                room = max_examples - len(oor_examples)
                if room > 0:
                    bp = bad.nonzero(as_tuple=True)[0][:room]
                    oor_examples.extend(_oor_examples(pos[bp], vals[bp], begin, end, active, kv_rows))
        valid = consumed & ~is_neg
        if bitmap is not None:
            valid &= vals < kv_rows
            bitmap[vals[valid]] = True
        else:
            uniques.append(torch.unique(vals[valid]))
        # prefix facts for points p in (start, stop]
        lo = int(torch.searchsorted(pts_sorted, start, right=True))
        hi = int(torch.searchsorted(pts_sorted, stop, right=True))
        cum_neg = torch.cumsum(is_neg.to(torch.int64), 0) + carry_neg
        lv = torch.cummax(torch.where(is_neg, torch.full_like(pos, -1), pos), 0).values.clamp(min=carry_lv)
        if hi > lo:
            which = order[lo:hi]
            local = pts_sorted[lo:hi] - start - 1
            neg_before[which] = cum_neg[local]
            last_valid[which] = lv[local]
        carry_neg = int(cum_neg[-1])
        carry_lv = int(lv[-1])
        if progress is not None:
            progress(stop, n)

    if oor_count:
        first = oor_examples[0]
        findings.append(
            Finding(
                KIND_INDEX_OOR,
                "violation",
                oor_count,
                "consumed entries",
                oor_examples,
                "an index >= kv rows makes the kernel load 656 bytes past the cache with unbounded 64-bit loads (garbage "
                "output or a memory fault); a negative index without has_invalid breaks the contract, and the gfx950 kernel "
                f"masks it like has_invalid would (first: {first['effect']}).",
                "index_stream",
                {"positions": oor_positions},
            )
        )

    if beyond.numel() and (kv_rows is None or kv_rows > 0):
        # positions outside the stream read index 0 on the gfx950 kernel: row 0 is read as a key
        if bitmap is not None:
            bitmap[0] = True
        else:
            uniques.append(torch.zeros(1, dtype=torch.int64, device=dev))
    if bitmap is not None:
        consumed_ids = bitmap.nonzero(as_tuple=True)[0]
    else:
        consumed_ids = torch.unique(torch.cat(uniques)) if uniques else torch.empty(0, dtype=torch.int64, device=dev)

    masked_active = _masked_tile_rows(
        begin[active], end[active], n, neg_before[: cb.numel()], neg_before[cb.numel() :], last_valid[cb.numel() :], has_invalid
    )
    masked_rows = torch.zeros(n_q, dtype=torch.bool, device=dev)
    masked_rows[active] = masked_active
    return StreamScan(findings, consumed_ids, masked_rows, n_q, n, consumed_entries)


def _outside_total(b: torch.Tensor, e: torch.Tensor, n: int) -> int:
    before = (torch.minimum(e, torch.zeros_like(e)) - b).clamp(min=0)
    after = (e - torch.maximum(b, torch.full_like(b, n))).clamp(min=0)
    return int((before + after).sum())


def _oor_examples(
    pos: torch.Tensor, vals: torch.Tensor, begin: torch.Tensor, end: torch.Tensor, active: torch.Tensor, kv_rows: int
) -> list[dict[str, Any]]:
    """Examples for out-of-range entries at stream positions `pos` (a few): the first query row
    whose slice holds each position."""
    holds = active.unsqueeze(0) & (begin.unsqueeze(0) <= pos.unsqueeze(1)) & (pos.unsqueeze(1) < end.unsqueeze(0))
    first_q = holds.to(torch.uint8).argmax(dim=1)
    out = []
    for p, v, q in zip(pos.tolist(), vals.tolist(), first_q.tolist()):
        b = int(begin[q])
        if v < 0:
            reason = "negative without has_invalid"
            effect = f"index {v} at position {p} (query row {q}) is masked by the gfx950 kernel (the key is dropped)"
        else:
            reason = "index >= kv rows"
            effect = (
                f"index {v} at position {p} (query row {q}) >= {kv_rows} kv rows: "
                f"reads bytes [{v * RECORD_BYTES}, {(v + 1) * RECORD_BYTES}) past the cache's {kv_rows * RECORD_BYTES} bytes"
            )
        out.append(
            {
                "position": p,
                "query_row": q,
                "offset_in_row": p - b,
                "index": v,
                "kv_rows": kv_rows,
                "reason": reason,
                "byte_offset": v * RECORD_BYTES if v >= 0 else None,
                "effect": effect,
            }
        )
    return out


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


def row0_notice(kv_cache: torch.Tensor, scan: StreamScan, *, max_examples: int = DEFAULT_MAX_EXAMPLES) -> list[Finding]:
    """The row0_nan_masked_reads notice: row 0 holds NaN codes and some query rows have masked
    positions in processed tiles. Legal under the contract, but the gfx950 kernel loads row 0 for
    masked positions and its PV multiplies row 0's V by P' = 0, and 0 * NaN is NaN."""
    flat = _kv_flat(kv_cache)
    if flat.shape[0] == 0 or not bool(scan.masked_rows.any()):
        return []
    row0 = flat[0:1]
    nan_codes = int(((row0[:, :SCALE_OFFSET] & 0x7F) == E4M3_NAN_CODE).sum())
    if nan_codes == 0:
        return []
    rows = scan.masked_rows.nonzero(as_tuple=True)[0]
    exs = [{"query_row": q, "row0_nan_codes": nan_codes} for q in rows[:max_examples].tolist()]
    return [
        Finding(
            KIND_ROW0_NAN,
            "notice",
            int(rows.numel()),
            "query rows",
            exs,
            f"legal under the contract (unreferenced rows may hold anything), but the gfx950 kernel loads KV row 0 for masked "
            f"positions and row 0 holds {nan_codes} NaN code(s): its PV multiplies them by P' = 0, and 0 * NaN is NaN, so these "
            f"query rows (first: {exs[0]['query_row']}) are expected to get NaN output from it.",
            "index_stream",
            {"row0_nan_codes": nan_codes},
        )
    ]


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
    score arithmetic (softmax_scale_overflow_f32, score_overflow_f32; see `score_range_findings`).

    Raises ContractError (via kernel.contract.validate_call) when the call's shapes, dtypes or
    devices break the contract. progress gets (consumed rows done, consumed rows total).
    """
    info = validate_call(q, kv_cache, indices, indptr, 1.0, has_invalid=has_invalid)
    scan = scan_index_stream(indices, indptr, info.kv_rows, has_invalid=has_invalid, max_examples=max_examples)
    found = list(scan.findings)
    found += _check_records(kv_cache, scan.consumed.to(kv_cache.device), "consumed_rows", chunk_rows, progress, max_examples)
    found += row0_notice(kv_cache, scan, max_examples=max_examples)
    if softmax_scale is not None and not any(f.kind in (KIND_INDEX_OOR, KIND_INDPTR_BEYOND) for f in found):
        found += score_range_findings(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, max_examples=max_examples)
    return sort_findings(found)


def _consumed_positions(start: torch.Tensor, length: torch.Tensor, n: int) -> torch.Tensor:
    """bool [n]: stream positions inside some slice [start, start + length) (length >= 0), clipped
    to the stream [0, n)."""
    delta = torch.zeros(n + 1, dtype=torch.int64, device=start.device)
    live = length > 0
    delta.index_add_(0, start[live].clamp(0, n), torch.ones_like(start[live]))
    delta.index_add_(0, (start + length)[live].clamp(0, n), -torch.ones_like(start[live]))
    return torch.cumsum(delta, 0)[:n] > 0


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
    from oracle.rows import iter_chunks  # the oracle's gathering step (no import cycle at module load)

    found: list[Finding] = []
    sigma = float(softmax_scale)
    if not math.isfinite(sigma) or abs(sigma) * math.log2(math.e) * (1 + 2.0**-20) >= F32_MAX:
        found.append(
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
        )
    q64 = q.to(torch.float64).abs()
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
    recs = kv[usable.to(kv.device)]
    scale = recs[:, SCALE_OFFSET : SCALE_OFFSET + 16].contiguous().view(torch.float32).abs().to(torch.float64).amax(dim=-1)
    rope = recs[:, ROPE_OFFSET:].contiguous().view(torch.bfloat16).to(torch.float64).abs().amax(dim=-1)
    k_max = float(torch.maximum(scale * 448.0, rope).max().cpu()) if recs.shape[0] else 0.0
    q_l1 = q64.sum(dim=-1).amax(dim=-1)  # [n_q]
    suspect = (q_l1 * k_max * _QK_SLACK >= F32_MAX) & (length > 0)
    if not bool(suspect.any()):
        return found
    rows = torch.nonzero(suspect).flatten()
    sub_ptr = torch.cat((torch.zeros(1, dtype=torch.int64), length[rows].cumsum(0)))
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
    if bad_pairs:
        found.append(
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
        )
    return found
