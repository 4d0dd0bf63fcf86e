"""Load KV cache and index-stream dumps without reading them into memory.

Formats (chosen by the file's magic bytes; the extension only has to agree with them):
- ``.npy``: numpy's format, memory-mapped (``np.load(mmap_mode="r")`` after checking the header
  against the file size);
- ``.pt``: a ``torch.save`` zip archive holding a tensor, a dict of named tensors (nested dicts
  flatten to ``a.b`` names) or a list of tensors; loaded with
  ``torch.load(mmap=True, weights_only=True, map_location="cpu")``;
- ``.safetensors``: parsed here (8-byte little-endian header length, JSON header, raw data) and
  memory-mapped with ``np.memmap``: no dependency on the safetensors package.

Roles and what each must be (checked from the header / tensor metadata, before any data is read):
kv_cache uint8 [..., 656]; indices int32 1-D; indptr int32 1-D with n_q + 1 >= 1 entries.
A multi-tensor file names the tensor for a role with an explicit key, or by the role's own name
(kv_cache / indices / indptr) when that is unambiguous; a single-tensor file needs no key.

Every problem raises `DumpError`, whose message names the file and the problem in one line; the
dtype / shape problems also carry `oracle.preconditions` findings (bad_dtype / bad_shape).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kernel.record import RECORD_BYTES
from oracle.preconditions import Finding, check_arrays

ROLES = ("kv_cache", "indices", "indptr")
KEY_FLAGS = {"kv_cache": "--kv-key", "indices": "--indices-key", "indptr": "--indptr-key"}

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # bytes

SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": torch.uint16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


class DumpError(Exception):
    """A dump that cannot be used; str() is one line naming the file and the problem."""

    def __init__(self, path: str | os.PathLike[str], problem: str, findings: list[Finding] | None = None):
        self.path = str(path)
        self.problem = problem
        self.findings = findings or []
        super().__init__(f"{self.path}: {problem}")


@dataclass
class _Entry:
    """One named tensor of a file: its dtype and shape (from metadata) and how to map it."""

    dtype: torch.dtype | None  # None: a dtype torch cannot represent
    dtype_name: str
    shape: tuple[int, ...]
    load: Callable[[], torch.Tensor]


@dataclass
class Dump:
    """Tensors of a dump, memory-mapped on the CPU.

    kv_cache: uint8 [..., 656]; indices: int32 [n] or None; indptr: int32 [n_q + 1] or None
    (built as [0, n] when indices came without indptr: one query row over the whole stream).
    sources: role -> where it came from ("file" or "file[key]", or a note).
    """

    kv_cache: torch.Tensor
    indices: torch.Tensor | None = None
    indptr: torch.Tensor | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def kv_rows(self) -> int:
        """Number of 656-byte records (flat rows) in kv_cache."""
        return self.kv_cache.numel() // RECORD_BYTES


# --------------------------------------------------------------------------- format readers


def _file_size(path: Path) -> int:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DumpError(path, "no such file") from None
    except OSError as exc:
        raise DumpError(path, f"cannot stat: {exc.strerror or exc}") from None
    if path.is_dir():
        raise DumpError(path, "is a directory, not a dump file")
    return st.st_size


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise DumpError(path, f"cannot read: {exc.strerror or exc}") from None


def detect_format(path: str | os.PathLike[str]) -> str:
    """ "npy", "pt" or "safetensors" from the magic bytes; DumpError when the file is none of them
    or its extension promises another format."""
    p = Path(path)
    size = _file_size(p)
    if size == 0:
        raise DumpError(p, "empty file (0 bytes)")
    head = _head(p, 16)
    ext = p.suffix.lower()
    if head.startswith(NPY_MAGIC):
        fmt = "npy"
    elif head.startswith(ZIP_MAGIC):
        fmt = "pt"
    elif head[:1] == b"\x80" and ext in (".pt", ".pth", ".bin"):
        raise DumpError(p, "legacy (non-zip) torch.save format cannot be memory-mapped; re-save it with a current torch.save")
    elif len(head) >= 9 and head[8:9] == b"{":
        fmt = "safetensors"
    else:
        expected = {
            ".npy": "the .npy magic \\x93NUMPY",
            ".pt": "a torch.save zip archive (PK\\x03\\x04)",
            ".pth": "a torch.save zip archive (PK\\x03\\x04)",
            ".safetensors": "a safetensors header (8-byte length, then '{')",
        }.get(ext)
        what = f"expected {expected}" if expected else "not a .npy, torch.save (.pt) or .safetensors file"
        raise DumpError(p, f"unrecognised format: {what}, found first bytes {head[:8]!r}")
    wanted = {".npy": "npy", ".pt": "pt", ".pth": "pt", ".safetensors": "safetensors"}.get(ext)
    if wanted is not None and wanted != fmt:
        raise DumpError(p, f"wrong magic for {ext}: the content is a {fmt} file (first bytes {head[:8]!r})")
    return fmt


def _npy_entries(path: Path) -> dict[str, _Entry]:
    size = _file_size(path)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                shape, fortran, dtype = np.lib.format._read_array_header(f, version)  # noqa: SLF001 (3.0)
            offset = f.tell()
    except (ValueError, SyntaxError, EOFError, OSError, struct.error) as exc:
        raise DumpError(path, f"npy header does not parse: {_one_line(exc)}") from None
    if dtype.hasobject:
        raise DumpError(path, f"npy holds Python objects (dtype {dtype}); expected a plain numeric array")
    need = math.prod(shape) * dtype.itemsize
    have = size - offset
    if have < need:
        raise DumpError(path, f"truncated: header says shape {list(shape)} {dtype} = {need} data bytes, the file holds {have}")
    if fortran and len(shape) > 1:
        raise DumpError(path, "npy is in Fortran (column-major) order; records must be row-major (C order)")
    tdtype = _torch_dtype_of_numpy(dtype)

    def load() -> torch.Tensor:
        if tdtype is None:
            raise DumpError(path, f"dtype {dtype} has no torch equivalent")
        if need == 0:
            return torch.empty(shape, dtype=tdtype)
        arr = np.memmap(path, dtype=dtype, mode="r", shape=shape, offset=offset, order="C")
        return _from_numpy(arr)

    return {"": _Entry(tdtype, str(dtype), tuple(shape), load)}


def _torch_dtype_of_numpy(dtype: np.dtype) -> torch.dtype | None:
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        return None
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        return None


def _from_numpy(arr: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only memmap: we never write to it
        return torch.from_numpy(arr)


def _safetensors_entries(path: Path) -> dict[str, _Entry]:
    size = _file_size(path)
    if size < 8:
        raise DumpError(path, f"truncated: {size} bytes, shorter than the 8-byte safetensors header length")
    (n,) = struct.unpack("<Q", _head(path, 8))
    if n > MAX_SAFETENSORS_HEADER:
        raise DumpError(path, f"safetensors header length {n} bytes is implausible (wrong magic or corrupt file)")
    if 8 + n > size:
        raise DumpError(path, f"truncated: safetensors header needs {n} bytes after the length, the file holds {size - 8}")
    with open(path, "rb") as f:
        f.seek(8)
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DumpError(path, f"safetensors header does not parse as JSON: {_one_line(exc)}") from None
    if not isinstance(header, dict):
        raise DumpError(path, "safetensors header is not a JSON object")
    data_start = 8 + n
    data_size = size - data_start
    entries: dict[str, _Entry] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _safetensors_entry(path, name, meta, data_start, data_size)
    return entries


def _safetensors_entry(path: Path, name: str, meta: Any, data_start: int, data_size: int) -> _Entry:
    bad = f"safetensors header entry {name!r} is malformed"
    if not isinstance(meta, dict):
        raise DumpError(path, f"{bad}: not an object")
    dtype_name, shape, offsets = meta.get("dtype"), meta.get("shape"), meta.get("data_offsets")
    if not isinstance(dtype_name, str):
        raise DumpError(path, f"{bad}: dtype {dtype_name!r}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise DumpError(path, f"{bad}: shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise DumpError(path, f"{bad}: data_offsets {offsets!r}")
    tdtype = SAFETENSORS_DTYPES.get(dtype_name)
    begin, end = offsets
    if tdtype is not None:
        need = math.prod(shape) * tdtype.itemsize
        if end - begin != need:
            raise DumpError(path, f"{bad}: data_offsets span {end - begin} bytes, shape {shape} {dtype_name} needs {need}")
    if end > data_size:
        raise DumpError(path, f"truncated: tensor {name!r} needs data bytes [{begin}, {end}), the file holds {data_size}")

    def load() -> torch.Tensor:
        if tdtype is None:
            raise DumpError(path, f"tensor {name!r} has dtype {dtype_name}, which torch cannot represent")
        if end == begin:
            return torch.empty(shape, dtype=tdtype)
        raw = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start + begin, shape=(end - begin,))
        return _from_numpy(raw).view(tdtype).reshape(shape)

    return _Entry(tdtype, dtype_name if tdtype is None else _dtype_name(tdtype), tuple(shape), load)


def _check_zip(path: Path, size: int) -> None:
    """Central directory present and every member's data inside the file (a cut-off archive
    otherwise fails later inside torch.load's mmap with an unhelpful OS error)."""
    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise DumpError(path, f"truncated or corrupt torch.save zip archive ({_one_line(exc)})") from None
    for info in members:
        if info.header_offset + info.compress_size > size:
            raise DumpError(
                path, f"truncated or corrupt torch.save zip archive (member {info.filename!r} ends past the file's {size} bytes)"
            )


def _pt_entries(path: Path) -> dict[str, _Entry]:
    _check_zip(path, _file_size(path))
    try:
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except (RuntimeError, zipfile.BadZipFile, EOFError, OSError, ValueError, pickle.UnpicklingError, AttributeError, KeyError) as exc:
        text = _one_line(exc)
        if "central directory" in text or "zip archive" in text or isinstance(exc, (EOFError, zipfile.BadZipFile)):
            raise DumpError(path, f"truncated or corrupt torch.save zip archive ({text})") from None
        if isinstance(exc, pickle.UnpicklingError):
            raise DumpError(path, f"torch.load(weights_only=True) refused the file: it holds more than tensors ({text})") from None
        raise DumpError(path, f"torch.load failed: {text}") from None
    tensors: dict[str, torch.Tensor] = {}
    _flatten(obj, "", tensors)
    if not tensors:
        raise DumpError(path, f"holds no tensor (a {type(obj).__name__})")
    return {k: _Entry(t.dtype, _dtype_name(t.dtype), tuple(t.shape), (lambda t=t: t)) for k, t in tensors.items()}


def _flatten(obj: Any, prefix: str, out: dict[str, torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _one_line(exc: BaseException) -> str:
    """First line of an exception's message, cut after its first sentence when that is long."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    cut = line.find(". ")
    return line[: cut + 1] if 0 < cut < len(line) - 2 and len(line) > 120 else line


_READERS = {"npy": _npy_entries, "pt": _pt_entries, "safetensors": _safetensors_entries}


def list_tensors(path: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Names in a dump file -> (dtype name, shape); "" is the name of a .npy file's one array."""
    p = Path(path)
    return {k: (e.dtype_name, e.shape) for k, e in _READERS[detect_format(p)](p).items()}


# --------------------------------------------------------------------------- role selection


class _Files:
    """Opened files, so that one file holding several roles is parsed once."""

    def __init__(self) -> None:
        self._cache: dict[Path, dict[str, _Entry]] = {}

    def entries(self, path: str | os.PathLike[str]) -> dict[str, _Entry]:
        p = Path(path)
        key = p.resolve() if p.exists() else p
        if key not in self._cache:
            self._cache[key] = _READERS[detect_format(p)](p)
        return self._cache[key]


def _pick(path: Path, entries: dict[str, _Entry], role: str, key: str | None) -> tuple[str, _Entry]:
    names = list(entries)
    shown = ", ".join(repr(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    if key is not None:
        if key not in entries:
            raise DumpError(path, f"no tensor named {key!r} for {role} (the file holds {shown})")
        return key, entries[key]
    if len(entries) == 1:
        return names[0], entries[names[0]]
    if role in entries:
        return role, entries[role]
    raise DumpError(path, f"ambiguous: the file holds {len(names)} tensors ({shown}) and none is named {role!r}; pass {KEY_FLAGS[role]}")


def _check_role(path: Path, name: str, entry: _Entry, role: str) -> None:
    label = f"{path}[{name}]" if name else str(path)
    if entry.dtype is None:
        expected = "uint8" if role == "kv_cache" else "int32"
        finding = Finding(
            "bad_dtype",
            "violation",
            1,
            "arrays",
            [{"array": label, "dtype": entry.dtype_name, "expected": expected}],
            f"{label}: {role} must be {expected}, got {entry.dtype_name}",
            "input",
        )
        raise DumpError(path, f"wrong dtype for {role}{_key_note(name)}: {entry.dtype_name}, expected {expected}", [finding])
    meta = torch.empty(entry.shape, dtype=entry.dtype, device="meta")
    findings = check_arrays(**{role: meta}, names={role: label})
    if findings:
        f = findings[0]
        ex = f.examples[0]
        if f.kind == "bad_dtype":
            problem = f"wrong dtype for {role}{_key_note(name)}: {ex['dtype']}, expected {ex['expected']}"
        elif role == "kv_cache":
            problem = f"wrong shape for kv_cache{_key_note(name)}: {list(entry.shape)}, expected [..., 656] (record width 656 bytes)"
        else:
            problem = f"wrong shape for {role}{_key_note(name)}: {list(entry.shape)}, expected {ex['expected']}"
        raise DumpError(path, problem, findings)


def _key_note(name: str) -> str:
    return f" (tensor {name!r})" if name else ""


def load_array(
    path: str | os.PathLike[str], role: str, key: str | None = None, *, _files: _Files | None = None
) -> tuple[torch.Tensor, str]:
    """Memory-map the tensor playing `role` ("kv_cache", "indices", "indptr") from a dump file.

    Returns (tensor on the CPU, source label). Raises DumpError for every problem (missing,
    truncated, unparsable, wrong magic, wrong dtype / shape for the role, ambiguous or unknown key).
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    p = Path(path)
    files = _files or _Files()
    name, entry = _pick(p, files.entries(p), role, key)
    _check_role(p, name, entry, role)
    try:
        tensor = entry.load()
    except DumpError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise DumpError(p, f"cannot map {role}{_key_note(name)}: {_one_line(exc)}") from None
    return tensor, f"{p}[{name}]" if name else str(p)


def load_dump(
    kv_path: str | os.PathLike[str],
    *,
    indices_path: str | os.PathLike[str] | None = None,
    indptr_path: str | os.PathLike[str] | None = None,
    kv_key: str | None = None,
    indices_key: str | None = None,
    indptr_key: str | None = None,
    stream_from_kv_file: bool = True,
) -> Dump:
    """Load a KV cache dump and, optionally, its index stream (all memory-mapped).

    indices / indptr come from their own files when given; else, with stream_from_kv_file, from
    tensors named "indices" / "indptr" (or the given keys) inside a multi-tensor KV file.
    indices without indptr means one query row over the whole stream (indptr = [0, n]);
    indptr without indices is an error. Raises DumpError (see `load_array`).
    """
    files = _Files()
    kv, kv_src = load_array(kv_path, "kv_cache", kv_key, _files=files)
    dump = Dump(kv_cache=kv, sources={"kv_cache": kv_src})
    kv_entries = files.entries(kv_path)
    for role, path, key in (("indices", indices_path, indices_key), ("indptr", indptr_path, indptr_key)):
        if path is None and stream_from_kv_file and len(kv_entries) > 1 and (key or role) in kv_entries:
            path = kv_path
        if path is None:
            continue
        tensor, src = load_array(path, role, key, _files=files)
        setattr(dump, role, tensor)
        dump.sources[role] = src
    if dump.indptr is not None and dump.indices is None:
        raise DumpError(dump.sources["indptr"], "indptr given without indices")
    if dump.indices is not None and dump.indptr is None:
        dump.indptr = torch.tensor([0, dump.indices.numel()], dtype=torch.int32)
        dump.sources["indptr"] = "none given: one query row over the whole stream"
    return dump
