"""A bounded flood over Streamable HTTP (tests/flood_clients.py; bench/flood.py is the measured
one): many sessions asking past their caps, one session asking ten times the total cap, one
principal spreading ten times the total cap over many sessions or sending it as 2026-07-28
ASKs, against sessions that each park one call, each session of a principal of its own
unless said otherwise. The server runs in debug mode (every step checked by ``check_invariants``,
caps included), on 127.0.0.1."""

from __future__ import annotations

import pytest

from askgate.core import http as rules
from askgate.demo import build_demo
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp
from askgate.transports.runtime import CHECK_ENV

from .flood_clients import TOKENS, Figures, flood
from .listener import uvicorn_serving

PER_CONN, TOTAL, VICTIMS = 2, 8, 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


async def run_flood(
    mallory_sessions: int,
    modern_asks: int = 0,
    crowd: int = 4,
    legacy_sessions: int = 0,
    slow_calls: int = 0,
) -> tuple[list[tuple[str, int, int]], Figures]:
    """The flood against the demo (caps 2 per session, 8 in total) in debug mode; checks that
    the caps held at every step and that everything is back to empty once the sessions end.
    Returns, after each phase, (phase, parked in total, victims' calls still parked)."""
    server = build_demo(
        max_parked_elicitations=PER_CONN,
        max_parked_elicitations_total=TOTAL,
        elicitation_timeout_ms=600_000,
    )

    def make(port: int) -> HttpApp:
        return HttpApp(server, auth=BearerAuth(TOKENS), options=rules.HttpOptions(port=port))

    phases: list[tuple[str, int, int]] = []
    async with uvicorn_serving(make) as (app, port), app.running():
        runtime = app.runtime

        def during(phase: str) -> None:
            state = runtime.state
            victims_parked = sum(
                1 for call in state.calls.values() if str(call.request_id).startswith("victim-")
            )
            phases.append((phase, state.parked_total, victims_parked))

        figures = await flood(
            f"http://127.0.0.1:{port}/mcp",
            victims=VICTIMS,
            crowd=crowd,
            per_conn=PER_CONN,
            total=TOTAL,
            mallory_sessions=mallory_sessions,
            deadline=60,
            during=during,
            modern_asks=modern_asks,
            legacy_sessions=legacy_sessions,
            slow_calls=slow_calls,
            max_in_flight=server.options.max_in_flight,
        )
        state = runtime.state
        # What stays parked is the modern nonces, each waiting for a retry or its timeout
        # (R-MRTR-12); every 2025 parked call ended with its session.
        nonces = sum(1 for p in state.parked.values() if p.stateless)
        assert (len(state.calls), state.parked_total) == (0, nonces)
        assert nonces == figures.parked["modern"] + figures.other["legacy nonces"], (
            figures.as_dict()
        )
        assert len(app.sessions) == 0
        assert runtime.steps_checked > 0
        assert runtime.largest["parked"] == TOTAL  # the cap was reached, never passed
    return phases, figures


@pytest.mark.anyio
async def test_R_PARK_3_a_flood_over_many_sessions_crowds_out_only_the_flooders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CHECK_ENV, "1")
    phases, figures = await run_flood(mallory_sessions=0)
    # The total was full after each flood phase, and the victims' calls stayed parked.
    assert phases == [
        ("victims", VICTIMS, VICTIMS),
        ("crowd", TOTAL, VICTIMS),
        ("single", TOTAL, VICTIMS),
    ]
    assert figures.victims_served == VICTIMS, figures.as_dict()
    denied = figures.denied
    assert denied["too many elicitations pending"] > 0
    assert denied["evicted to make room on this server"] > 0
    assert denied["too many elicitations pending on this server"] > 0
    assert set(denied) <= {
        "too many elicitations pending",
        "evicted to make room on this server",
        "too many elicitations pending on this server",
    }, denied


@pytest.mark.anyio
async def test_R_PARK_1_one_principal_with_many_sessions_does_not_evict_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-PARK-1, R-PARK-3: a principal spreading ten times the total cap over as many sessions
    as the total cap is one owner: it takes at most its cap, from the top holders (two crowd
    principals hold two each), and none of the victims' places, each of which holds one.
    Counted by connection, its fresh sessions (holding none) evicted every victim."""
    monkeypatch.setenv(CHECK_ENV, "1")
    phases, figures = await run_flood(mallory_sessions=TOTAL, crowd=2)
    assert phases == [
        ("victims", VICTIMS, VICTIMS),
        ("crowd", VICTIMS + 2 * PER_CONN, VICTIMS),
        ("single", TOTAL, VICTIMS),
        ("mallory", TOTAL, VICTIMS),
    ], phases
    assert figures.parked["mallory"] == PER_CONN, figures.as_dict()
    assert figures.victims_served == VICTIMS, figures.as_dict()


@pytest.mark.anyio
async def test_R_MRTR_12_a_modern_flood_from_one_principal_does_not_evict_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-MRTR-12, R-PARK-1: ten times the total cap of modern ASKs from one principal, on a full
    server, hold at most that principal's cap of nonces and evict none of the victims."""
    monkeypatch.setenv(CHECK_ENV, "1")
    phases, figures = await run_flood(mallory_sessions=0, modern_asks=10 * TOTAL, crowd=2)
    assert phases[-1] == ("modern", TOTAL, VICTIMS), phases
    assert figures.victims_served == VICTIMS, figures.as_dict()
    assert figures.parked["modern"] == PER_CONN, figures.as_dict()
    assert figures.denied["too many elicitations pending"] > 0, figures.as_dict()


@pytest.mark.anyio
async def test_R_PARK_1_one_principal_over_legacy_sessions_holds_its_cap_and_no_victim_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-PARK-1, R-PARK-3 over the 2024-11-05 pair: one principal opening as many /sse sessions
    as the total cap and posting, uninitialized, ten times the total cap of ASKs in both eras'
    shapes is one owner: it holds at most its cap, and every victim keeps its place and is
    served."""
    monkeypatch.setenv(CHECK_ENV, "1")
    phases, figures = await run_flood(mallory_sessions=0, crowd=2, legacy_sessions=TOTAL)
    assert phases[-1][0] == "legacy", phases
    assert all(victims == VICTIMS for _, _, victims in phases), phases
    assert figures.parked["legacy"] <= PER_CONN, figures.as_dict()
    assert figures.victims_served == VICTIMS, figures.as_dict()


@pytest.mark.anyio
async def test_R_ADM_5_one_principals_stateless_calls_leave_workers_for_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-ADM-5 for stateless 2026-07-28 requests: one principal sending more slow calls than
    the server has workers holds its share only, and each victim's stateless echo is served."""
    monkeypatch.setenv(CHECK_ENV, "1")
    phases, figures = await run_flood(mallory_sessions=0, crowd=2, slow_calls=40)
    assert phases[-1][0] == "stateless", phases
    assert figures.stateless_victims_served == VICTIMS, figures.as_dict()
    assert figures.denied["server_busy"] >= 40 - 16, figures.as_dict()
    assert figures.victims_served == VICTIMS, figures.as_dict()
