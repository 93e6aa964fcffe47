"""Renders the parts of ``spec/`` that must agree with the code, so they cannot drift.

A repository tool, not in the wheel. ``python tools/specdoc.py [ROOT]`` (``make spec``) writes
``spec/transitions.md`` from the reducer's transition tables (``askgate.transitions``, what
``askgate spec`` prints), ``spec/matrix.md`` from runs of the reducer (``askgate.matrix``)
and ``spec/traceability.md`` from the rule ids in ``spec/*.md`` and
the test functions named after them. ``tests/test_spec.py`` fails when the committed files differ
from what this renders, or when a rule has no test.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from askgate import matrix, transitions

RULE_HEADING = re.compile(r"^### (R-[A-Z]+-\d+) · (.+)$", re.MULTILINE)
TEST_RULE = re.compile(r"^test_(R_[A-Z]+_\d+)(?:_|$)")

# Which kind of checker a test file is; a test file not listed counts as "example".
CHECKERS = {
    "test_model.py": "model",
    "test_explore.py": "exhaustive",
    "test_crosshair.py": "crosshair",
    "test_totality.py": "totality",
}


def rules(root: Path, pattern: str = "*.md") -> dict[str, str]:
    """Every rule id in ``spec/*.md`` (or the files ``pattern`` names) and its title, in file
    order."""
    found: dict[str, str] = {}
    for path in sorted((root / "spec").glob(pattern)):
        for rule, title in RULE_HEADING.findall(path.read_text(encoding="utf-8")):
            found[rule] = title.strip()
    return found


def modelled(root: Path) -> set[str]:
    """The rules the reference model implements: spec/rules.md but its NOT_MODELLED."""
    # Imported here: askgate.models needs Hypothesis, which `askgate spec` does not.
    from askgate.models.reference import NOT_MODELLED  # noqa: PLC0415

    return set(rules(root, "rules.md")) - NOT_MODELLED


def tests_by_rule(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Rule id -> ``(file, test name)`` for every test function named ``test_R_AREA_N_...``."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                match = TEST_RULE.match(node.name)
                if match:
                    rule = match.group(1).replace("_", "-")
                    found.setdefault(rule, []).append((path.name, node.name))
    return found


def render_traceability(root: Path) -> str:
    by_rule = tests_by_rule(root)
    lines = [
        "# Traceability (rendered by `make spec`; do not edit)",
        "",
        "Every rule of spec/, the tests named after it, and the kinds of checker that cover it:",
        "*example* (a test by example), *model* (the Hypothesis machines compare the reducer",
        "with the reference model after every step: every rule of spec/rules.md the model",
        "implements, that is all but `NOT_MODELLED` in models/reference.py), *exhaustive* (the",
        "bounded explorer), *totality* (every event in every state), *crosshair* (contracts",
        "checked symbolically).",
        "",
        "| rule | title | checkers | tests |",
        "| --- | --- | --- | --- |",
    ]
    in_model = modelled(root)
    for rule, title in rules(root).items():
        tests = by_rule.get(rule, [])
        checkers = {CHECKERS.get(file, "example") for file, _ in tests}
        cells = [f"`{file}::{name}`" for file, name in tests]
        if rule in in_model:
            checkers.add("model")
            if not any(file == "test_model.py" for file, _ in tests):
                cells.append("`test_model.py` (every machine: the model implements it)")
        names = "<br>".join(cells) if tests else "**none**"
        kinds = ", ".join(sorted(checkers)) or "**none**"
        lines.append(f"| {rule} | {title} | {kinds} | {names} |")
    return "\n".join(lines) + "\n"


def rendered(root: Path) -> dict[Path, str]:
    return {
        root / "spec" / "transitions.md": transitions.render(),
        root / "spec" / "matrix.md": matrix.render(),
        root / "spec" / "traceability.md": render_traceability(root),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path.cwd()
    for path, text in rendered(root).items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
