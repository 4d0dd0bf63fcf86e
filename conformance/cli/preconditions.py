"""`python -m conformance preconditions KV_DUMP ...`: precondition report for a dumped KV cache.

Without an index stream every row of the cache is scanned and decides the verdict. With one
(--indices / --indptr, or tensors named indices / indptr inside a multi-tensor KV_DUMP) the
verdict comes from the index stream and the rows it consumes only (bytes of rows no index
references may hold anything); the whole cache is still scanned in the same pass and summarised
as information (skip that with --consumed-only, which reads only the consumed rows).

Exit codes: 0 clean (notices allowed), 1 at least one violation, 2 unreadable or malformed input
(one line on stderr, no traceback; with --format json the document holds the error too).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import time
from typing import Any

import torch

from conformance.cli.args import OutputError, add_command, output_file, positive_int, write_output
from conformance.judging.progress import StatusLine, rate_text
from conformance.tools.dumps import DumpError, load_dump
from kernel.contract import ContractError
from kernel.record import RECORD_BYTES
from oracle import preconditions as pc

EXIT_CLEAN, EXIT_VIOLATION, EXIT_BAD_INPUT = 0, 1, 2
SCHEMA = 1
GIB = 1 << 30


def register(subparsers: Any) -> None:
    """Add the `preconditions` subcommand to an argparse subparsers object."""
    p = add_command(subparsers, "preconditions", "check a dumped KV cache (and index stream) against the kernel's preconditions", __doc__)
    p.add_argument("kv_dump", metavar="KV_DUMP", help="KV cache dump: .npy, .pt (torch.save) or .safetensors; uint8 [..., 656]")
    p.add_argument("--indices", metavar="F", help="int32 1-D CSR index stream dump (same formats)")
    p.add_argument("--indptr", metavar="F", help="int32 [n_q + 1] CSR row pointer dump; without it, one query row over the whole stream")
    p.add_argument("--kv-key", metavar="NAME", help="tensor name of the KV cache in a multi-tensor file")
    p.add_argument("--indices-key", metavar="NAME", help="tensor name of the indices in a multi-tensor file")
    p.add_argument("--indptr-key", metavar="NAME", help="tensor name of indptr in a multi-tensor file")
    p.add_argument("--has-invalid", action="store_true", help="entries < 0 are masked (the kernel's has_invalid=True)")
    p.add_argument(
        "--cache-only", action="store_true", help="ignore any index stream inside KV_DUMP: scan every row, every row decides the verdict"
    )
    p.add_argument("--consumed-only", action="store_true", help="with an index stream: read only the consumed rows, no whole-cache summary")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table", help="report format (default: table)")
    p.add_argument(
        "--output", type=output_file, metavar="PATH", help="write the report here instead of stdout (a file; its folder must exist)"
    )
    p.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=pc.DEFAULT_CHUNK_ROWS,
        metavar="N",
        help=f"rows per scan chunk (default {pc.DEFAULT_CHUNK_ROWS}; memory ~ N * 1.2 KiB)",
    )
    p.add_argument("--max-examples", type=positive_int, default=pc.DEFAULT_MAX_EXAMPLES, metavar="N", help="examples kept per finding")
    p.add_argument("--progress", action="store_true", help="show scan progress on stderr even when it is not a terminal")
    p.add_argument(
        "--quiet", action="store_true", help="no progress and nothing on stdout (the report still goes to --output); exit code only"
    )
    p.set_defaults(func=run)


def scan_progress(label: str, unit: str, bytes_per_item: int = 0) -> pc.Progress:
    """A (done, total) callback showing the scan's rate_text on stderr's status line (at most once
    a second off a terminal; the final line always), ended when done reaches total."""
    line = StatusLine(sys.stderr, every=1.0)
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        final = done >= total
        line.show(rate_text(label, done, total, unit, time.perf_counter() - started, bytes_per_item=bytes_per_item), force=final)
        if final:
            line.done()

    return report


def run(args: argparse.Namespace) -> int:
    """Handler of the subcommand; returns the exit code."""
    show_progress = not args.quiet and (args.progress or sys.stderr.isatty())
    try:
        dump = load_dump(
            args.kv_dump,
            indices_path=args.indices,
            indptr_path=args.indptr,
            kv_key=args.kv_key,
            indices_key=args.indices_key,
            indptr_key=args.indptr_key,
            stream_from_kv_file=not args.cache_only,
        )
        report = build_report(
            dump,
            has_invalid=args.has_invalid,
            chunk_rows=args.chunk_rows,
            consumed_only=args.consumed_only,
            max_examples=args.max_examples,
            progress=show_progress,
        )
    except DumpError as exc:
        return _fail(args, str(exc), exc.findings)
    except (ContractError, ValueError, OSError) as exc:
        return _fail(args, f"{args.kv_dump}: {exc}", [])
    try:
        _emit(args, render(report, args.format))
    except OutputError as err:
        print(f"error: --output: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return int(report["exit_code"])


def _fail(args: argparse.Namespace, message: str, findings: list[pc.Finding]) -> int:
    print(f"error: {message}", file=sys.stderr)
    if args.format == "json":
        doc = {
            "tool": "conformance preconditions",
            "schema": SCHEMA,
            "verdict": "error",
            "exit_code": EXIT_BAD_INPUT,
            "error": message,
            "findings": [f.to_dict() for f in findings],
        }
        try:
            _emit(args, json.dumps(doc, indent=2) + "\n")
        except OSError:  # OutputError included: the error line above is what matters
            pass
    return EXIT_BAD_INPUT


def _emit(args: argparse.Namespace, text: str) -> None:
    if args.output:
        write_output(args.output, text)
    elif not args.quiet:
        sys.stdout.write(text)
        sys.stdout.flush()


# --------------------------------------------------------------------------- the report


def build_report(
    dump: Any,
    *,
    has_invalid: bool,
    chunk_rows: int = pc.DEFAULT_CHUNK_ROWS,
    consumed_only: bool = False,
    max_examples: int = pc.DEFAULT_MAX_EXAMPLES,
    progress: bool = False,
) -> dict[str, Any]:
    """Scan a loaded `conformance.tools.dumps.Dump`; return the report as a JSON-serialisable dict.

    Keys: inputs, mode ("all_rows" or "consumed_rows"), verdict ("clean" / "violation"),
    exit_code, findings (they decide the verdict), whole_cache_summary (findings over every row,
    informational, only in consumed_rows mode without consumed_only, else null), scan (rows and
    bytes read, seconds, rates).
    """
    kv = dump.kv_cache
    kv_rows = dump.kv_rows
    inputs: dict[str, Any] = {
        "kv_cache": dump.sources.get("kv_cache"),
        "kv_shape": list(kv.shape),
        "kv_rows": kv_rows,
        "kv_bytes": kv_rows * RECORD_BYTES,
        "has_invalid": has_invalid,
    }
    rec_progress = scan_progress("records", "rows", RECORD_BYTES) if progress else None
    whole: list[pc.Finding] | None = None
    t0 = time.perf_counter()
    if dump.indices is None:
        mode = "all_rows"
        findings = pc.check_records(kv, chunk_rows=chunk_rows, progress=rec_progress, max_examples=max_examples)
        rows_read = kv_rows
    else:
        mode = "consumed_rows"
        n_q = dump.indptr.numel() - 1
        inputs.update(indices=dump.sources.get("indices"), n_indices=dump.indices.numel(), indptr=dump.sources.get("indptr"), n_q=n_q)
        idx_progress = scan_progress("index stream", "entries") if progress else None
        scan = pc.scan_index_stream(
            dump.indices, dump.indptr, kv_rows, has_invalid=has_invalid, progress=idx_progress, max_examples=max_examples
        )
        inputs.update(consumed_rows=int(scan.consumed.numel()), consumed_entries=scan.consumed_entries)
        findings = list(scan.findings)
        if consumed_only:
            findings += pc.check_records(
                kv, scan.consumed, chunk_rows=chunk_rows, progress=rec_progress, max_examples=max_examples, scope="consumed_rows"
            )
            rows_read = int(scan.consumed.numel())
        else:
            consumed, whole = pc.check_records_split(
                kv, scan.consumed, chunk_rows=chunk_rows, progress=rec_progress, max_examples=max_examples
            )
            findings += consumed
            rows_read = kv_rows
        findings += pc.row0_notice(kv, scan, max_examples=max_examples)
    seconds = time.perf_counter() - t0
    findings = pc.sort_findings(findings)
    violation = pc.has_violation(findings)
    return {
        "tool": "conformance preconditions",
        "schema": SCHEMA,
        "inputs": inputs,
        "mode": mode,
        "verdict": "violation" if violation else "clean",
        "exit_code": EXIT_VIOLATION if violation else EXIT_CLEAN,
        "findings": [f.to_dict() for f in findings],
        "whole_cache_summary": None if whole is None else [f.to_dict() for f in pc.sort_findings(whole)],
        "scan": {
            "rows_read": rows_read,
            "bytes_read": rows_read * RECORD_BYTES,
            "seconds": round(seconds, 4),
            "rows_per_s": round(rows_read / seconds) if seconds > 0 else None,
            "gib_per_s": round(rows_read * RECORD_BYTES / GIB / seconds, 3) if seconds > 0 else None,
            "chunk_rows": chunk_rows,
            "torch_threads": torch.get_num_threads(),
        },
    }


def render(report: dict[str, Any], fmt: str) -> str:
    """The report as text: "table" (terminal), "json" or "markdown"."""
    if fmt == "json":
        return json.dumps(report, indent=2, allow_nan=False) + "\n"
    if fmt == "markdown":
        return _markdown(report)
    return _table(report)


def _verdict_line(report: dict[str, Any]) -> str:
    fs = report["findings"]
    nv = sum(f["severity"] == "violation" for f in fs)
    nn = len(fs) - nv
    head = "VIOLATION" if report["verdict"] == "violation" else "CLEAN"
    return f"{head}: {nv} violation kind(s), {nn} notice kind(s) -> exit {report['exit_code']}"


def _mode_text(report: dict[str, Any]) -> str:
    if report["mode"] == "all_rows":
        return "whole cache: every row decides the verdict (no index stream given)"
    text = "consumed rows only: the index stream and the rows it consumes decide the verdict"
    if report["whole_cache_summary"] is not None:
        text += "; the whole-cache summary is information only (rows no index references may hold anything)"
    return text


def _input_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    i = report["inputs"]
    lines = [("kv_cache", f"{i['kv_cache']}  shape {i['kv_shape']} uint8 = {i['kv_rows']:,} rows, {i['kv_bytes'] / GIB:.3f} GiB")]
    if report["mode"] == "consumed_rows":
        lines.append(("indices", f"{i['indices']}  {i['n_indices']:,} entries"))
        lines.append(("indptr", f"{i['indptr']}  {i['n_q']:,} query rows"))
        lines.append(("consumed", f"{i['consumed_rows']:,} distinct rows, {i['consumed_entries']:,} keys"))
    lines.append(("has_invalid", str(i["has_invalid"])))
    return lines


def _scan_line(report: dict[str, Any]) -> str:
    s = report["scan"]
    rate = f"{s['rows_per_s']:,} rows/s, {s['gib_per_s']} GiB/s" if s["rows_per_s"] else "n/a"
    return f"{s['rows_read']:,} rows ({s['bytes_read'] / GIB:.3f} GiB) in {s['seconds']:.2f} s ({rate})"


def _example_text(ex: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in ex.items() if k != "effect")


def _table(report: dict[str, Any]) -> str:
    width = max(60, min(shutil.get_terminal_size((120, 24)).columns, 160))
    out: list[str] = []
    for k, v in _input_lines(report):
        out.append(f"{k:<12}{v}")
    out.append(f"{'mode':<12}{_mode_text(report)}")
    out.append(f"{'verdict':<12}{_verdict_line(report)}")
    out.append(f"{'scan':<12}{_scan_line(report)}")
    sections = [("Findings (decide the verdict)", report["findings"])]
    if report["whole_cache_summary"] is not None:
        sections.append(("Whole-cache summary (every row; information only, not in the verdict)", report["whole_cache_summary"]))
    for title, fs in sections:
        out.append("")
        out.append(title)
        if not fs:
            out.append("  none")
            continue
        out.append(f"  {'SEVERITY':<10} {'SCOPE':<14} {'KIND':<32} COUNT")
        for f in fs:
            out.append(f"  {f['severity']:<10} {f['scope']:<14} {f['kind']:<32} {f['count']:,} {f['unit']}")
        for f in fs:
            out.append("")
            out.append(
                f"  [{f['severity']}] {f['kind']} ({f['scope']}): {f['count']:,} {f['unit']}"
                + (f"  {f['details']}" if f["details"] else "")
            )
            out.extend(textwrap.wrap(f["consequence"], width=width, initial_indent="    consequence: ", subsequent_indent="      "))
            for ex in f["examples"]:
                out.extend(textwrap.wrap(_example_text(ex), width=width, initial_indent="    - ", subsequent_indent="      "))
    return "\n".join(out) + "\n"


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _markdown(report: dict[str, Any]) -> str:
    out = ["# Precondition report", ""]
    for k, v in _input_lines(report):
        out.append(f"- **{k}**: {_md_cell(v)}")
    out.append(f"- **mode**: {_mode_text(report)}")
    out.append(f"- **verdict**: {_verdict_line(report)}")
    out.append(f"- **scan**: {_scan_line(report)}")
    sections = [("Findings (decide the verdict)", report["findings"])]
    if report["whole_cache_summary"] is not None:
        sections.append(("Whole-cache summary (information only, not in the verdict)", report["whole_cache_summary"]))
    for title, fs in sections:
        out += ["", f"## {title}", ""]
        if not fs:
            out.append("None.")
            continue
        out += ["| severity | scope | kind | count | consequence |", "| --- | --- | --- | ---: | --- |"]
        for f in fs:
            out.append(f"| {f['severity']} | {f['scope']} | `{f['kind']}` | {f['count']:,} {f['unit']} | {_md_cell(f['consequence'])} |")
        for f in fs:
            out += ["", f"### `{f['kind']}` ({f['scope']})", ""]
            if f["details"]:
                out += [f"Details: `{json.dumps(f['details'])}`", ""]
            keys: list[str] = []
            for ex in f["examples"]:
                keys += [k for k in ex if k not in keys]
            out.append("| " + " | ".join(keys) + " |")
            out.append("| " + " | ".join("---" for _ in keys) + " |")
            for ex in f["examples"]:
                out.append("| " + " | ".join(_md_cell(ex.get(k, "")) for k in keys) + " |")
    return "\n".join(out) + "\n"
