"""``make conformance``: the official MCP conformance suite against askgate's fixture.

1. Installs, into ``.conformance/`` (ignored by git) and only when missing, a Node 22 binary
   (the suite needs ``fs.globSync``; ``npm install node@22``) and the two pinned versions of
   ``@modelcontextprotocol/conformance``, each in its own folder.
2. Starts ``examples/conformance_server.py`` on 127.0.0.1 on a free port and waits until it
   answers HTTP (a bounded number of tries, each waiting on the fixture's exit, so a fixture
   that dies is reported at once).
3. Runs three suites: the 0.1.16 active suite at protocol revision 2025-11-25, and the 0.2.0
   alpha's frozen requirement sets ``--requirements 2025-11-25`` (the stateful wire) and
   ``--requirements 2026-07-28`` (the stateless wire); saves each run's output and
   ``checks.json`` files under ``.conformance/results/<run>/``; prints each scenario's line,
   each run's ``Total: X passed, Y failed``, the checks of its scored scenarios, and a summary;
   stops the fixture.

A requirement set also runs scenarios it does not score (extensions, scenarios pending against
the suite's own reference fixture), listed after the suite's ``Not scored for <revision>:``
line; their checks count in the suite's ``Total`` but, as in the suite's own exit status, they
cannot fail the run. A run passes when no check of a scored scenario failed and the suite
exited 0.

Exit status: 0 when every run passes, 1 when a scored check failed or a run gave no total, 2
when the run could not start (no npm, an install failed, the fixture did not come up).
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
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final, NamedTuple

ROOT: Final = Path(__file__).resolve().parent.parent
WORK: Final = ROOT / ".conformance"
FIXTURE: Final = ROOT / "examples" / "conformance_server.py"
NODE_MAJOR: Final = "22"
PACKAGE: Final = "@modelcontextprotocol/conformance"
REVISION: Final = "2025-11-25"
READY_TRIES: Final = 150
READY_WAIT_S: Final = 0.1
SUITE_TIMEOUT_S: Final = 1800
STOP_WAIT_S: Final = 10

ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
TOTAL: Final = re.compile(r"Total: (\d+) passed, (\d+) failed")
SCENARIO: Final = re.compile(r"^\s*([✓✗]) (\S+): (\d+) passed, (\d+) failed")
NOT_SCORED: Final = re.compile(r"^Not scored for \S+:")
UNSCORED_ENTRY: Final = re.compile(r"^\s+[✓✗] (\S+) \(([^)]*)\)")
MODERN: Final = "2026-07-28"
ALPHA: Final = "0.2.0-alpha.12"


class Suite(NamedTuple):
    version: str
    args: tuple[str, ...]
    what: str
    label: str
    """The run's folder under ``.conformance/results/``."""


SUITES: Final = (
    Suite("0.1.16", ("--spec-version", REVISION), f"active suite at {REVISION}", "0.1.16"),
    Suite(ALPHA, ("--requirements", REVISION), f"--requirements {REVISION}", ALPHA),
    Suite(ALPHA, ("--requirements", MODERN), f"--requirements {MODERN}", f"{ALPHA}-{MODERN}"),
)


class Scenario(NamedTuple):
    name: str
    passed: int
    failed: int
    line: str


class Outcome(NamedTuple):
    suite: Suite
    passed: int | None
    failed: int | None
    exit_code: int
    scenarios: tuple[Scenario, ...]
    unscored: frozenset[str]
    """The scenarios the suite ran without scoring them (its ``Not scored`` list)."""

    @property
    def scored(self) -> tuple[Scenario, ...]:
        return tuple(s for s in self.scenarios if s.name not in self.unscored)

    @property
    def scored_failed(self) -> int:
        return sum(s.failed for s in self.scored)

    @property
    def failing(self) -> tuple[str, ...]:
        """The summary lines of the scored scenarios with a failed check."""
        return tuple(s.line for s in self.scored if s.failed)

    @property
    def ok(self) -> bool:
        return self.passed is not None and self.scored_failed == 0 and self.exit_code == 0


def parse_summary(lines: list[str]) -> tuple[tuple[Scenario, ...], frozenset[str]]:
    """The scenario lines of a suite's ``=== SUMMARY`` block, and the names its ``Not scored``
    block lists (empty when the suite scores everything it ran)."""
    scenarios: list[Scenario] = []
    unscored: set[str] = set()
    in_summary = in_unscored = False
    for line in lines:
        if line.startswith("=== SUMMARY"):
            in_summary, in_unscored = True, False
            continue
        if not in_summary:
            continue
        if NOT_SCORED.match(line):
            in_unscored = True
            continue
        if in_unscored:
            entry = UNSCORED_ENTRY.match(line)
            if entry:
                unscored.add(entry[1])
            continue
        found = SCENARIO.match(line)
        if found:
            scenarios.append(Scenario(found[2], int(found[3]), int(found[4]), line.strip()))
    return tuple(scenarios), frozenset(unscored)


class SetupError(Exception):
    """The run could not start: the message says what is missing."""


# -- installing ----------------------------------------------------------------------------------


def _npm_install(folder: Path, spec: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(
            "npm is not on PATH: make conformance installs Node 22 and the suite with it"
        )
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "package.json"
    if not manifest.exists():
        manifest.write_text(json.dumps({"name": folder.name, "private": True}) + "\n")
    print(f"conformance: npm install {spec} (into {folder.relative_to(ROOT)})", flush=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", spec],
        cwd=folder,
        check=False,
    )
    if done.returncode != 0:
        raise SetupError(f"npm install {spec} failed (exit {done.returncode})")


def _node_version(node: Path) -> str | None:
    if not node.exists():
        return None
    try:
        done = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_node() -> Path:
    """The Node 22 binary under ``.conformance/node22``, installed from npm when missing."""
    folder = WORK / f"node{NODE_MAJOR}"
    node = folder / "node_modules" / ".bin" / "node"
    if not (_node_version(node) or "").startswith(f"v{NODE_MAJOR}."):
        _npm_install(folder, f"node@{NODE_MAJOR}")
    version = _node_version(node)
    if not (version or "").startswith(f"v{NODE_MAJOR}."):
        raise SetupError(f"{node} is not Node {NODE_MAJOR} after installing (got {version!r})")
    return node


def _suite_folder(version: str) -> Path:
    return WORK / f"suite-{version}"


def _entry(version: str) -> Path:
    return _suite_folder(version) / "node_modules" / PACKAGE / "dist" / "index.js"


def _installed_version(version: str) -> str | None:
    manifest = _suite_folder(version) / "node_modules" / PACKAGE / "package.json"
    try:
        found = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    value = found.get("version") if isinstance(found, dict) else None
    return value if isinstance(value, str) else None


def ensure_suite(version: str) -> Path:
    """The suite's entry point, ``version`` exactly, installed from npm when missing."""
    if _installed_version(version) != version or not _entry(version).exists():
        _npm_install(_suite_folder(version), f"{PACKAGE}@{version}")
    if _installed_version(version) != version or not _entry(version).exists():
        raise SetupError(f"{PACKAGE}@{version} is not installed after npm install")
    return _entry(version)


# -- the fixture ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    """Whether the fixture answered HTTP: a GET without a session is refused with a 4xx once
    the app is serving (5xx: not running yet)."""
    request = urllib.request.Request(url, headers={"Accept": "text/event-stream"}, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=2):
            return True
    except urllib.error.HTTPError as answered:
        return answered.code < 500
    except (urllib.error.URLError, OSError):
        return False


def start_fixture(port: int, log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, str(FIXTURE), "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def wait_ready(fixture: subprocess.Popen[bytes], url: str, log: Path) -> None:
    for _ in range(READY_TRIES):
        if _answers(url):
            return
        try:
            status = fixture.wait(timeout=READY_WAIT_S)
        except subprocess.TimeoutExpired:
            continue
        tail = log.read_text(errors="replace")[-2000:]
        raise SetupError(f"the fixture exited with status {status} before answering:\n{tail}")
    raise SetupError(f"the fixture did not answer {url} after {READY_TRIES} tries")


def stop_fixture(fixture: subprocess.Popen[bytes]) -> None:
    if fixture.poll() is not None:
        return
    fixture.send_signal(signal.SIGTERM)
    try:
        fixture.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        fixture.kill()
        fixture.wait(timeout=STOP_WAIT_S)


# -- running a suite -----------------------------------------------------------------------------


def run_suite(node: Path, entry: Path, suite: Suite, url: str, verbose: bool) -> Outcome:
    out = WORK / "results" / suite.label
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    command = [str(node), str(entry), "server", "--url", url, "-o", str(out), *suite.args]
    env = {**os.environ, "PATH": f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["NO_COLOR"] = "1"
    print(f"\n=== {PACKAGE}@{suite.version} ({suite.what}) ===", flush=True)
    process = subprocess.Popen(
        command,
        cwd=_suite_folder(suite.version),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    watchdog = threading.Timer(SUITE_TIMEOUT_S, process.kill)
    watchdog.start()
    lines: list[str] = []
    in_summary = False
    try:
        assert process.stdout is not None
        for raw in process.stdout:
            line = ANSI.sub("", raw.rstrip("\n"))
            lines.append(line)
            in_summary = in_summary or line.startswith("=== SUMMARY")
            if verbose or in_summary:
                print(line, flush=True)
        exit_code = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:  # interrupted: leave no suite running
            process.kill()
            process.wait()
    (out / "output.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    totals = [TOTAL.search(line) for line in lines]
    found = [m for m in totals if m is not None]
    scenarios, unscored = parse_summary(lines)
    if not found:
        print(f"conformance: no 'Total:' line from {suite.label} (exit {exit_code})")
        return Outcome(suite, None, None, exit_code, scenarios, unscored)
    return Outcome(suite, int(found[-1][1]), int(found[-1][2]), exit_code, scenarios, unscored)


def summarize(outcomes: list[Outcome]) -> bool:
    """Prints one line per run (and its failing scored scenarios); whether every run passed."""
    print("\n=== askgate conformance summary ===")
    for outcome in outcomes:
        name = f"{PACKAGE}@{outcome.suite.version} ({outcome.suite.what})"
        if outcome.passed is None:
            print(f"{name}: no total (exit {outcome.exit_code})")
            continue
        scored = outcome.scored
        line = (
            f"{name}: Total: {outcome.passed} passed, {outcome.failed} failed; "
            f"scored: {len(scored)} scenarios, {sum(s.passed for s in scored)} checks passed, "
            f"{outcome.scored_failed} failed"
        )
        if outcome.unscored:
            failing = sum(1 for s in outcome.scenarios if s.name in outcome.unscored and s.failed)
            line += f"; not scored: {len(outcome.unscored)} scenarios ({failing} failing)"
        print(line)
        for failed in outcome.failing:
            print(f"    {failed}")
        if outcome.passed is not None and outcome.exit_code != 0 and not outcome.failing:
            print(f"    exit {outcome.exit_code}")
    ok = all(outcome.ok for outcome in outcomes)
    print(f"results: {(WORK / 'results').relative_to(ROOT)}/ (checks.json per scenario)")
    print("conformance: PASS" if ok else "conformance: FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Runs the MCP conformance suite on askgate.")
    parser.add_argument("--verbose", action="store_true", help="print every line of each suite")
    parser.add_argument(
        "--run",
        action="append",
        choices=[suite.label for suite in SUITES],
        help="run only this one (repeatable; default: all three)",
    )
    args = parser.parse_args(argv)
    suites = [suite for suite in SUITES if not args.run or suite.label in args.run]
    # A SIGTERM ends the run through the finally blocks below (the fixture and any suite are
    # stopped), as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        node = ensure_node()
        entries = {suite.version: ensure_suite(suite.version) for suite in suites}
    except SetupError as failed:
        print(f"conformance: {failed}", file=sys.stderr)
        return 2
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = WORK / "results" / "fixture.log"
    fixture = start_fixture(port, log)
    try:
        try:
            wait_ready(fixture, url, log)
        except SetupError as failed:
            print(f"conformance: {failed}", file=sys.stderr)
            return 2
        print(f"conformance: the fixture answers on {url} (log: {log.relative_to(ROOT)})")
        outcomes = [
            run_suite(node, entries[suite.version], suite, url, args.verbose) for suite in suites
        ]
    finally:
        stop_fixture(fixture)
    return 0 if summarize(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
