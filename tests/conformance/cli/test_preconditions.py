"""`python -m conformance preconditions`: exit codes, the three formats, malformed dumps."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conformance.cli import main
from conformance.tools.dumps import DumpError, list_tensors, load_dump
from kernel.record import RECORD_BYTES, SCALE_OFFSET, encode_records

REPO = Path(__file__).resolve().parents[3]


def records(n: int = 64, seed: int = 0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    lat = torch.randn(n, 512, generator=g) * 3.0
    rope = torch.randn(n, 64, generator=g).bfloat16()
    return encode_records(lat, rope, "pow2").numpy()


def put_scale(rec: np.ndarray, row: int, block: int, value: float) -> None:
    rec[row, SCALE_OFFSET + 4 * block : SCALE_OFFSET + 4 * block + 4] = np.frombuffer(struct.pack("<f", value), np.uint8)


def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Minimal safetensors writer (U8 / I32 / I64 / F32), header padded to 8 bytes."""
    names = {np.uint8: "U8", np.int32: "I32", np.int64: "I64", np.float32: "F32"}
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": names[arr.dtype.type], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def run_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["preconditions", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def run_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "conformance", "preconditions", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dumps")
    clean = records()
    out: dict[str, Path] = {}

    def npy(name: str, arr: np.ndarray) -> Path:
        np.save(d / f"{name}.npy", arr)
        out[name] = d / f"{name}.npy"
        return out[name]

    npy("clean", clean)
    for kind, edit in {
        "scale_not_pow2": lambda r: put_scale(r, 5, 1, 3.0),
        "scale_above_cap": lambda r: put_scale(r, 6, 2, 256.0),
        "scale_nonpositive_or_nonfinite": lambda r: put_scale(r, 7, 3, float("nan")),
        "nan_codes": lambda r: r.__setitem__((8, 100), 0x7F),
    }.items():
        rec = clean.copy()
        edit(rec)
        npy(kind, rec)
    npy("idx_oor", np.array([1, 2, 64, 3], np.int32))
    npy("ptr_oor", np.array([0, 2, 4], np.int32))
    npy("idx_ok", np.array([1, 2, 3, 4], np.int32))
    npy("ptr_beyond", np.array([0, 2, 6], np.int32))
    npy("ptr_negative", np.array([0, 2, 1, 4], np.int32))
    # a cache whose only violation (scale 3.0 in row 40) is in a row no index references
    unref = clean.copy()
    put_scale(unref, 40, 0, 3.0)
    npy("unreferenced_violation", unref)

    npy("wrong_dtype", np.zeros((4, 164), np.float32))
    npy("wrong_width", np.zeros((4, 655), np.uint8))
    npy("idx_int64", np.array([1, 2], np.int64))
    data = (d / "clean.npy").read_bytes()
    (d / "truncated.npy").write_bytes(data[: len(data) // 2])
    out["truncated_npy"] = d / "truncated.npy"
    save_safetensors(
        d / "multi.safetensors", {"kv_cache": unref, "indices": np.array([1, 2, 3], np.int32), "indptr": np.array([0, 3], np.int32)}
    )
    out["multi_st"] = d / "multi.safetensors"
    save_safetensors(d / "two.safetensors", {"a": clean, "b": clean})
    out["ambiguous_st"] = d / "two.safetensors"
    data = (d / "multi.safetensors").read_bytes()
    (d / "truncated.safetensors").write_bytes(data[: len(data) - 1000])
    out["truncated_st"] = d / "truncated.safetensors"
    (d / "badjson.safetensors").write_bytes(struct.pack("<Q", 8) + b"{oops!!}")
    out["badjson_st"] = d / "badjson.safetensors"
    torch.save({"kv_cache": torch.from_numpy(clean), "indices": torch.tensor([1, 2], dtype=torch.int32)}, d / "dump.pt")
    out["pt"] = d / "dump.pt"
    data = (d / "dump.pt").read_bytes()
    (d / "truncated.pt").write_bytes(data[: len(data) // 2])
    out["truncated_pt"] = d / "truncated.pt"
    (d / "garbage.npy").write_bytes(b"this is not a numpy file at all" * 10)
    out["garbage"] = d / "garbage.npy"
    (d / "garbage.bin").write_bytes(bytes(range(256)))
    out["garbage_bin"] = d / "garbage.bin"
    out["missing"] = d / "missing.npy"
    return out


# --------------------------------------------------------------------------- exit codes and formats


def test_clean_cache_exits_0_subprocess(files: dict[str, Path]) -> None:
    proc = run_subprocess(files["clean"])
    assert proc.returncode == 0, proc.stderr
    assert "CLEAN" in proc.stdout and "none" in proc.stdout
    assert proc.stderr == ""  # no progress display when stderr is not a terminal


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_clean_cache_formats(files: dict[str, Path], fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(files["clean"], "--format", fmt, capsys=capsys)
    assert code == 0 and err == ""
    if fmt == "json":
        doc = json.loads(out)
        assert doc["verdict"] == "clean" and doc["findings"] == [] and doc["mode"] == "all_rows"
        assert doc["inputs"]["kv_rows"] == 64 and doc["scan"]["rows_read"] == 64
    elif fmt == "markdown":
        assert out.startswith("# Precondition report") and "CLEAN" in out
    else:
        assert "CLEAN" in out


RECORD_KINDS = ["scale_not_pow2", "scale_above_cap", "scale_nonpositive_or_nonfinite", "nan_codes"]


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
@pytest.mark.parametrize("kind", RECORD_KINDS)
def test_record_violation_exits_1(files: dict[str, Path], kind: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(files[kind], "--format", fmt, capsys=capsys)
    assert code == 1 and err == ""
    if fmt == "json":
        doc = json.loads(out)
        assert doc["verdict"] == "violation" and doc["exit_code"] == 1
        assert [(f["kind"], f["count"], f["scope"]) for f in doc["findings"]] == [(kind, 1, "all_rows")]
    elif fmt == "markdown":
        assert f"`{kind}`" in out and "| violation | all_rows |" in out
    else:
        assert "VIOLATION" in out and f"[violation] {kind} (all_rows): 1 " in out


def test_not_pow2_consequence_in_table(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(files["scale_not_pow2"], capsys=capsys)
    assert code == 1
    assert "QK uses 2^1 = 2.0 (exponent only), PV uses 3.0" in out.replace("\n      ", " ")
    assert "row=5 block=1" in out


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
@pytest.mark.parametrize(
    ("idx", "ptr", "kind", "code"),
    [
        ("idx_oor", "ptr_oor", "index_out_of_range", 1),
        ("idx_ok", "ptr_beyond", "indptr_beyond_stream", 1),
        ("idx_ok", "ptr_negative", "negative_row_length", 0),
    ],
)
def test_index_stream_findings(
    files: dict[str, Path], idx: str, ptr: str, kind: str, code: int, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    got, out, err = run_cli(files["clean"], "--indices", files[idx], "--indptr", files[ptr], "--format", fmt, capsys=capsys)
    assert got == code and err == ""
    if fmt == "json":
        doc = json.loads(out)
        assert doc["mode"] == "consumed_rows"
        assert [f["kind"] for f in doc["findings"]] == [kind]
        assert doc["findings"][0]["scope"] == "index_stream"
    else:
        assert kind in out


def test_index_out_of_range_subprocess(files: dict[str, Path]) -> None:
    proc = run_subprocess(files["clean"], "--indices", files["idx_oor"], "--indptr", files["ptr_oor"])
    assert proc.returncode == 1, proc.stderr
    assert "index_out_of_range" in proc.stdout and "index=64" in proc.stdout


def test_consumed_rows_only_vs_whole_cache(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # the only violation sits in row 40, which no index references: the verdict is clean,
    # the whole-cache summary still reports it
    code, out, _ = run_cli(files["unreferenced_violation"], "--indices", files["idx_ok"], "--format", "json", capsys=capsys)
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "clean" and doc["findings"] == []
    assert [(f["kind"], f["scope"], f["examples"][0]["row"]) for f in doc["whole_cache_summary"]] == [("scale_not_pow2", "all_rows", 40)]
    assert doc["inputs"]["indptr"].startswith("none given")
    code, out, _ = run_cli(
        files["unreferenced_violation"], "--indices", files["idx_ok"], "--consumed-only", "--format", "json", capsys=capsys
    )
    doc = json.loads(out)
    assert code == 0 and doc["whole_cache_summary"] is None and doc["scan"]["rows_read"] == 4
    code, out, _ = run_cli(files["unreferenced_violation"], "--indices", files["idx_ok"], capsys=capsys)
    assert "Whole-cache summary" in out and "information only" in out
    code, _, _ = run_cli(files["unreferenced_violation"], capsys=capsys)
    assert code == 1  # without indices every row decides


def test_multi_tensor_files(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(files["multi_st"], "--format", "json", capsys=capsys)
    doc = json.loads(out)
    assert code == 0 and doc["mode"] == "consumed_rows"
    assert doc["inputs"]["indices"].endswith("[indices]") and doc["inputs"]["n_q"] == 1
    code, out, _ = run_cli(files["multi_st"], "--cache-only", "--format", "json", capsys=capsys)
    assert code == 1 and json.loads(out)["mode"] == "all_rows"
    code, out, _ = run_cli(files["pt"], "--format", "json", capsys=capsys)
    doc = json.loads(out)
    assert code == 0 and doc["inputs"]["kv_cache"].endswith("[kv_cache]") and doc["inputs"]["consumed_rows"] == 2
    code, _, _ = run_cli(files["ambiguous_st"], "--kv-key", "b", capsys=capsys)
    assert code == 0
    assert list_tensors(files["multi_st"]) == {"kv_cache": ("uint8", (64, 656)), "indices": ("int32", (3,)), "indptr": ("int32", (2,))}


def test_output_quiet_and_progress(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.json"
    code, out, err = run_cli(files["nan_codes"], "--format", "json", "--output", target, "--quiet", capsys=capsys)
    assert code == 1 and out == "" and err == ""
    assert json.loads(target.read_text())["findings"][0]["kind"] == "nan_codes"
    code, out, err = run_cli(files["clean"], "--progress", "--chunk-rows", "16", capsys=capsys)
    assert code == 0 and "rows/s" in err and "100.0%" in err and "GiB/s" in err


# --------------------------------------------------------------------------- malformed input


BAD_INPUTS = {
    "truncated_npy": "truncated",
    "truncated_st": "truncated",
    "truncated_pt": "truncated or corrupt",
    "badjson_st": "does not parse",
    "wrong_dtype": "wrong dtype for kv_cache: float32, expected uint8",
    "wrong_width": "expected [..., 656]",
    "missing": "no such file",
    "garbage": "unrecognised format",
    "garbage_bin": "unrecognised format",
    "ambiguous_st": "ambiguous",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_exits_2(files: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(files[name], capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and str(files[name]) in err
    assert BAD_INPUTS[name] in err and "Traceback" not in err


def test_bad_input_exits_2_subprocess(files: dict[str, Path]) -> None:
    # every bad input is checked in-process above (test_bad_input_exits_2); one through the real
    # entry point shows the process's exit status and stderr are the same
    name = "truncated_npy"
    proc = run_subprocess(files[name])
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and BAD_INPUTS[name] in proc.stderr


def test_bad_index_dtype_and_json_error_document(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(files["clean"], "--indices", files["idx_int64"], "--format", "json", capsys=capsys)
    assert code == 2 and "wrong dtype for indices: int64, expected int32" in err
    doc = json.loads(out)
    assert doc["verdict"] == "error" and doc["findings"][0]["kind"] == "bad_dtype"
    code, _, err = run_cli(files["clean"], "--indptr", files["ptr_oor"], capsys=capsys)
    assert code == 2 and "indptr given without indices" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preconditions"]) == 2
    assert main(["preconditions", "x.npy", "--chunk-rows", "0"]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["preconditions", "--help"]) == 0
    capsys.readouterr()


def test_loader_maps_without_reading(files: dict[str, Path]) -> None:
    dump = load_dump(files["clean"])
    assert dump.kv_cache.dtype == torch.uint8 and dump.kv_cache.shape == (64, RECORD_BYTES)
    assert dump.indices is None and dump.kv_rows == 64
    with pytest.raises(DumpError, match="no tensor named 'nope'"):
        load_dump(files["multi_st"], kv_key="nope")
