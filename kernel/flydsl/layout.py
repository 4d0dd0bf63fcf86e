"""Where the gfx950 kernel's data lives and what a row position reads: the record and launch
geometry, the LDS layout, which token and dims each lane holds in every MFMA operand, and the
index semantics of a CSR row (which index entry a position reads, when it is masked, the
has_invalid scan).

Pure integer arithmetic, written once and used both by the kernel (kernel/flydsl/
gfx950.py, on IR values of kernel/flydsl/mlir_layer.py) and on Python ints by the
lane-level models (kernel/flydsl/pipeline_model.py, tests/kernel/flydsl/test_compile.py,
tests/kernel/flydsl/test_index.py). Imports no flydsl.
"""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------- record and launch geometry
RECORD_BYTES = 656  # 512 e4m3 codes | 4 f32 scales | 64 bf16 rope
SCALE_OFFSET = 512
ROPE_OFFSET = 528
HEAD_DIM = 576
TILE = 128  # tokens per tile
THREADS = 256  # 4 waves of 64
MAX_HEADS = 16

# ---------------------------------------------------------------- LDS layout (bytes)
# Latent tile: 4 column blocks (record bytes 128b .. 128b + 128), 16 KiB each, laid out as
# [half (tokens 0-63 / 64-127)][16-byte chunk c (0..7)][slot (64)][16 B], so one DMA
# instruction fills one (half, chunk) window with every lane fetching its own token. Token
# tok of a half sits in slot token_slot(tok % 64) (bit 2 ^= bit 4): the PV transposed reads
# of lane groups 0/1 (and 2/3) then hit disjoint banks (see pipeline_model.py).
LDS_K = 0
LDS_K_BLOCK = 16384
LDS_K_HALF = 8192
LDS_K_CHUNK = 1024
# Record scales as f32 bits, [block (4)][half (2)][slot (64)] (slots as in the latent windows),
# block rows padded to 576 bytes so the QK scale-word read (lane group g reads block g) spreads
# over the 64 banks.
LDS_SCALE = 65536
SCALE_ROW_BYTES = TILE * 4 + 64
# P rows, f32 [head (16)][token (128)], rows padded to 528 bytes (bank spread).
LDS_P = LDS_SCALE + 4 * SCALE_ROW_BYTES
P_ROW_BYTES = TILE * 4 + 16
# Per-head exchange slots, f32 [head (16)][wave (4)] (tile max, then l in the epilogue).
LDS_X = LDS_P + MAX_HEADS * P_ROW_BYTES
# has_invalid scan: each wave's last valid position, i32 [wave (4)].
LDS_SCAN = LDS_X + MAX_HEADS * 4 * 4
LDS_BYTES = LDS_SCAN + 16


# ================================================================ layout
# Pure index arithmetic, written once and used both by the kernel (on IR values) and by the
# lane-level simulator in the tests (on Python ints). Byte offsets are relative to the
# workgroup's LDS base. Lane ids: t = lane % 16, g = lane // 16; w = wave.


def token_slot(x: Any) -> Any:
    """Slot (0..63) of a half's token x (0..63) in its DMA window: bit 2 flipped when bit 4 is
    set (an involution, so it is also the token a window slot holds)."""
    return x ^ ((x >> 2) & 4)


def lds_k(block: Any, tok: Any, chunk: Any) -> Any:
    """LDS byte offset of 16-byte chunk `chunk` (0..7) of record block `block` of tile token `tok`."""
    return LDS_K + block * LDS_K_BLOCK + (tok >> 6) * LDS_K_HALF + chunk * LDS_K_CHUNK + token_slot(tok & 63) * 16


def lds_scale(block: Any, tok: Any) -> Any:
    """LDS byte offset of tile token `tok`'s f32 scale of record block `block` (the same slot
    order as the latent windows: the scale DMA lane fetches the same row as its latent DMA)."""
    return LDS_SCALE + block * SCALE_ROW_BYTES + (tok >> 6) * 256 + token_slot(tok & 63) * 4


def lds_p(head: Any, tok: Any) -> Any:
    """LDS byte offset of P[tok][head] (f32)."""
    return LDS_P + head * P_ROW_BYTES + tok * 4


def lds_x(head: Any, wave: Any) -> Any:
    """LDS byte offset of wave `wave`'s exchange slot for head `head` (f32)."""
    return LDS_X + head * 16 + wave * 4


def dma_token(half: Any, lane: Any) -> Any:
    """Tile token whose 16 bytes lane `lane` copies in the DMA windows of half `half` (0, 1):
    the token window slot `lane` holds (lane l's bytes land at window + 16 l)."""
    return half * 64 + token_slot(lane)


def qk_row_token(wave: Any, s: int, t: Any) -> Any:
    """Tile token of QK A-operand row t of subtile s (lane (t, g) reads its codes and rope)."""
    return wave * 32 + s * 16 + t


def qk_out_token(wave: Any, s: int, g: Any, r: int) -> Any:
    """Tile token of QK accumulator register r of subtile s in lane group g (D row 4g + r)."""
    return wave * 32 + s * 16 + g * 4 + r


def pv_token(kc: int, g: Any, j: Any) -> Any:
    """Tile token of PV K-chunk kc, lane group g, element j (MFMA k = 8g + j).

    Chunk kc = 2hf + sub holds the 32 tokens whose bit 6 is hf and bit 2 is sub (the grouping
    kernel/emulated/gfx950.py models): token = 64hf + 16g + 8(j >> 2) + 4sub + (j & 3).
    """
    return (kc >> 1) * 64 + (kc & 1) * 4 + g * 16 + (j >> 2) * 8 + (j & 3)


def tr8_address(wave: Any, kc: int, ch: int, t: Any, g: Any) -> Any:
    """LDS byte address lane (t, g) gives ds_read_b64_tr_b8 for PV chunk (kc, ch).

    Lanes 2j and 2j + 1 address bytes 0..7 and 8..15 of 16-byte chunk ch (dims 16ch..16ch+15
    of block `wave`) of token pv_token(kc, g, j); lane t then receives dim 16ch + t of the
    8 tokens, byte j = token pv_token(kc, g, j).
    """
    return lds_k(wave, pv_token(kc, g, t >> 1), ch) + (t & 1) * 8


def qk_block(part: int, g: Any) -> Any:
    """Record block behind operand bytes 16part .. 16part + 15 of lane group g (QK MFMA).

    The MFMA's E8M0 group kb covers K bytes 32kb .. 32kb + 31, i.e. bytes 0..15 of lane groups
    2kb, 2kb + 1 (kb < 2) or bytes 16..31 of lane groups 2(kb - 2), 2(kb - 2) + 1 (kb >= 2):
    scale group kb is record block kb, and lane group g supplies block g's E8M0.
    """
    return part * 2 + (g >> 1)


def qk_dim(j: int, part: int, g: Any) -> Any:
    """First of the 16 latent dims behind bytes 16part..16part+15 of lane group g, QK MFMA j.

    MFMA j covers dims 32j .. 32j + 31 of every record block.
    """
    return qk_block(part, g) * 128 + j * 32 + (g & 1) * 16


def out_dim(wave: Any, ch: int, g: Any) -> Any:
    """First of the 4 output dims (registers r = 0..3) of PV accumulator ch in lane group g."""
    return wave * 128 + ch * 16 + g * 4


# ================================================================ index semantics
# Written once for IR values (the kernel) and Python ints (tests/kernel/flydsl/test_index.py, which
# checks them against kernel/emulated/gfx950.py's load_slots / tile_count).


def _select(cond: Any, a: Any, b: Any) -> Any:
    if isinstance(cond, bool):
        return a if cond else b
    return cond.sel(a, b)


def _smax(x: Any, k: Any) -> Any:
    return max(x, k) if isinstance(x, int) else x.smax(k)


def _smin(x: Any, k: Any) -> Any:
    return min(x, k) if isinstance(x, int) else x.smin(k)


def _sign_mask(x: Any) -> Any:
    """All ones (-1) when x < 0, else 0 (an arithmetic shift by 31 of an i32)."""
    return (-1 if x < 0 else 0) if isinstance(x, int) else x.ashr(31)


def row_skew(beg: Any) -> Any:
    """min(beg, 0): row position p reads descriptor entry p + skew (the descriptor starts at
    the row start clamped into the index buffer); p + skew < 0 lies before the buffer."""
    return _select(beg < 0, beg, 0)


def index_offset(pos: Any, skew: Any) -> Any:
    """Descriptor entry the kernel loads for row position pos (clamped at 0; slot_word discards
    what it reads when pos + skew < 0)."""
    return _smax(pos + skew, 0)


def slot_of(pos: Any, raw: Any, length: Any, skew: Any) -> Any:
    """The slot word of row position pos given the loaded word: indices[beg + pos], 0 when
    beg + pos is outside the index buffer (below it: this select; past it: the descriptor
    returned 0), -1 when pos >= len (so a slot word < 0 marks a masked position)."""
    return _select(pos < length, _select((pos + skew) < 0, 0, raw), -1)


def scan_start(length: Any, skew: Any) -> tuple[Any, Any]:
    """(entries to scan, initial last_valid) of the has_invalid scan: descriptor entries
    [0, max(len + skew, 0)) hold the row's positions -skew ..; positions below -skew read 0, a
    valid entry, so last_valid starts at min(-skew, len)."""
    return _smax(length + skew, 0), _smin(0 - skew, length)


def scan_candidate(q: Any, n_in: Any, skew: Any, entry: Any) -> Any:
    """One past row position q - skew when descriptor entry q < n_in holds an entry >= 0, else
    0 (integer masks: all ones when q < n_in, both in [0, 2^31), and entry >= 0)."""
    keep = _sign_mask(q - n_in) & ~_sign_mask(entry)
    return ((q + 1) - skew) & keep
