"""`python -m conformance corpus list|add|minimise|recover`: manage the regression corpus.

    list                  every entry: name, expect, pending or reviewed, provenance, file
    add FILE              move a pending entry into the reviewed corpus (validated), or import
                          a corpus entry or a bare recipe JSON from anywhere (a bare recipe needs
                          its provenance: --caught, and --kernel / --property)
    minimise ENTRY --kernel NAME
                          shrink a failing entry while it keeps failing the same way (greedy
                          passes: fewer rows, shorter rows, fewer heads, simpler distributions,
                          no padding; see conformance.records.minimise) and write the smaller entry into
                          the kernel's pending folder (<pending>/<kernel>/; content-hash name, atomic) for review,
                          never into the reviewed corpus: `corpus add` moves it there after
                          review. When the reviewed corpus (--corpus) already holds the same
                          recipe, nothing is written. The original is kept
    recover               turn write-ahead files left by dead processes into crash entries now
                          (pytest sessions do this at their start)
    collect [FOLDER ...] --shared-store URL
                          the fleet's failures (the store's inbox and runners' artifact folders:
                          copies of their state or pending folders) into one pending entry per
                          failure group (kind and subject), written to <pending>/<kernel>/:
                          copies merged by content hash with every finder kept, unshrunk groups
                          minimised, each group replayed on this tree (conformance.fleet.collect);
                          collected records leave the store (--keep: they stay)
    push --shared-store URL
                          send the failures a run could not push (the state folder's outbox,
                          $CONFORMANCE_DIR/fleet/outbox) to the store's inbox

Reviewed entries are conformance/corpus/*.json (in git; --corpus DIR to use another folder);
pending ones <pending>/<kernel>/*.json, one folder per kernel, where <pending> is --pending DIR,
else $CONFORMANCE_PENDING_DIR, else .conformance/pending of the working folder
(conformance.durability.state); `list` and `add` also take entries lying in <pending> itself.
Files are named by the content hash of their recipe (conformance.records.corpus), so the same recipe is
stored once per folder. Every write is atomic.

Exit codes: 0 done; 1 `minimise`: the entry does not fail with that kernel (nothing to do),
`push`: records left in the outbox (the store did not answer), `collect`: the store did not
answer (the folders were still collected); 2 a malformed or missing file (one line naming the
file and the problem; `list` still lists every good entry and names each bad file), an unknown
kernel, a usage error (a bad store address, no store given).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from conformance.cli.args import add_command, add_kernel_option, finite_positive_seconds, target_for_recipe
from conformance.durability.state import CORPUS_DIR, kernel_slug, pending_dir
from conformance.records.crashes import is_crash_entry

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `corpus` subcommand (and its own subcommands) to an argparse subparsers object."""
    p = add_command(subparsers, "corpus", "list, add, minimise corpus entries; recover crashes", __doc__)
    p.add_argument("--corpus", metavar="DIR", default=None, help="reviewed corpus folder (default conformance/corpus)")
    p.add_argument(
        "--pending",
        metavar="DIR",
        default=None,
        help="pending folder, one sub-folder per kernel (default $CONFORMANCE_PENDING_DIR, else .conformance/pending)",
    )
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION", required=True)
    # the folder options are also accepted after the action (`corpus list --corpus DIR`)
    folders = argparse.ArgumentParser(add_help=False)
    folders.add_argument("--corpus", metavar="DIR", default=argparse.SUPPRESS, help="reviewed corpus folder")
    folders.add_argument("--pending", metavar="DIR", default=argparse.SUPPRESS, help="pending folder")

    q = sub.add_parser("list", parents=[folders], help="list entries (name, expect, status, provenance)")
    which = q.add_mutually_exclusive_group()
    which.add_argument("--pending-only", action="store_true", help="only pending entries")
    which.add_argument("--reviewed-only", action="store_true", help="only reviewed entries")
    q.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    q.set_defaults(func=run_list)

    q = sub.add_parser(
        "add", parents=[folders], help="validate and move a pending entry into the reviewed corpus, or import an entry / recipe"
    )
    q.add_argument("file", metavar="FILE", help="a corpus entry or a bare recipe JSON")
    q.add_argument("--name", default=None, help="entry name (default: the entry's, or <property>-<hash> for a recipe)")
    q.add_argument(
        "--expect", choices=("conform", "precondition"), default=None, help="expectation (default: the entry's, or inferred for a recipe)"
    )
    q.add_argument("--caught", default=None, help="for a bare recipe: how it was found (required)")
    q.add_argument("--kernel", default=None, help="for a bare recipe: the kernel it was found with (default 'any')")
    q.add_argument("--property", default=None, help="for a bare recipe: the property or source (default 'imported')")
    q.add_argument("--keep", action="store_true", help="copy a pending entry instead of moving it")
    q.set_defaults(func=run_add)

    q = sub.add_parser(
        "minimise", aliases=["minimize"], parents=[folders], help="shrink a failing entry while it keeps failing the same way"
    )
    q.add_argument("entry", metavar="ENTRY", help="a corpus entry (or bare recipe) that fails with --kernel")
    add_kernel_option(q, lead="the kernel it fails with", required=True)
    q.add_argument("--profile", default=None, help="numerics profile for a kernel that declares none (or to override)")
    q.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available and the kernel runs there)")
    q.add_argument("--max-tries", type=int, default=300, metavar="N", help="candidate checks at most (default 300)")
    q.add_argument("--max-seconds", type=float, default=600.0, metavar="S", help="wall-clock budget (default 600)")
    q.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="check each candidate in a child process (default for crash entries)",
    )
    q.add_argument("--no-isolate", dest="isolate", action="store_false", help="check candidates in this process")
    q.add_argument(
        "--timeout",
        type=finite_positive_seconds,
        default=120.0,
        metavar="S",
        help="with --isolate: seconds before a hung candidate counts as hung",
    )
    q.add_argument(
        "--memory-limit",
        metavar="SIZE",
        default=None,
        help="refuse an entry whose memory estimate exceeds SIZE (e.g. 8GiB; 0: no limit; default: half the available RAM, "
        "or $CONFORMANCE_MEMORY_LIMIT)",
    )
    q.set_defaults(func=run_minimise)

    q = sub.add_parser("recover", parents=[folders], help="turn leftover write-ahead files of dead processes into crash entries now")
    q.set_defaults(func=run_recover)

    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--shared-store", dest="shared_store", default=None, metavar="URL", help="the fleet's store (default $CONFORMANCE_SHARED_STORE)"
    )
    q = sub.add_parser(
        "collect",
        parents=[folders, store],
        help="the fleet's failures (store inbox, artifact folders) into one pending entry per failure group",
    )
    q.add_argument("folder", metavar="FOLDER", nargs="*", help="a runner's artifact folder (its state or pending folder, copied)")
    add_kernel_option(q, lead="collect this kernel's failures only (as the runners named it)", when_absent="every kernel's", default=None)
    q.add_argument("--device", default=None, help="replay on this device (default: cuda when available and the kernel runs there)")
    q.add_argument(
        "--minimise-seconds",
        type=finite_positive_seconds,
        default=120.0,
        metavar="S",
        help="budget of each group's minimisation when none of its recipes is shrunk (default 120)",
    )
    q.add_argument("--keep", action="store_true", help="leave the collected records in the store")
    q.add_argument("--drop-unreproduced", action="store_true", help="remove from the store the groups that do not fail on this tree")
    q.set_defaults(func=run_collect)

    q = sub.add_parser("push", parents=[store], help="send the failures a run could not push to the store's inbox")
    q.set_defaults(func=run_push)


def _dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    return (Path(args.corpus) if args.corpus else CORPUS_DIR), (Path(args.pending) if args.pending else pending_dir())


def _pending_folders(pending: Path) -> list[Path]:
    """The pending folder and its per-kernel sub-folders (conformance.durability.state)."""
    if not pending.is_dir():
        return []
    return [pending, *sorted(p for p in pending.iterdir() if p.is_dir())]


def _in_pending(path: Path, pending: Path) -> bool:
    """Whether `path` lies in the pending folder or one of its per-kernel sub-folders."""
    parent, root = path.resolve().parent, pending.resolve()
    return parent == root or parent.parent == root


def _rel(path: Path) -> str:
    """`path` relative to the working folder when under it (shorter tables), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _short(text: Any, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


# ---------------------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    """Handler of `corpus list`."""
    from conformance.records.corpus import CorpusError, corpus_files, load_entry

    reviewed, pending = _dirs(args)
    folders = []
    if not args.pending_only:
        folders.append(("reviewed", reviewed))
    if not args.reviewed_only:
        folders += [("pending", folder) for folder in _pending_folders(pending)]
    rows, errors = [], []
    for status, folder in folders:
        if not folder.is_dir():
            continue
        for path in corpus_files(folder):
            try:
                entry = load_entry(path)
            except CorpusError as err:
                errors.append(str(err))
                continue
            prov = entry.provenance or {}
            rows.append(
                {
                    "name": entry.name,
                    "expect": entry.expect,
                    "status": status,
                    "crash": is_crash_entry(prov),
                    "file": _rel(path),
                    "kernel": prov.get("kernel"),
                    "property": prov.get("property"),
                    "date": prov.get("date"),
                    "caught": prov.get("caught"),
                }
            )
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        print(f"{'NAME':<40} {'EXPECT':<12} {'STATUS':<9} {'PROVENANCE':<70} FILE")
        for row in rows:
            prov = (
                f"{'CRASH ' if row['crash'] else ''}{row['property'] or '?'} "
                f"({row['kernel'] or '?'}, {row['date'] or '?'}): {row['caught'] or '?'}"
            )
            print(f"{_short(row['name'], 40):<40} {row['expect']:<12} {row['status']:<9} {_short(prov, 70):<70} {row['file']}")
        counts = {s: sum(1 for r in rows if r["status"] == s) for s, _ in folders}
        print(
            f"{len(rows)} entries ({', '.join(f'{n} {s}' for s, n in counts.items())})" + (f", {len(errors)} unreadable" if errors else "")
        )
    for error in errors:
        print(f"corpus: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if errors else EXIT_OK


def _reviewed_hashes(folder: Path) -> dict[str, Path]:
    from conformance.records.corpus import CorpusError, corpus_files, load_entry, recipe_hash

    found: dict[str, Path] = {}
    if folder.is_dir():
        for path in corpus_files(folder):
            try:
                found.setdefault(recipe_hash(load_entry(path).recipe), path)
            except CorpusError:
                continue
    return found


def run_add(args: argparse.Namespace) -> int:
    """Handler of `corpus add`."""
    from conformance.durability.wal import atomic_write_text
    from conformance.records.corpus import SUITE_VERSION, CorpusEntry, recipe_hash
    from conformance.records.replay import ReplayInputError, load_replayable

    reviewed, pending = _dirs(args)
    source = Path(args.file)
    try:
        entry, kind = load_replayable(source, expect=args.expect)
    except ReplayInputError as err:
        print(f"corpus add: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.name is not None:
        from conformance.records.corpus import CorpusError, check_name

        try:
            check_name(args.name, "--name")
        except CorpusError as err:
            print(f"corpus add: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    digest = recipe_hash(entry.recipe)
    if kind == "recipe":
        if not args.caught:
            print(
                f"corpus add: {source}: a bare recipe needs its provenance: --caught 'how it was found' (and --kernel, --property)",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        prop = args.property or "imported"
        entry = CorpusEntry(
            name=args.name or f"{prop}-{digest}",
            recipe=entry.recipe,
            expect=entry.expect,
            provenance={
                "caught": args.caught,
                "kernel": args.kernel or "any",
                "property": prop,
                "date": datetime.date.today().isoformat(),
                "suite_version": SUITE_VERSION,
                "imported_from": str(source),
            },
        )
    else:
        stray = [flag for flag, value in (("--caught", args.caught), ("--kernel", args.kernel), ("--property", args.property)) if value]
        if stray:
            print(
                f"corpus add: {source} is a corpus entry with its own provenance; {', '.join(stray)} apply to bare recipes only",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        if args.name:
            entry = CorpusEntry(name=args.name, recipe=entry.recipe, expect=entry.expect, provenance=entry.provenance)
    existing = _reviewed_hashes(reviewed).get(digest)
    if existing is not None:
        print(
            f"corpus add: {source}: the same recipe is already in the reviewed corpus as {existing}; nothing written, {source} left as is"
        )
        return EXIT_OK
    dest = reviewed / f"{digest}.json"
    atomic_write_text(dest, entry.to_json())
    moved = False
    if _in_pending(source, pending) and not args.keep:
        source.unlink(missing_ok=True)
        moved = True
    print(f"added {entry.name} (expect {entry.expect}) as {dest}" + (" (moved from pending)" if moved else f" (from {source})"))
    return EXIT_OK


def run_minimise(args: argparse.Namespace) -> int:
    """Handler of `corpus minimise`."""
    from conformance.records.corpus import CorpusEntry, save_entry
    from conformance.records.minimise import in_process_check, isolated_check, minimise
    from conformance.records.replay import ReplayInputError, load_replayable

    reviewed, pending = _dirs(args)
    source = Path(args.entry)
    if args.memory_limit is not None:
        import os

        from strategies.materialize import MEMORY_LIMIT_ENV, parse_size

        try:
            parse_size(args.memory_limit)
        except ValueError as err:
            print(f"corpus minimise: --memory-limit: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        os.environ[MEMORY_LIMIT_ENV] = args.memory_limit  # inherited by --isolate children
    try:
        entry, _ = load_replayable(source)
    except ReplayInputError as err:
        print(f"corpus minimise: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.max_tries < 1 or not args.max_seconds > 0:
        print("corpus minimise: --max-tries must be >= 1 and --max-seconds > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    isolate = args.isolate if args.isolate is not None else is_crash_entry(entry.provenance)
    if isolate:
        check = isolated_check(kernel=args.kernel, profile=args.profile, device=args.device, expect=entry.expect, timeout_s=args.timeout)
        where = "each candidate in a child process"
    else:
        target = target_for_recipe("corpus minimise", args.kernel, args.profile, args.device, entry.recipe, source)
        if target is None:
            return EXIT_BAD_INPUT
        check = in_process_check(target, entry.expect, name=entry.name)
        where = "in this process"
    r = entry.recipe
    print(
        f"minimising {source} ({entry.name}, expect {entry.expect}) against {args.kernel}, {where}: "
        f"n_q {r.n_q}, heads {r.heads}, {r.total_keys} keys",
        file=sys.stderr,
        flush=True,
    )
    signature = check(r)
    if not signature:
        print(f"corpus minimise: {source} does not fail with kernel {args.kernel}: nothing to minimise")
        return EXIT_FAIL
    if signature == frozenset({"skip"}):
        print(f"corpus minimise: kernel {args.kernel} does not take the call of {source}: nothing to minimise")
        return EXIT_FAIL
    print("fails as: " + "; ".join(sorted(signature)), file=sys.stderr)
    result = minimise(
        r,
        check,
        signature=signature,
        max_tries=args.max_tries,
        max_seconds=args.max_seconds,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    small = result.recipe
    summary = (
        f"{result.tries} candidates tried in {result.seconds:.1f} s ({result.stopped}); "
        f"n_q {r.n_q} -> {small.n_q}, heads {r.heads} -> {small.heads}, keys {r.total_keys} -> {small.total_keys}"
    )
    if not result.changed:
        print(f"{source} is already minimal for these passes: {summary}; nothing written")
        return EXIT_OK
    base = entry.name.removesuffix("-min")
    provenance = {
        **(entry.provenance or {}),
        "minimised_from": source.name,
        "minimised_with": args.kernel,
        "minimised_on": datetime.date.today().isoformat(),
        "minimised_steps": result.accepted,
    }
    smaller = CorpusEntry(name=f"{base}-min", recipe=small, expect=entry.expect, provenance=provenance)
    from conformance.records.corpus import CorpusWriteError, recipe_hash

    existing = _reviewed_hashes(reviewed).get(recipe_hash(small))
    if existing is not None:
        print(f"the smaller recipe is already in the reviewed corpus as {existing} ({summary}); nothing written")
        return EXIT_OK
    try:
        dest = save_entry(smaller, pending / kernel_slug(args.kernel))
    except CorpusWriteError as err:
        print(f"corpus minimise: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(
        f"wrote the smaller entry {dest} to the pending folder ({summary}); the original {source} is kept; "
        f"after review: python -m conformance corpus add {dest}" + (f" --corpus {reviewed}" if args.corpus else "")
    )
    print(f"replay: python -m conformance replay {dest} --kernel {args.kernel}")
    return EXIT_OK


def run_recover(args: argparse.Namespace) -> int:
    """Handler of `corpus recover`."""
    from conformance.records.crashes import describe, recover_leftovers

    _, pending = _dirs(args)
    found = recover_leftovers(None, lambda kernel: pending / kernel_slug(kernel))
    for line in found:
        print("recovered " + describe(line))
    if not found:
        print("no leftover write-ahead files (or only those of live sessions)")
    return EXIT_OK


def _store(args: argparse.Namespace, command: str, *, required: bool) -> tuple[Any, int | None]:
    """(Store or None, exit code to return now or None) from --shared-store / $CONFORMANCE_SHARED_STORE."""
    from conformance.fleet.store import StoreError, address_from, open_store

    try:
        address = address_from(args.shared_store)
        if address is None:
            if required:
                print(f"corpus {command}: no store: --shared-store URL or $CONFORMANCE_SHARED_STORE", file=sys.stderr)
                return None, EXIT_BAD_INPUT
            return None, None
        store = open_store(address)
        _ = store.client
    except StoreError as err:
        print(f"corpus {command}: {err}", file=sys.stderr)
        return None, EXIT_BAD_INPUT
    return store, None


def run_push(args: argparse.Namespace) -> int:
    """Handler of `corpus push`."""
    from conformance.fleet.inbox import outbox_dir
    from conformance.fleet.push import push_outbox

    store, code = _store(args, "push", required=True)
    if code is not None:
        return code
    result = push_outbox(store)
    for path in result.unreadable:
        print(f"corpus push: {path}: not an outbox record (left as it is)", file=sys.stderr)
    where = outbox_dir()
    print(f"pushed {result.pushed} entr{'y' if result.pushed == 1 else 'ies'} to {store.address.shown}; {result.left} left in {where}")
    if result.left:
        print(f"corpus push: {result.stopped}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def run_collect(args: argparse.Namespace) -> int:
    """Handler of `corpus collect`."""
    from conformance.fleet.collect import collect

    _, pending = _dirs(args)
    store, code = _store(args, "collect", required=False)
    if code is not None:
        return code
    folders = [Path(f) for f in args.folder]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        print(f"corpus collect: not a folder: {', '.join(missing)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if store is None and not folders:
        print(
            "corpus collect: nothing to collect: --shared-store URL (or $CONFORMANCE_SHARED_STORE) and/or artifact folders", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    result = collect(
        store,
        folders,
        pending,
        kernel=args.kernel,
        device=args.device,
        minimise_seconds=args.minimise_seconds,
        keep=args.keep,
        drop_unreproduced=args.drop_unreproduced,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    for line in result.unreadable:
        print(f"corpus collect: {line}", file=sys.stderr)
    for path in result.crashes:
        print(f"corpus collect: {path}: a crash entry, not replayed here (python -m conformance replay --isolate); left where it is")
    source = f"{result.store_records} record(s) from {store.address.shown}" if store is not None else "no store"
    print(f"collected {source} and {result.folder_records} from {len(folders)} folder(s): {len(result.outcomes)} group(s)")
    for outcome in result.outcomes:
        print(f"  {outcome.line()}")
    drained = sum(len(m.keys) for o in result.outcomes if o.drained for m in o.members)
    print(
        f"{len(result.written)} entr{'y' if len(result.written) == 1 else 'ies'} written to {pending}"
        + (f"; {drained} recipe(s) drained from the store" if store is not None and not args.keep else "")
    )
    for outcome in result.written:
        print(f"  review, then: python -m conformance corpus add {outcome.written}")
    if result.store_error:
        print(f"corpus collect: {result.store_error}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK
