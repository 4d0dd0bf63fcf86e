"""Counter-based random numbers that are bit-identical on every device and torch version.

Each value is a pure function of (seed, stream name, element id): splitmix64 on int64 with
wrapping multiplication and logical shifts, and floats formed with exact arithmetic only
(sums of dyadic rationals, correctly rounded division and square root), so a recipe builds the
same tensors on a laptop CPU and on a GPU.

`host_integers_many` draws the same integers as `integers_many` from numpy arrays on the host:
the same words hashed as uint64 (where a right shift is logical and a product wraps, as the
int64 patterns here), for the small index-side draws of strategies.materialize, where a numpy
op costs a fraction of a torch op's dispatch.
"""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np
import torch

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
_MIX_STEPS = ((30, _MIX1), (27, _MIX2), (31, None))  # splitmix64's finaliser: z ^= z >>> bits, then z *= mix


def _shr(x: torch.Tensor, bits: int, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (into `out` when given, which may be x itself)."""
    return torch.bitwise_right_shift(x, bits, out=out).bitwise_and_((1 << (64 - bits)) - 1)


def stream_key(seed: int, stream: str) -> int:
    """A 63-bit key for (seed, stream name), independent of Python's hash randomisation."""
    digest = hashlib.blake2b(f"{seed}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 62) - 1)


def hash_input(seed: int, stream: str, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The splitmix64 input word of each id: id * golden ratio + stream key (int64, wrapping);
    written into `out` (int64, ids' shape) when given."""
    return keyed_input(stream_key(seed, stream), ids, out=out)


def keyed_input(keys: torch.Tensor | int, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """hash_input with the stream key given: one int, or an int64 tensor broadcastable to ids (a
    key per element)."""
    z = torch.mul(ids.to(torch.int64), _GOLDEN, out=out)
    z += keys
    return z


@functools.cache
def _golden_ramp(width: int, device: torch.device) -> torch.Tensor:
    """arange(width) * golden ratio (int64, wrapping) on `device`; made once, read only."""
    return torch.arange(width, dtype=torch.int64, device=device) * _GOLDEN


def row_words(seed: int, stream: str, rows: torch.Tensor, width: int, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """hash_input of the ids rows[:, None] * width + arange(width), int64 [len(rows), width]
    (into `out` when given), as (arange * golden + key) + rows * (width * golden): the same words
    by wrapping arithmetic, in two device ops."""
    ramp = _golden_ramp(width, rows.device) + stream_key(seed, stream)
    return torch.add(ramp, rows.to(torch.int64).unsqueeze(1), alpha=_signed(width * _GOLDEN), out=out)


def keyed_row_words(keys: torch.Tensor, rows: torch.Tensor, width: int, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """row_words with a stream key per row: keys int64 [len(rows)] (stream_key of each row's seed
    and stream), so the rows of several recipes get their words in one call (the same words as
    row_words of each recipe's rows, by wrapping arithmetic); two device ops."""
    terms = torch.add(keys, rows.to(torch.int64), alpha=_signed(width * _GOLDEN))
    return torch.add(_golden_ramp(width, rows.device).unsqueeze(0), terms.unsqueeze(1), out=out)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser applied to int64 words z in place (z returned): the hash of the
    words hash_input built. One temporary of z's size; words of several streams can be mixed in
    one call (each element's result depends on its own word only)."""
    shifted = torch.empty_like(z)
    for bits, mix in _MIX_STEPS:
        z ^= _shr(z, bits, out=shifted)
        if mix is not None:
            z *= mix
    return z


def hash64(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """splitmix64 of (stream key + id) for int64 ids; int64 bit patterns, same on every device."""
    return keyed_hash64(stream_key(seed, stream), ids)


def keyed_hash64(keys: torch.Tensor | int, ids: torch.Tensor) -> torch.Tensor:
    """hash64 with the stream key given: one (stream_key of a seed and stream), or an int64 tensor
    broadcastable to ids, a key per element, so the elements of several recipes' streams are
    hashed in one call with the bits hash64 gives each (wrapping arithmetic)."""
    return mix64(keyed_input(keys, ids))


def uniform(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """f64 uniforms in [0, 1) with 53 random bits."""
    return keyed_uniform(stream_key(seed, stream), ids)


def keyed_uniform(keys: torch.Tensor | int, ids: torch.Tensor) -> torch.Tensor:
    """uniform with the stream key(s) given (keyed_hash64)."""
    return uniform_from_hash(keyed_hash64(keys, ids))


def uniform_from_hash(h: torch.Tensor) -> torch.Tensor:
    """uniform's f64 values from its int64 hashes h (h is left unchanged)."""
    return _shr(h, 11).to(torch.float64) * 2.0**-53


def uniform_below(h: torch.Tensor, p: float) -> torch.Tensor:
    """uniform_from_hash(h) < p (bool, h's shape) for p in (0, 1], compared as integers: the
    uniform is k * 2^-53 for the 53-bit k = h >>> 11, exact in float64, and p * 2^53 is exact
    too (a power-of-two scaling), so k * 2^-53 < p exactly when k < ceil(p * 2^53)."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"uniform_below needs p in (0, 1], got {p!r}")
    return _shr(h, 11) < math.ceil(p * 2.0**53)


def integers_from_hash(h: torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
    """integers' int64 values in [0, high) from its int64 hashes h (h is left unchanged)."""
    return _shr(h, 24) % high


def keyed_inputs(draws: list[tuple[torch.Tensor | int, torch.Tensor]], out: torch.Tensor) -> list[torch.Tensor]:
    """keyed_input(keys, ids) of each (keys, ids) in `draws` written into consecutive sections of
    `out` (int64, 1-D, contiguous, at least as long as all the ids together), which are returned
    viewed as their ids' shapes: mix64 of a buffer holding them hashes every draw at once."""
    sections = []
    first = 0
    for keys, ids in draws:
        section = out[first : first + ids.numel()].view(ids.shape)
        keyed_input(keys, ids, out=section)
        sections.append(section)
        first += ids.numel()
    return sections


def integers(seed: int, stream: str, ids: torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
    """int64 in [0, high) (high <= 2^40 keeps the modulo bias below 2^-23)."""
    return keyed_integers(stream_key(seed, stream), ids, high)


def keyed_integers(keys: torch.Tensor | int, ids: torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
    """integers with the stream key(s) given (keyed_hash64)."""
    return integers_from_hash(keyed_hash64(keys, ids), high)


def integers_many(seed: int, draws: list[tuple[str, torch.Tensor, int | torch.Tensor]]) -> list[torch.Tensor]:
    """integers(seed, stream, ids, high) of each (stream, ids, high) in `draws`, each shaped as its
    ids, with the same values: every draw's words go into one buffer, which is hashed by one mix64
    and shifted once (each word's hash depends on that word alone), then each draw takes its
    modulo. The ids (int64) of every draw lie on one device."""
    if not draws:
        return []
    words = torch.empty(sum(ids.numel() for _, ids, _ in draws), dtype=torch.int64, device=draws[0][1].device)
    sections = keyed_inputs([(stream_key(seed, stream), ids) for stream, ids, _ in draws], words)
    # in place, so each section holds its draw's shifted hashes: integers_from_hash's shift, once for every draw
    _shr(mix64(words), 24, out=words)
    return [section % high for section, (_, _, high) in zip(sections, draws, strict=True)]


def normal_like(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """f64 bell-shaped values, mean 0, variance 1, support [-3, 3]: Irwin-Hall of three 21-bit
    uniforms from one hash (exact arithmetic, hence identical everywhere: the three parts are
    summed as integers below 2^23, which float64 holds exactly)."""
    return normal_from_hash(hash64(seed, stream, ids))


def normal_from_hash(h: torch.Tensor) -> torch.Tensor:
    """normal_like's f64 values from its int64 hashes h (h is left unchanged)."""
    low21 = (1 << 21) - 1
    total = torch.bitwise_right_shift(h, 43).bitwise_and_(low21)
    part = torch.bitwise_right_shift(h, 22).bitwise_and_(low21)
    total += part
    total += torch.bitwise_right_shift(h, 1, out=part).bitwise_and_(low21)
    x = total.to(torch.float64)
    x *= 2.0**-20
    x -= 3.0
    return x


_HOST_GOLDEN = np.uint64(_GOLDEN & _MASK64)
_HOST_MIXES = tuple((np.uint64(bits), None if mix is None else np.uint64(mix & _MASK64)) for bits, mix in _MIX_STEPS)


def _host_mix64(z: np.ndarray) -> None:
    """mix64 of uint64 words z in place (numpy: >> is logical on uint64, * wraps)."""
    shifted = np.empty_like(z)
    for bits, mix in _HOST_MIXES:
        np.right_shift(z, bits, out=shifted)
        z ^= shifted
        if mix is not None:
            z *= mix


def host_integers_many(seed: int, draws: list[tuple[str, np.ndarray, int]]) -> list[np.ndarray]:
    """integers_many(seed, draws) on the host: each (stream, ids, high) with ids a numpy integer
    array (values in [0, 2^63)) and `high` an int >= 1; each result int64, shaped as its ids, with
    the bits integers_many gives the same ids as an int64 tensor (the same words, hashed as uint64:
    wrapping products and logical shifts give the int64 patterns' bits)."""
    if not draws:
        return []
    sizes = [ids.size for _, ids, _ in draws]
    words = np.empty(sum(sizes), dtype=np.uint64)
    first = 0
    for (stream, ids, _), size in zip(draws, sizes, strict=True):
        section = words[first : first + size]
        np.multiply(ids.reshape(-1).astype(np.uint64), _HOST_GOLDEN, out=section)
        section += np.uint64(stream_key(seed, stream))
        first += size
    _host_mix64(words)
    words >>= np.uint64(24)
    values = []
    first = 0
    for (_, ids, high), size in zip(draws, sizes, strict=True):
        values.append((words[first : first + size] % np.uint64(high)).astype(np.int64).reshape(ids.shape))
        first += size
    return values


def host_integers(seed: int, stream: str, ids: np.ndarray, high: int) -> np.ndarray:
    """integers(seed, stream, ids, high) on the host (host_integers_many of one draw)."""
    return host_integers_many(seed, [(stream, ids, high)])[0]
