"""Test-run settings shared by every test file.

`make test` runs the suite on two pytest-xdist workers with ``--dist loadgroup``. Some tests
share work inside one process: runs kept by ``functools.cache`` in their module (the
explorations, the model's Context runs, the matrix) and module-scoped fixtures (servers, a
recorded demo). Each such test is marked with an xdist group, one per module, so one worker
runs all the tests sharing that module's work and does it once, as a run without xdist does;
every other test goes to whichever worker is free.

Hypothesis runs under the ``ci`` profile: the settings in force (its defaults, or a profile a
plugin loaded first) without the two checks of the machine's speed, the 200 ms deadline per
example and the too_slow health check. Two workers beside the servers they start share two cores,
and a machine shared with other work can make any example slow: those checks then fail a test
whose code is right. Every test's number of examples and every assertion stay as written;
``pytest --hypothesis-profile=default`` runs with Hypothesis's own defaults.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import CodeType, ModuleType

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", settings.default, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")

# Module-scoped fixtures, by the module that defines them: the tests using one share a group.
MODULE_FIXTURES = {
    "tests.test_audit": {"demo"},
    "tests.test_fuzz": {"live"},
}


def _names(code: CodeType) -> Iterator[str]:
    """The global names ``code`` and the functions and classes defined in it refer to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def _sharing(module: ModuleType) -> frozenset[str]:
    """The names of ``module``'s functools.cache functions and of its functions calling one."""
    found = {name for name, value in vars(module).items() if hasattr(value, "cache_info")}
    functions = {
        name: set(_names(value.__code__))
        for name, value in vars(module).items()
        if callable(value) and getattr(value, "__module__", None) == module.__name__
        if hasattr(value, "__code__")
    }
    grown = True
    while grown:
        grown = False
        for name, names in functions.items():
            if name not in found and names & found:
                found.add(name)
                grown = True
    return frozenset(found)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test that shares work kept in its module with that module's xdist group."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    sharing: dict[str, frozenset[str]] = {}
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        module = item.module
        if module.__name__ not in sharing:
            sharing[module.__name__] = _sharing(module)
        code = getattr(item.function, "__code__", None)
        calls = code is not None and not sharing[module.__name__].isdisjoint(_names(code))
        fixtures = MODULE_FIXTURES.get(module.__name__, set())
        if calls or not fixtures.isdisjoint(item.fixturenames):
            item.add_marker(pytest.mark.xdist_group(name=module.__name__))
