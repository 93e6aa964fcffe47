"""The live fuzzer's short run (tests/fuzz_live.py): Hypothesis programs of hostile inputs
against askgate over stdio and over Streamable HTTP, each followed by the three checks (the
server answers ping, its maps are back to their baseline, no tool ran without a matching
approval). ``make fuzz DURATION=...`` runs the same inputs for longer (bench/fuzz.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .fuzz_codec import SEEDS, one_input, regressions
from .fuzz_live import ASKS, Answer, Call, Live, Step, live_servers, programs

# The short run of make test: an input takes about 10 ms over stdio and 0.3 s over HTTP here
# (each step waits for a ping's answer). bench/fuzz.py raises both for `make fuzz`.
STDIO_EXAMPLES = int(os.environ.get("ASKGATE_FUZZ_STDIO_EXAMPLES", "150"))
HTTP_EXAMPLES = int(os.environ.get("ASKGATE_FUZZ_HTTP_EXAMPLES", "25"))
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_servers() as servers:
        yield servers


@settings(max_examples=STDIO_EXAMPLES, deadline=None, suppress_health_check=HEALTH)
@given(program=programs())
def test_fuzz_stdio(live: Live, program: list[Step]) -> None:
    live.run_stdio(program)


@settings(max_examples=HTTP_EXAMPLES, deadline=None, suppress_health_check=HEALTH)
@given(program=programs())
# Found by the fuzzer: U+0085 in a result read from an SSE stream, which the test's reader once
# split as a line break (tests/fuzz_live.py reads SSE lines as SSE splits them).
@example(program=[Call(ASKS, "a\x85b", None), Answer(0, "approve")])
@example(program=[Call("echo", "\u2028\x85", None)])
def test_fuzz_http(live: Live, program: list[Step]) -> None:
    live.run_http(program)


@pytest.mark.parametrize("data", [pytest.param(data, id=name) for name, data in regressions()])
def test_fuzz_codec_regressions(data: bytes) -> None:
    """Every input saved from a coverage-guided run goes through the codec and the reducer
    without an exception or a broken invariant."""
    one_input(data)


@settings(max_examples=300, deadline=None, suppress_health_check=HEALTH)
@given(data=st.one_of(st.binary(max_size=300), st.sampled_from(SEEDS)))
def test_fuzz_codec_short(data: bytes) -> None:
    """A short run of the codec target (make fuzz runs it coverage-guided, under atheris)."""
    one_input(data)
