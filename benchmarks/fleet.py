"""Fleet scale, measured with processes standing in for runners around a redis-server of this machine.

    python -m benchmarks fleet [--out DIR] [--json PATH] [--examples N] [--fuzz-seconds S] [--only PART ...]

Starts its own redis-server (Debian's; a unix socket in a fresh folder, nothing persisted,
stopped at the end) and runs each runner as its own process with its own folder (state folder,
Hypothesis folder), on the CPU, against the catalogue's lse_base2 (lse in log2 units) as the
broken kernel and emulated as the correct one. Parts (--only to run some):

  replay     the suite's differential property (conformance/suite/test_differential.py
             ::test_differential) under --hypothesis-profile fleet: runner A finds and shrinks
             lse_base2's bug; a fresh runner B replays it from the store. Seconds of each, what
             B's reuse phase replayed, whether both saved the same pending entry.
  namespace  a correct kernel's runner (emulated, the same property, --examples examples) after A:
             the broken kernel's stored examples before and after; then the same run with A's
             examples copied into the correct kernel's namespace (what one shared key space
             would be): how many it deleted.
  shards     four `fuzz --shard i/4` campaigns at once (ci profile, --fuzz-seconds each), shard 4
             SIGKILLed once it has pushed a failure: the seeds of each, the inbox (one record per
             content hash), every runner's pending entries found in it with that runner as finder.
  collect    `corpus collect` over the store and the four runners' state folders (duplicate
             hashes, several recipes of one failure group): groups, entries written, seconds.
  down       the store killed mid-session (a pytest runner of the correct kernel, the store
             SIGKILLed once its first test has passed) and a listener that never answers (a
             correct kernel's fuzz campaign with a budget): exit codes, seconds against the
             budget beside the same campaign with no store, what each said; then a broken
             kernel's campaign with the store down, and `corpus push` once it is back: entries
             unpushed, then pushed.
  cost       the suite's differential property on the correct kernel under the fleet profile
             with the store and without it (one run each, --examples examples, the same
             Hypothesis seed and an empty namespace each time, so both judge the same examples):
             examples per second of Hypothesis's generate phase, the store's commands per example
             (its own count) and the round trip of one command: the store's cost per example
             without the machine's load in it.

Prints one line per measurement and writes them as JSON (--json). Times are wall seconds of the
runner processes on this machine (its load included: read them against each other).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REDIS_SERVER = "redis-server"


class LocalRedis:
    """A throwaway redis-server of this machine: a unix socket in a fresh folder under /tmp (or a
    free loopback port with `tcp`), nothing persisted; `stop` ends it and removes the folder,
    `kill` ends it with SIGKILL (a store lost mid-run). FileNotFoundError when redis-server is not
    installed (Debian: apt-get install redis-server)."""

    def __init__(self, *, tcp: bool = False, binary: str | None = None) -> None:
        self.binary = binary or shutil.which(REDIS_SERVER) or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
        if self.binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.tcp = tcp
        self.folder = Path(tempfile.mkdtemp(prefix="cf-redis-", dir="/tmp"))
        self.socket = self.folder / "redis.sock"
        self.port = _free_port() if tcp else 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if self.tcp else f"unix://{self.socket}"

    def start(self, timeout_s: float = 30.0) -> LocalRedis:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.folder), "--daemonize", "no", "--loglevel", "warning"]
        if not self.tcp:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        give_up = time.monotonic() + timeout_s  # a backstop: the loop ends as soon as the server answers
        while not self._answers():
            if self.process.poll() is not None:
                err = (self.process.stderr.read() if self.process.stderr else b"").decode(errors="replace").strip()
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {err[-500:]}")
            if time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"redis-server did not answer within {timeout_s:g} s")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            if self.tcp:
                conn = socket.create_connection(("127.0.0.1", self.port), timeout=1.0)
            else:
                if not self.socket.exists():
                    return False
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.settimeout(1.0)
                conn.connect(str(self.socket))
            with conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (the folder stays until stop)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NeverAnswers:
    """A loopback listener that accepts connections and never answers (a store that hangs)."""

    def __init__(self) -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.held.append(conn)

    def __enter__(self) -> NeverAnswers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.server.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refused_url() -> str:
    """A loopback address nothing listens on (a store that is down)."""
    return f"redis://127.0.0.1:{_free_port()}/0"


ROOT = Path(__file__).resolve().parents[1]
BROKEN = "conformance.mutation.catalogue:lse_base2"
CORRECT = "emulated"
PROPERTY = ["conformance/suite/test_differential.py", "-k", "test_differential and not long_rows and not beyond"]
PARTS = ("replay", "namespace", "shards", "collect", "down", "cost")
BACKSTOP_S = 3600


class Fleet:
    """The measurements' shared state: the store, the runners' folders, the results."""

    def __init__(self, out: Path, examples: int, fuzz_seconds: float) -> None:
        self.out, self.examples, self.fuzz_seconds = out, examples, fuzz_seconds
        self.results: dict[str, Any] = {}
        self.server = LocalRedis().start()
        from conformance.fleet.store import Store, parse_address

        self.store = Store(parse_address(self.server.url, "benchmark"))

    def say(self, part: str, key: str, value: Any, text: str) -> None:
        self.results.setdefault(part, {})[key] = value
        print(f"{part:<9} {text}", flush=True)

    def folder(self, name: str) -> Path:
        path = self.out / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def env(self, folder: Path, **extra: str) -> dict[str, str]:
        from conformance.durability.state import scrubbed_env

        env = scrubbed_env(dict(os.environ), ("CONFORMANCE_PENDING_DIR", "CONFORMANCE_SHARED_STORE", "CONFORMANCE_SHARD", "CI"))
        env.update(
            PYTHONPATH=str(ROOT), CONFORMANCE_DIR=str(folder / ".conformance"), HYPOTHESIS_STORAGE_DIRECTORY=str(folder / ".hypothesis")
        )
        env.update({"PYTHONUNBUFFERED": "1", "CONFORMANCE_FLEET_EXAMPLES": str(self.examples), **extra})
        return env

    def pytest(self, folder: Path, kernel: str, url: str | None, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PROPERTY, "--conformance-kernel", kernel]
        command += ["--conformance-device", "cpu", "--hypothesis-profile", "fleet", "--hypothesis-show-statistics", *args]
        if url:
            command += ["--conformance-shared-store", url]
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=self.env(folder, **env), capture_output=True, text=True, timeout=BACKSTOP_S)
        (folder / "pytest.out").write_text(done.stdout + done.stderr)
        return done, time.monotonic() - started

    def fuzz(self, folder: Path, kernel: str, url: str, *args: str) -> list[str]:
        command = [sys.executable, "-m", "conformance", "fuzz", "--kernel", kernel, "--device", "cpu", "--hypothesis-profile", "ci"]
        return [*command, "--property", "differential", "--seconds", f"{self.fuzz_seconds:g}", "--shared-store", url, *args]

    def namespace(self, kernel: str) -> Any:
        import torch

        from conformance.fleet.namespace import namespace_for
        from conformance.judging.target import build_target

        return namespace_for(kernel, build_target(kernel, device="cpu", check_only=True).profile.name, torch.device("cpu"))

    def pending(self, folder: Path) -> list[Path]:
        return sorted((folder / ".conformance" / "pending").rglob("*.json"))


def phases(stdout: str) -> dict[str, dict[str, float]]:
    """Hypothesis's statistics (--hypothesis-show-statistics) per phase: seconds, passing, failing, invalid."""
    found: dict[str, dict[str, float]] = {}
    for match in re.finditer(
        r"during (\w+) phase \(([\d.]+) seconds\):(?:\n(?!\s*- during).*)*?\n\s*- (\d+) passing, (\d+) failing, and (\d+) invalid", stdout
    ):
        name, seconds, passing, failing, invalid = match.groups()
        found[name] = {"seconds": float(seconds), "passing": int(passing), "failing": int(failing), "invalid": int(invalid)}
    return found


def part_replay(fleet: Fleet) -> None:
    a, b = fleet.folder("replay-a"), fleet.folder("replay-b")
    first, seconds_a = fleet.pytest(a, BROKEN, fleet.server.url)
    stats_a = phases(first.stdout)
    fleet.say(
        "replay", "a_seconds", round(seconds_a, 1), f"runner A ({BROKEN}): exit {first.returncode}, {seconds_a:.1f} s (phases {stats_a})"
    )
    second, seconds_b = fleet.pytest(b, BROKEN, fleet.server.url)
    stats_b = phases(second.stdout)
    same = [p.name for p in fleet.pending(a)] == [p.name for p in fleet.pending(b)] and bool(fleet.pending(a))
    fleet.say("replay", "b_seconds", round(seconds_b, 1), f"runner B (fresh state): exit {second.returncode}, {seconds_b:.1f} s")
    fleet.say("replay", "b_reuse", stats_b.get("reuse", {}), f"runner B's reuse phase (replayed from the store): {stats_b.get('reuse')}")
    fleet.say("replay", "same_pending_entry", same, f"A and B saved the same pending entry: {same} ({[p.name for p in fleet.pending(b)]})")


def part_namespace(fleet: Fleet) -> None:
    from conformance.fleet.database import count_examples

    broken, correct = fleet.namespace(BROKEN), fleet.namespace(CORRECT)

    def counts(namespace: Any) -> dict[str, int]:
        return {"failures": count_examples(fleet.store, namespace, failures_only=True), "all": count_examples(fleet.store, namespace)}

    before = counts(broken)
    c = fleet.folder("namespace-c")
    done, seconds = fleet.pytest(c, CORRECT, fleet.server.url)
    after = counts(broken)
    fleet.say(
        "namespace",
        "namespaced",
        {"before": before, "after": after, "exit": done.returncode, "seconds": round(seconds, 1)},
        f"{CORRECT} runner, namespaced: {BROKEN}'s stored failures {before['failures']} -> {after['failures']}, "
        f"examples in all {before['all']} -> {after['all']} (exit {done.returncode}, {seconds:.1f} s)",
    )
    client = fleet.store.client
    for key in client.scan_iter(match=broken.examples_prefix + b"*"):
        client.copy(key, correct.examples_prefix + key[len(broken.examples_prefix) :], replace=True)
    shared_before = counts(correct)
    again = fleet.folder("namespace-c-shared")
    done, seconds = fleet.pytest(again, CORRECT, fleet.server.url)
    shared_after = counts(correct)
    fleet.say(
        "namespace",
        "one_key_space",
        {"before": shared_before, "after": shared_after, "exit": done.returncode},
        f"the same run with {BROKEN}'s examples in its own key space (no namespacing): stored failures "
        f"{shared_before['failures']} -> {shared_after['failures']} (examples in all {shared_before['all']} -> {shared_after['all']}: "
        "its own target-best examples added)",
    )


def _finders(fleet: Fleet) -> dict[str, set[str]]:
    from conformance.fleet import inbox

    return {r.hash: r.finders for r in inbox.pull(fleet.store) or []}


def part_shards(fleet: Fleet) -> None:
    from conformance.fleet import inbox

    folders = {i: fleet.folder(f"shard-{i}") for i in range(1, 5)}
    processes = {}
    started = time.monotonic()
    for i, folder in folders.items():
        command = fleet.fuzz(folder, BROKEN, fleet.server.url, "--shard", f"{i}/4", "--shrink-seconds", "600" if i == 4 else "30")
        processes[i] = subprocess.Popen(
            command, cwd=folder, env=fleet.env(folder), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    give_up = time.monotonic() + BACKSTOP_S
    while not any(any("shard 4/4" in f for f in fs) for fs in _finders(fleet).values()):
        if processes[4].poll() is not None or time.monotonic() > give_up:
            break
        time.sleep(0.1)
    killed_at = time.monotonic() - started
    processes[4].send_signal(signal.SIGKILL)
    outputs = {i: p.communicate(timeout=BACKSTOP_S)[0] for i, p in processes.items()}
    for i, text in outputs.items():
        (folders[i] / "fuzz.out").write_text(text)
    seeds = {}
    for i, folder in folders.items():
        summary = sorted((folder / ".conformance" / "runs").glob("fuzz-*/fuzz-summary.json"))
        seeds[i] = json.loads(summary[0].read_text())["seeds"] if summary else None
    from conformance.fleet.shards import Shard, chunk_seed

    seeds_killed = [chunk_seed("ci", k, Shard(4, 4), 0) for k in range(max(len(s or []) for s in seeds.values()))]
    every = [s for i, ss in seeds.items() if ss for s in ss]
    fleet.say(
        "shards",
        "seeds",
        seeds,
        f"seeds per shard (shard 4 killed at {killed_at:.1f} s; its stream {seeds_killed[:4]} ...): {seeds}; "
        f"disjoint {len(every) == len(set(every))}",
    )
    finders = _finders(fleet)
    fleet.say(
        "shards",
        "inbox",
        {h: sorted(f) for h, f in finders.items()},
        f"inbox: {len(finders)} record(s), one per content hash; finders per hash {[len(f) for f in finders.values()]}",
    )
    missing = []
    for i, folder in folders.items():
        for path in fleet.pending(folder):
            if not any(f"shard {i}/4" in f for f in finders.get(path.stem, ())):
                missing.append(f"shard {i}: {path.name}")
    killed_kept = [p.name for p in fleet.pending(folders[4])]
    fleet.say(
        "shards",
        "every_finder_recorded",
        not missing,
        f"every runner's pending entries in the inbox with it as finder: {not missing} {missing or ''}",
    )
    fleet.say(
        "shards",
        "killed_kept",
        {"pending": killed_kept, "outbox": inbox.count_queued(folders[4] / ".conformance")},
        f"shard 4 (SIGKILLed): pending {killed_kept}, "
        f"pushed before it died: {all(n.removesuffix('.json') in finders for n in killed_kept)}",
    )
    leases = [o.count("lease: shrinking it here") for o in outputs.values()]
    fleet.say("shards", "shrunk_by", leases, f"'shrinking it here' per shard (the others left it to the lease holder): {leases}")


def part_collect(fleet: Fleet) -> None:
    pending = fleet.folder("collected")
    command = [sys.executable, "-m", "conformance", "corpus", "collect", "--shared-store", fleet.server.url, "--pending", str(pending)]
    command += [str(fleet.out / f"shard-{i}" / ".conformance") for i in range(1, 5)] + ["--device", "cpu", "--minimise-seconds", "120"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=fleet.out, env=fleet.env(fleet.out), capture_output=True, text=True, timeout=BACKSTOP_S)
    seconds = time.monotonic() - started
    (fleet.out / "collect.out").write_text(done.stdout + done.stderr)
    entries = sorted(pending.rglob("*.json"))
    groups = {}
    for path in entries:
        provenance = json.loads(path.read_text())["provenance"]
        groups[path.name] = {
            "finding": provenance["finding"]["subject"],
            "members": len(provenance["collected"]["members"]),
            "finders": len(provenance["finders"]),
        }
    fleet.say(
        "collect",
        "result",
        {"exit": done.returncode, "seconds": round(seconds, 1), "entries": groups},
        f"exit {done.returncode}, {seconds:.1f} s: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} written {groups}",
    )
    for line in done.stdout.splitlines():
        print(f"          | {line}")


def part_down(fleet: Fleet) -> None:
    from conformance.fleet import inbox

    # the store killed mid-session: a second server for it, killed once the first test passed
    doomed = LocalRedis().start()
    try:
        folder = fleet.folder("down-killed")
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "conformance/suite/test_differential.py"]
        command += ["conformance/suite/test_metamorphic.py", "-k", "not long_rows and not beyond", "--conformance-kernel", CORRECT]
        command += ["--conformance-device", "cpu", "--hypothesis-profile", "fleet", "--conformance-shared-store", doomed.url]
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, env=fleet.env(folder), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines, killed_at = [], None
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if killed_at is None and "PASSED" in line:
                doomed.kill()
                killed_at = time.monotonic() - started
        code = process.wait(timeout=BACKSTOP_S)
        seconds = time.monotonic() - started
        text = "".join(lines)
        (folder / "pytest.out").write_text(text)
        said = [l.strip() for l in lines if "shared store" in l]
        fleet.say(
            "down",
            "killed_mid_session",
            {"exit": code, "seconds": round(seconds, 1), "killed_at": killed_at, "said": said},
            f"store SIGKILLed at {killed_at or 0:.1f} s of a {CORRECT} session: exit {code}, {seconds:.1f} s; "
            f"said: {said[-1] if said else '-'}",
        )
    finally:
        doomed.stop()
    # a listener that never answers: a correct kernel's campaign with a budget, beside the same
    # campaign (ci seeds: the same examples) with no store, which overruns its budget as much
    # (a chunk stops once its example in flight is judged)
    folder = fleet.folder("down-no-store")
    command = [a for a in fleet.fuzz(folder, CORRECT, "unused") if a not in ("--shared-store", "unused")]
    subprocess.run(command, cwd=folder, env=fleet.env(folder), capture_output=True, text=True, timeout=BACKSTOP_S)
    baseline = json.loads(next((folder / ".conformance" / "runs").glob("fuzz-*/fuzz-summary.json")).read_text())
    fleet.say(
        "down",
        "no_store_baseline",
        {"campaign_s": baseline["seconds"], "examples": baseline["examples"], "budget_s": fleet.fuzz_seconds},
        f"the same {CORRECT} campaign with no store: campaign {baseline['seconds']:.1f} s of a {fleet.fuzz_seconds:g} s budget, "
        f"{baseline['examples']} examples",
    )
    with NeverAnswers() as listener:
        folder = fleet.folder("down-never-answers")
        started = time.monotonic()
        done = subprocess.run(
            fleet.fuzz(folder, CORRECT, listener.url), cwd=folder, env=fleet.env(folder), capture_output=True, text=True, timeout=BACKSTOP_S
        )
        seconds = time.monotonic() - started
        (folder / "fuzz.out").write_text(done.stdout + done.stderr)
        summary = json.loads(next((folder / ".conformance" / "runs").glob("fuzz-*/fuzz-summary.json")).read_text())
        said = [l.strip() for l in done.stdout.splitlines() if "shared store" in l]
        fleet.say(
            "down",
            "never_answers",
            {
                "exit": done.returncode,
                "seconds": round(seconds, 1),
                "campaign_s": summary["seconds"],
                "budget_s": fleet.fuzz_seconds,
                "said": said,
            },
            f"listener that never answers, {CORRECT} campaign: exit {done.returncode}, campaign {summary['seconds']:.1f} s "
            f"({summary['examples']} examples) "
            f"of a {fleet.fuzz_seconds:g} s budget ({seconds:.1f} s with start-up); said: {said[0] if said else '-'}",
        )
    # a broken kernel's campaign with the store down, then corpus push once it is back
    later = LocalRedis(tcp=True)
    try:
        folder = fleet.folder("down-push")
        done = subprocess.run(
            fleet.fuzz(folder, BROKEN, later.url, "--shrink-seconds", "10"),
            cwd=folder,
            env=fleet.env(folder),
            capture_output=True,
            text=True,
            timeout=BACKSTOP_S,
        )
        (folder / "fuzz.out").write_text(done.stdout + done.stderr)
        waiting = inbox.count_queued(folder / ".conformance")
        later.start()
        pushed = subprocess.run(
            [sys.executable, "-m", "conformance", "corpus", "push", "--shared-store", later.url],
            cwd=folder,
            env=fleet.env(folder),
            capture_output=True,
            text=True,
            timeout=BACKSTOP_S,
        )
        left = inbox.count_queued(folder / ".conformance")
        fleet.say(
            "down",
            "push",
            {
                "fuzz_exit": done.returncode,
                "unpushed": waiting,
                "push_exit": pushed.returncode,
                "left": left,
                "said": pushed.stdout.strip(),
            },
            f"{BROKEN} campaign with the store down: exit {done.returncode}, {waiting} unpushed; "
            f"corpus push: exit {pushed.returncode}, {pushed.stdout.strip()}",
        )
    finally:
        later.stop()


def part_cost(fleet: Fleet) -> None:
    """The same examples (one Hypothesis seed, an empty namespace and a fresh local folder each
    time) with the store and without it; and what the store did for them: its commands per
    example and the round trip of one command from this machine."""
    rates = {}
    correct = fleet.namespace(CORRECT)
    client = fleet.store.client
    for label, url in (("with the store", fleet.server.url), ("without a store", None)):
        for key in client.scan_iter(match=correct.examples_prefix + b"*"):
            client.delete(key)
        folder = fleet.folder(f"cost-{'store' if url else 'local'}")
        before = int(client.info("stats")["total_commands_processed"])
        done, seconds = fleet.pytest(folder, CORRECT, url, "--hypothesis-seed", "1")
        commands = int(client.info("stats")["total_commands_processed"]) - before - 1
        generate = phases(done.stdout).get("generate", {})
        examples = generate.get("passing", 0) + generate.get("failing", 0)
        rate = examples / generate["seconds"] if generate.get("seconds") else 0.0
        rates[label] = {
            "examples": examples,
            "seconds": generate.get("seconds"),
            "examples_per_s": round(rate, 3),
            "store_commands": commands,
            "exit": done.returncode,
        }
        fleet.say(
            "cost",
            label.replace(" ", "_"),
            rates[label],
            f"{CORRECT} under the fleet profile {label}: {examples} examples in {generate.get('seconds')} s of generate phase: "
            f"{rate:.3f} examples/s (session {seconds:.1f} s; {commands} store commands)",
        )
    started = time.perf_counter()
    for _ in range(2000):
        client.sismember(correct.examples_prefix + b"probe", b"x")
    round_trip_ms = (time.perf_counter() - started) / 2000 * 1e3
    per_example = rates["with the store"]["store_commands"] / max(1, rates["with the store"]["examples"])
    fleet.say(
        "cost",
        "store_per_example",
        {"commands_per_example": round(per_example, 2), "round_trip_ms": round(round_trip_ms, 4)},
        f"the store's part: {per_example:.2f} commands per example x {round_trip_ms:.3f} ms per command "
        f"= {per_example * round_trip_ms:.3f} ms per example",
    )


def main(argv: list[str] | None = None) -> int:
    """The routine (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks fleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help="where the runners' folders go (default: a fresh temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements as JSON here")
    parser.add_argument("--examples", type=int, default=30, help="examples per property test of the fleet profile (default 30)")
    parser.add_argument("--fuzz-seconds", type=float, default=60.0, help="budget of each fuzz campaign (default 60)")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=None, help="run these parts only (collect needs shards)")
    args = parser.parse_args(argv)
    if args.examples < 1 or not args.fuzz_seconds > 0:
        print("benchmarks fleet: --examples must be >= 1 and --fuzz-seconds > 0", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    try:
        fleet = Fleet(out, args.examples, args.fuzz_seconds)
    except (FileNotFoundError, RuntimeError) as err:
        print(f"benchmarks fleet: {err}", file=sys.stderr)
        return 2
    try:
        print(f"store {fleet.server.url}; runners' folders under {out}", flush=True)
        for part in args.only or PARTS:
            {
                "replay": part_replay,
                "namespace": part_namespace,
                "shards": part_shards,
                "collect": part_collect,
                "down": part_down,
                "cost": part_cost,
            }[part](fleet)
    finally:
        fleet.server.stop()
    if args.json is not None:
        args.json.write_text(json.dumps(fleet.results, indent=2, default=str) + "\n")
    return 0
