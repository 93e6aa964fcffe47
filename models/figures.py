"""The ``make verify`` figures the README quotes, written by the runs that measure them.

``python -m askgate.models.explore --record FILE`` merges each explored configuration's depth,
distinct states and transitions into the JSON file ``FILE`` (bench/results/verify.json for
``make verify``); ``--readme README`` then rewrites the table between :data:`BEGIN` and
:data:`END` in ``README`` from ``FILE``. tests/test_verify_figures.py checks that README.md's
table is the one bench/results/verify.json gives, so the two cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path

BEGIN = "<!-- verify:begin -->"
END = "<!-- verify:end -->"

Figures = dict[str, dict[str, int]]
"""Configuration name -> ``{"depth": .., "states": .., "transitions": ..}``, in table order."""


def load(path: Path) -> Figures:
    """The figures in ``path``; none when it does not exist yet."""
    if not path.exists():
        return {}
    figures: Figures = json.loads(path.read_text(encoding="utf-8"))
    return figures


def record(path: Path, name: str, depth: int, states: int, transitions: int) -> None:
    """Sets configuration ``name``'s figures in ``path``, keeping the others and their order."""
    figures = load(path)
    figures[name] = {"depth": depth, "states": states, "transitions": transitions}
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def _number(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def table(figures: Figures) -> list[str]:
    """The Markdown table of ``figures``, one configuration a row, numbers in groups of three."""
    rows = [
        "| `make verify` | depth | distinct states | transitions |",
        "| --- | --- | --- | --- |",
    ]
    for name, f in figures.items():
        rows.append(
            f"| {name} | {f['depth']} | {_number(f['states'])} | {_number(f['transitions'])} |"
        )
    return rows


def _markers(lines: list[str], path: Path) -> tuple[int, int]:
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ValueError(f"{path}: expected one {BEGIN} line followed by one {END} line")
    return begins[0], ends[0]


def quoted_table(readme: Path) -> list[str]:
    """The lines between the markers in ``readme``, without their indentation."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    begin, end = _markers(lines, readme)
    return [line.strip() for line in lines[begin + 1 : end]]


def rewrite_readme(readme: Path, figures: Figures) -> None:
    """Replaces the lines between the markers in ``readme`` with :func:`table` of ``figures``,
    indented as the begin marker is."""
    text = readme.read_text(encoding="utf-8")
    lines = text.splitlines()
    begin, end = _markers(lines, readme)
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    lines[begin + 1 : end] = [indent + row for row in table(figures)]
    readme.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
