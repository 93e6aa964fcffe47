"""The ``make verify`` table of docs/checking.md is written by the runs that measure it.

``make verify`` records each exploration's figures in bench/results/verify.json and rewrites
docs/checking.md's table from it (:mod:`askgate.models.figures`, through ``--readme``); these
tests check the committed doc against the committed figures, and the writer on a shallow run in
a temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from askgate.models import explore, figures

ROOT = Path(__file__).resolve().parent.parent

README_TEXT = """# A project

Some text.

  <!-- verify:begin -->
  | a stale table |
  <!-- verify:end -->

More text.
"""


def test_the_checking_doc_quotes_the_recorded_verify_figures() -> None:
    recorded = figures.load(ROOT / "bench" / "results" / "verify.json")
    assert set(recorded) == set(explore.CONFIGS)
    assert figures.quoted_table(ROOT / "docs" / "checking.md") == figures.table(recorded)


def test_explore_records_its_figures_and_rewrites_the_readme_table(tmp_path: Path) -> None:
    record, readme = tmp_path / "verify.json", tmp_path / "README.md"
    readme.write_text(README_TEXT, encoding="utf-8")
    options = ["--record", str(record), "--readme", str(readme)]
    assert explore.main(["--depth", "2", "--config", "open", *options]) == 0
    assert explore.main(["--depth", "1", "--config", "tight", *options]) == 0
    assert explore.main(["--depth", "3", "--config", "open", *options]) == 0

    open3, tight1 = explore.explore(explore.OPEN, 3), explore.explore(explore.TIGHT, 1)
    assert figures.load(record) == {
        "open": {"depth": 3, "states": open3.states, "transitions": open3.transitions},
        "tight": {"depth": 1, "states": tight1.states, "transitions": tight1.transitions},
    }
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# A project\n\nSome text.\n\n  <!-- verify:begin -->\n")
    assert text.endswith("  <!-- verify:end -->\n\nMore text.\n")
    assert "stale" not in text
    assert figures.quoted_table(readme) == figures.table(figures.load(record))
    states, transitions = (f"{n:,}".replace(",", " ") for n in (open3.states, open3.transitions))
    assert f"  | open | 3 | {states} | {transitions} |" in text.splitlines()


def test_table_groups_digits_by_three() -> None:
    rows = figures.table({"tight": {"depth": 10, "states": 119223, "transitions": 2831371}})
    assert rows[-1] == "| tight | 10 | 119 223 | 2 831 371 |"


def test_the_writer_refuses_a_readme_without_one_pair_of_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="verify:begin"):
        figures.rewrite_readme(readme, {})
    readme.write_text(README_TEXT + README_TEXT, encoding="utf-8")
    with pytest.raises(ValueError, match="verify:begin"):
        figures.quoted_table(readme)
