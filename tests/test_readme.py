"""The README's snippets run: what it shows a user is what askgate does.

- Every ``python`` block runs as a script in a fresh interpreter, after the blocks above it in
  the same section (a section's blocks build one program; the lines that serve forever, ``if
  __name__ == "__main__": raise SystemExit(server.run_...())``, are left out of the blocks they
  are not the last of), but for the files of the walkthrough, which tests/test_cli.py serves
  and drives. A script that
  serves on stdio is sent ``initialize`` and ``tools/list`` and must list every tool its blocks
  register, then end at end of input with status 0.
- Every ``toml`` block is a policy file askgate loads; the demo's is the shipped file.
- Every ``json`` block is JSON.
- Every ``sh`` line is checked against what it names: ``make`` targets exist in the Makefile,
  ``askgate`` command lines parse with the CLI's own parser (a synopsis line, one with ``[``,
  names only flags the CLI has), files and extras it names exist.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from askgate.__main__ import _parser
from askgate.policy import parse_policy

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.M | re.S)
_SERVES = re.compile(
    r"^if __name__ == \"__main__\":[^\n]*\n\s+raise SystemExit\(\w+\.run_\w+\(.*\)\)\s*$", re.M
)
_REGISTERS = re.compile(r"@\w+\.tool\((?:name=\"(\w+)\")?[^)]*\)\n(?:async )?def (\w+)")


def _blocks(language: str, *, files: bool = False) -> list[tuple[str, int, str]]:
    """``(section, line, text)`` of every ``language`` block, in README order: the blocks that
    are files of the walkthrough (marked ``<!-- file: NAME -->``, run by tests/test_cli.py) when
    ``files``, the others when not."""
    found = []
    for match in _FENCE.finditer(README):
        if match.group(1) != language:
            continue
        before = README[: match.start()]
        if before.rstrip().endswith("-->") != files:
            continue
        headings = re.findall(r"^## (.+)$", before, re.M)
        found.append((headings[-1] if headings else "", before.count("\n") + 1, match.group(2)))
    return found


def _programs() -> list[tuple[str, str]]:
    """Each python block with the blocks above it in its section: ``(id, script)``."""
    programs = []
    blocks = _blocks("python")
    for index, (section, line, text) in enumerate(blocks):
        earlier = [t for s, _, t in blocks[:index] if s == section]
        script = "\n".join([*(_SERVES.sub("", t) for t in earlier), text])
        programs.append((f"line {line}", script))
    return programs


def _stdio_session() -> bytes:
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "readme", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


@pytest.mark.parametrize(("where", "script"), _programs(), ids=[w for w, _ in _programs()])
def test_readme_python_blocks_run(where: str, script: str, tmp_path: Path) -> None:
    serves = "run_stdio()" in script
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=_stdio_session() if serves else b"",
        check=False,
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    if serves:
        replies = {r["id"]: r for r in map(json.loads, done.stdout.decode().splitlines())}
        listed = {tool["name"] for tool in replies[2]["result"]["tools"]}
        registered = {name or func for name, func in _REGISTERS.findall(script)}
        assert registered, where
        assert registered <= listed, f"{where}: listed {sorted(listed)}"


def test_readme_has_runnable_python() -> None:
    assert len(_programs()) >= 3
    assert len(_blocks("python", files=True)) >= 2


@pytest.mark.parametrize("text", [text for _, _, text in _blocks("python", files=True)])
def test_readme_walkthrough_files_compile(text: str) -> None:
    compile(text, "README.md", "exec")  # tests/test_cli.py runs them with the official client


@pytest.mark.parametrize(
    ("line", "text"),
    [(line, text) for f in (False, True) for _, line, text in _blocks("toml", files=f)],
)
def test_readme_policy_blocks_load(line: int, text: str) -> None:
    policy = parse_policy(text, f"README.md line {line}")
    assert policy.tools
    assert not policy.warnings, policy.warnings  # what the README shows is what it means
    if "askgate serve --demo" in text:  # the demo's policy, quoted whole
        assert text == (ROOT / "askgate" / "demo_policy.toml").read_text()


@pytest.mark.parametrize("text", [text for _, _, text in _blocks("json")])
def test_readme_json_blocks_parse(text: str) -> None:
    assert isinstance(json.loads(text), dict)


def _walkthrough_files() -> set[str]:
    return set(re.findall(r"^<!-- file: (\S+) -->$", README, re.M))


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", makefile, re.M))


def _shell_lines() -> list[tuple[int, str]]:
    """Every command of every ``sh`` block (continued lines joined), comments cut."""
    lines: list[tuple[int, str]] = []
    for _, line, text in _blocks("sh"):
        for offset, raw in enumerate(text.splitlines(), 1):
            command = raw.split(" #", 1)[0].rstrip()
            if raw.startswith(" ") and lines:  # a synopsis continued on the next line
                lines[-1] = (lines[-1][0], f"{lines[-1][1]} {command.strip()}")
            elif command:
                lines.append((line + offset, command))
    return lines


def _serve_flags() -> set[str]:
    parser = _parser()
    serve = next(
        action.choices["serve"]
        for action in parser._actions  # argparse has no public walk
        if isinstance(action.choices, dict) and "serve" in action.choices
    )
    return {flag for action in serve._actions for flag in action.option_strings}


@pytest.mark.parametrize(("line", "command"), _shell_lines())
def test_readme_shell_lines_name_what_exists(line: int, command: str) -> None:
    words = shlex.split(command)
    program = words[0]
    if program == "make":
        target = words[1].split("=")[0] if len(words) > 1 else "test"
        assert target in _make_targets(), f"line {line}: no make target {target}"
    elif program.endswith("askgate"):
        if "[" in command:  # a synopsis: every flag it names is one the CLI has
            unknown = set(re.findall(r"--[\w-]+", command)) - _serve_flags()
            assert not unknown, f"line {line}: the CLI has no {sorted(unknown)}"
        else:
            _parser().parse_args(words[1:])  # exits 2 on a flag or value it refuses
    elif program == "pip":
        for extra in re.findall(r"askgate\[(\w+)\]", command):
            extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
                "optional-dependencies"
            ]
            assert extra in extras, f"line {line}: no extra {extra}"
    elif program in ("python", "python3"):
        script = next(w for w in words[1:] if not w.startswith("-"))
        known = (ROOT / script).is_file() or script in _walkthrough_files()
        assert known, f"line {line}: {script}"
    else:
        assert program in ("mkdir", "cd", "curl", "claude"), f"line {line}: unchecked {program}"


def test_readme_shell_lines_are_found() -> None:
    commands = [c for _, c in _shell_lines()]
    assert any(c.startswith("make test") for c in commands)
    assert any(c.startswith("askgate serve") for c in commands)
