"""The spec agrees with the code: rendered tables are current and every rule has a test."""

from __future__ import annotations

from pathlib import Path

from tools import specdoc

ROOT = Path(__file__).resolve().parent.parent


def test_every_rule_has_a_test_named_after_it() -> None:
    ids = specdoc.rules(ROOT)
    assert len(ids) >= 40, "spec/rules.md lost its rules"
    tested = specdoc.tests_by_rule(ROOT)
    missing = [rule for rule in ids if rule not in tested]
    assert not missing, f"rules with no test named after them: {missing}"


def test_tests_name_only_rules_that_exist() -> None:
    ids = specdoc.rules(ROOT)
    unknown = sorted(rule for rule in specdoc.tests_by_rule(ROOT) if rule not in ids)
    assert not unknown, f"tests named after rules the spec does not have: {unknown}"


def test_rendered_spec_files_are_current() -> None:
    for path, text in specdoc.rendered(ROOT).items():
        committed = path.read_text(encoding="utf-8") if path.exists() else ""
        assert committed == text, f"{path.name} is stale: run `make spec` and commit it"
