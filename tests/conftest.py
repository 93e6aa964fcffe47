"""Test-run settings shared by every test file.

Hypothesis runs under the ``ci`` profile: the settings in force (its defaults, or a profile a
plugin loaded first) without the two checks of the machine's speed, the 200 ms deadline per
example and the too_slow health check. The suite's servers share the machine's two cores with
the tests, and a machine shared with other work can make any example slow: those checks then
fail a test whose code is right. Every test's number of examples and every assertion stay as
written; ``pytest --hypothesis-profile=default`` runs with Hypothesis's own defaults.

Hypothesis's pool of local constants is pinned empty (tests/hypothesis_pool.py): otherwise a
derandomized test's histories depend on which modules the tests before it imported.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from .hypothesis_pool import pin

settings.register_profile(
    "ci", settings.default, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")
pin()
