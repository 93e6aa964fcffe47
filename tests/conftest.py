"""Test-run settings shared by every test file.

`make test` runs the suite on two pytest-xdist workers with ``--dist loadgroup``. The test
files below share work between their tests inside one process (module-scoped fixtures, and
explorations or model runs kept by ``functools.cache``): each is marked as one xdist group, so
one worker runs the whole file and does that work once, as a run without xdist does.
"""

from __future__ import annotations

import pytest

# Test files whose tests share work kept in the process, by module name.
SHARED_IN_PROCESS = frozenset(
    {
        "tests.test_audit",  # the module-scoped demo trace
        "tests.test_explore",  # explorations kept by functools.cache
        "tests.test_fuzz",  # the module-scoped live servers
        "tests.test_matrix",  # explorations kept by functools.cache
        "tests.test_model",  # the Context and ContextChurn runs kept by functools.cache
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test of a file in ``SHARED_IN_PROCESS`` with that file's xdist group."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.module.__name__ if isinstance(item, pytest.Function) else None
        if module in SHARED_IN_PROCESS:
            item.add_marker(pytest.mark.xdist_group(name=module))
