"""The README's and docs/'s snippets run: what they show a user is what askgate does.

- README.md stays short (at most :data:`README_LINES` lines) and links every page of docs/; every
  relative link of README.md and docs/*.md names a file that exists, and an anchor a heading of
  it.
- Every ``python`` block runs as a script in a fresh interpreter, after the blocks above it in
  the same section of the same page (a section, ``##`` or ``###``, builds one program; the lines
  that serve forever, ``if __name__ == "__main__": raise SystemExit(server.run_...())``, are
  left out of the blocks they are not the last of), but for the files of the README's
  walkthrough, which tests/test_cli.py serves and drives. A script that serves on stdio is sent
  ``initialize`` and ``tools/list`` and must list every tool its blocks register, then end at
  end of input with status 0.
- Every ``toml`` block is a policy file askgate loads; the demo's is the shipped file.
- Every ``json`` block is JSON; a client's ``mcpServers`` entry that starts ``askgate`` gives it
  arguments its CLI parses.
- Every ``sh`` line is checked against what it names: ``make`` targets exist in the Makefile,
  ``askgate`` command lines parse with the CLI's own parser (a synopsis line, one with ``[``,
  names only flags the CLI has), files and extras it names exist.
- A transcript (a ``text`` block after ``<!-- transcript: askgate core -->``) is run: its ``>``
  lines are fed to ``askgate core`` and every reply must be its ``<`` line.
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
README_LINES = 400
"""The most lines README.md may have: the rest belongs in docs/."""

PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
README = PAGES["README.md"]

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.M | re.S)
_SERVES = re.compile(
    r"^if __name__ == \"__main__\":[^\n]*\n\s+raise SystemExit\(\w+\.run_\w+\(.*\)\)\s*$", re.M
)
_REGISTERS = re.compile(r"@\w+\.tool\((?:name=\"(\w+)\")?[^)]*\)\n(?:async )?def (\w+)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


class Block:
    """One fenced block: its page, the section it is in, its line, and what precedes it."""

    def __init__(self, page: str, text: str, start: int, body: str) -> None:
        before = text[:start]
        headings = re.findall(r"^#{2,3} (.+)$", before, re.M)
        self.page = page
        self.section = headings[-1] if headings else ""
        self.line = before.count("\n") + 1
        self.text = body
        self.marker = before.rstrip().rpartition("\n")[2] if before.rstrip().endswith("-->") else ""

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"


def _blocks(language: str, *, files: bool = False) -> list[Block]:
    """Every ``language`` block of every page, in page order: the blocks that follow a marker
    (``<!-- file: NAME -->``, ``<!-- transcript: ... -->``) when ``files``, the others when
    not."""
    found = []
    for page, text in PAGES.items():
        for match in _FENCE.finditer(text):
            if match.group(1) != language:
                continue
            block = Block(page, text, match.start(), match.group(2))
            if bool(block.marker) == files:
                found.append(block)
    return found


def _programs() -> list[tuple[str, str]]:
    """Each python block with the blocks above it in its section: ``(where, script)``."""
    programs = []
    blocks = _blocks("python")
    for index, block in enumerate(blocks):
        earlier = [
            b.text for b in blocks[:index] if (b.page, b.section) == (block.page, block.section)
        ]
        script = "\n".join([*(_SERVES.sub("", t) for t in earlier), block.text])
        programs.append((block.where, script))
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


# -- the README's shape and the links between pages -------------------------------------------


def test_the_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move sections to docs/"


def test_the_readme_links_every_page_of_docs() -> None:
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)(?:#[\w-]+)?\)", README))
    pages = {page for page in PAGES if page.startswith("docs/")}
    assert pages <= linked, f"not linked from README.md: {sorted(pages - linked)}"


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _links() -> list[tuple[str, str]]:
    return [
        (page, target)
        for page, text in PAGES.items()
        for target in _LINK.findall(_FENCE.sub("", text))
        if "://" not in target
    ]


@pytest.mark.parametrize(("page", "target"), _links())
def test_every_relative_link_names_what_exists(page: str, target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (ROOT / page).parent / path if path else ROOT / page
    assert file.exists(), f"{page}: {target}: no such file"
    if anchor and file.suffix == ".md":
        headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)
        assert anchor in {_anchor(h) for h in headings}, f"{page}: {target}: no such heading"


# -- the snippets --------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "script"), _programs(), ids=[w for w, _ in _programs()])
def test_python_blocks_run(where: str, script: str, tmp_path: Path) -> None:
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


def test_there_is_runnable_python() -> None:
    assert len(_programs()) >= 6
    walkthrough = [b for b in _blocks("python", files=True) if b.page == "README.md"]
    assert len(walkthrough) >= 2


@pytest.mark.parametrize("text", [b.text for b in _blocks("python", files=True)])
def test_walkthrough_files_compile(text: str) -> None:
    compile(text, "README.md", "exec")  # tests/test_cli.py runs them with the official client


@pytest.mark.parametrize(
    ("where", "text"), [(b.where, b.text) for f in (False, True) for b in _blocks("toml", files=f)]
)
def test_policy_blocks_load(where: str, text: str) -> None:
    policy = parse_policy(text, where)
    assert policy.tools
    assert not policy.warnings, policy.warnings  # what a page shows is what it means
    if "askgate serve --demo" in text:  # the demo's policy, quoted whole
        assert text == (ROOT / "askgate" / "demo_policy.toml").read_text()


@pytest.mark.parametrize(("where", "text"), [(b.where, b.text) for b in _blocks("json")])
def test_json_blocks_parse(where: str, text: str) -> None:
    value = json.loads(text)
    assert isinstance(value, dict), where
    for name, entry in value.get("mcpServers", {}).items():
        if Path(entry.get("command", "")).name == "askgate":
            assert Path(entry["command"]).is_absolute(), f"{where}: {name}: a client needs it"
            args = _parser().parse_args(entry["args"])  # exits 2 on what it refuses
            target = getattr(args, "target", None)
            if target is not None:
                assert Path(target.partition(":")[0]).is_absolute(), f"{where}: {name}"


def test_the_readme_configures_a_client_for_a_server_of_ones_own() -> None:
    entries = [json.loads(b.text) for b in _blocks("json") if b.page == "README.md"]
    commands = [
        entry["args"]
        for value in entries
        for entry in value.get("mcpServers", {}).values()
        if "args" in entry
    ]
    assert any("--policy" in args and args[0] == "serve" for args in commands)


def _walkthrough_files() -> set[str]:
    return set(re.findall(r"^<!-- file: (\S+) -->$", README, re.M))


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", makefile, re.M))


def _shell_lines() -> list[tuple[str, str]]:
    """Every command of every ``sh`` block (continued lines joined), comments cut:
    ``(where, command)``."""
    lines: list[tuple[str, str]] = []
    for block in _blocks("sh"):
        for offset, raw in enumerate(block.text.splitlines(), 1):
            command = raw.split(" #", 1)[0].rstrip()
            if raw.startswith(" ") and lines:  # a synopsis continued on the next line
                lines[-1] = (lines[-1][0], f"{lines[-1][1]} {command.strip()}")
            elif command:
                lines.append((f"{block.page} line {block.line + offset}", command))
    return lines


def _serve_flags() -> set[str]:
    parser = _parser()
    serve = next(
        action.choices["serve"]
        for action in parser._actions  # argparse has no public walk
        if isinstance(action.choices, dict) and "serve" in action.choices
    )
    return {flag for action in serve._actions for flag in action.option_strings}


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


@pytest.mark.parametrize(("where", "command"), _shell_lines())
def test_shell_lines_name_what_exists(where: str, command: str) -> None:
    words = shlex.split(command)
    program = Path(words[0]).name or words[0]  # "." (source) has no name
    if program == "make":
        target = words[1].split("=")[0] if len(words) > 1 else "test"
        assert target in _make_targets(), f"{where}: no make target {target}"
    elif program == "askgate":
        if "[" in command:  # a synopsis: every flag it names is one the CLI has
            unknown = set(re.findall(r"--[\w-]+", command)) - _serve_flags()
            assert not unknown, f"{where}: the CLI has no {sorted(unknown)}"
        else:
            _parser().parse_args(words[1:])  # exits 2 on a flag or value it refuses
    elif program == "pip":
        named = re.findall(r"(?:askgate|\.)\[([\w,]+)\]", command)
        assert named, f"{where}: installs no extra of askgate"
        for extra in {e for group in named for e in group.split(",")}:
            assert extra in _extras(), f"{where}: no extra {extra}"
    elif program in ("python", "python3"):
        if words[1] == "-m":  # a module: the standard library's, or askgate's
            assert words[2] in ("venv", "askgate", "compileall"), f"{where}: {words[2]}"
        else:
            script = next(w for w in words[1:] if not w.startswith("-"))
            known = (ROOT / script).is_file() or script in _walkthrough_files()
            assert known, f"{where}: {script}"
    else:
        assert program in ("mkdir", "cd", "curl", "claude", "git", "."), (
            f"{where}: unchecked {program}"
        )


def test_shell_lines_are_found() -> None:
    readme = [c for w, c in _shell_lines() if w.startswith("README.md")]
    assert any(c.startswith("make test") for c in readme)
    assert any(c.startswith("askgate serve") for c in readme)
    assert any("pip install -e '.[sdk]'" in c for c in readme)  # askgate is on no index


# -- the sidecar's transcript ---------------------------------------------------------------------


def _transcripts() -> list[Block]:
    marker = "<!-- transcript: askgate core -->"
    return [b for b in _blocks("text", files=True) if b.marker == marker]


def test_there_is_a_sidecar_transcript() -> None:
    assert [b.page for b in _transcripts()] == ["docs/embedding.md"]


@pytest.mark.parametrize("block", _transcripts(), ids=lambda b: b.where)
def test_the_sidecar_transcript_is_what_askgate_core_answers(block: Block) -> None:
    """The host's lines (``>``) fed to ``askgate core``, one reply line each, in order, each
    the transcript's ``<`` line (spec/embedding.md, R-EMB-10)."""
    lines = block.text.splitlines()
    assert all(line.startswith(("> ", "< ")) for line in lines), block.where
    host = [line[2:] for line in lines if line.startswith("> ")]
    shown = [json.loads(line[2:]) for line in lines if line.startswith("< ")]
    done = subprocess.run(
        [sys.executable, "-m", "askgate", "core"],
        input="\n".join(host) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(replies) == len(host)
    for number, (reply, expected) in enumerate(zip(replies, shown, strict=True), 1):
        assert reply == expected, f"{block.where}: reply {number}"
    assert any(
        effect["kind"] == "Push" and effect["fields"]["message"]["method"] == "elicitation/create"
        for reply in replies
        for effect in reply.get("effects", [])
    )
