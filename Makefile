# The commands a newcomer types. `make test` installs first when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test check lint typecheck spec fuzz soak flood bench bench-core bench-scale bench-stdio bench-http bench-peers bench-compare crosshair verify mutate mutate-model clean run run-stdio demo conformance

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over the checkout laid out as the wheel installs it (tools/typecheck.py says why).
typecheck: $(STAMP)
	$(BIN)/python tools/typecheck.py -p askgate
	$(BIN)/python tools/typecheck.py tests bench examples tools

check: lint typecheck test

# Renders the tables in spec/ from the code; a test fails when the committed text differs.
spec: $(STAMP)
	$(BIN)/python tools/specdoc.py .

# Exhaustive bounded exploration of the reducer, deeper than make test (takes about half an
# hour): the cap configurations 8 events deep, the edge cases (reads, ids, stale events, eviction
# of capabilities, no authorizer) 7 and 8 deep, the 2026-07-28 flow and the stop 7 deep, parking
# owners shared by a principal's sessions 6 deep. Each run
# writes its figures into bench/results/verify.json and rewrites the table of docs/checking.md
# from that file.
VERIFY_RECORD := --record bench/results/verify.json --readme docs/checking.md
verify: $(STAMP)
	$(BIN)/python -m askgate.models.explore --depth 8 --config tight --config shared $(VERIFY_RECORD)
	$(BIN)/python -m askgate.models.explore --depth 7 --config edges $(VERIFY_RECORD)
	$(BIN)/python -m askgate.models.explore --depth 8 --config open $(VERIFY_RECORD)
	$(BIN)/python -m askgate.models.explore --depth 7 --config modern $(VERIFY_RECORD)
	$(BIN)/python -m askgate.models.explore --depth 6 --config principals $(VERIFY_RECORD)
	$(BIN)/python -m askgate.models.explore --depth 6 --config tasks $(VERIFY_RECORD)

# CrossHair checks every pre:/post: contract in core/ (the reducer's decision functions, option
# validation, version negotiation, the sealed approval state's verdict), 20 s per postcondition
# (a few minutes); tests/crosshair_plugin.py makes its `is` exact and tells it how to build Options.
crosshair: $(STAMP)
	$(BIN)/crosshair check --analysis_kind=PEP316 --per_condition_timeout=20 \
		--extra_plugin=tests/crosshair_plugin.py \
		askgate.core.decide askgate.core.options askgate.core.protocol askgate.core.sealing

# Mutation testing: hand-written bugs in core/, each run against the tests in a temporary copy
# (the working tree is never edited); writes bench/results/mutation.json (takes minutes).
mutate: $(STAMP)
	$(BIN)/python bench/mutate.py

# What the model-based suite alone (the explorer and the machine against the reference model)
# kills; mutants of what the model leaves out by design are skipped and listed. Writes
# bench/results/mutation_model.json.
mutate-model: $(STAMP)
	$(BIN)/python bench/mutate.py --model-suite

# The long fuzz runs (bench/fuzz.py), not in make test or CI: the live fuzzer of make test
# (tests/fuzz_live.py, Hypothesis inputs against servers over stdio and HTTP) for half of
# DURATION seconds, then atheris (coverage-guided, libFuzzer) on the codec and the message layer
# (tests/fuzz_codec.py) for the other half; its corpus is kept in .fuzz/, crashes go to
# .fuzz/crashes/. Installs the fuzz extra (atheris) first.
fuzz: $(STAMP)
	$(BIN)/python -c "import atheris" 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[test,fuzz]'
	$(BIN)/python bench/fuzz.py --duration $(DURATION)

# The flood, measured (bench/flood.py): victims' sessions parking one call each, a crowd of
# sessions asking past their caps, one session asking ten times the total cap, then one principal
# spreading ten times the total cap over many sessions, then one principal sending ten times the
# total cap of 2026-07-28 ASKs, then two principals over legacy /sse sessions and over stateless
# requests (the victims must be served in every round), three rounds on one server in debug mode; RSS and descriptors
# before, at the peak and after each round (a few minutes).
flood: $(STAMP)
	$(BIN)/python bench/flood.py --out bench/results/flood.json
	$(BIN)/python bench/flood.py --mallory --out bench/results/flood_mallory.json
	$(BIN)/python bench/flood.py --modern --out bench/results/flood_modern.json
	$(BIN)/python bench/flood.py --legacy --stateless --out bench/results/flood_two_principals.json

# A soak: random clients (approve, decline, time out, cancel, error, drop a stream and resume
# it, end a session and open another) against `askgate serve --demo` over stdio and HTTP at
# once, each server checking the reducer's invariants after every step
# (ASKGATE_CHECK_INVARIANTS=1); prints the calls, denials by detail, the largest state, RSS and
# descriptors per minute. DURATION is in seconds per transport (both run at the same time).
DURATION ?= 60
soak: $(STAMP)
	$(BIN)/python bench/soak.py --duration $(DURATION) --transport both --out bench/results/soak.json

# The benchmarks: the reducer alone, then MCP over stdio and over Streamable HTTP beside the
# official SDK.
# Everything: the reducer, its scaling and memory, then askgate beside every peer (which installs
# the peers into .bench-peers/ and writes bench/report.md from all of it). bench-stdio and
# bench-http are the quick pair: askgate beside the official SDK's low-level server only.
bench: bench-core bench-scale bench-peers

# The reducer alone: events per second on a mixed workload.
bench-core: $(STAMP)
	$(BIN)/python bench/core_bench.py

# The reducer as the state grows: events/s and state bytes per idle connection (1 to 10 000)
# and per parked call (0 to the cap); then the HTTP app in process beside 0 to 10 000 idle
# sessions: CPU per echo call and bytes per session; and beside 10 000 sessions with the total
# cap of calls parked on them.
bench-scale: $(STAMP)
	$(BIN)/python bench/scale_bench.py
	$(BIN)/python bench/http_app_bench.py --sessions 0 100 1000 10000 --full 10000 \
		--out bench/results/sessions.json

# MCP over stdio: askgate beside the official SDK's low-level server, same work, same run.
# The benchmark keeps 32 calls in flight on one connection; askgate's default share per
# connection is 16 (half of max_in_flight), so the run raises both bounds to fit.
ASKGATE_32 := --max-in-flight 64 --max-in-flight-per-connection 32
# A server that fails is reported and skipped; the target fails only when all of them do.
bench-stdio: $(STAMP)
	$(BIN)/python bench/stdio_bench.py \
		--server "$(BIN)/python bench/sdk_echo_server.py" --label sdk \
		--server "$(BIN)/python -m askgate serve --stdio --demo $(ASKGATE_32)" --label askgate

# MCP over Streamable HTTP: askgate beside the official SDK's low-level server, each run by
# uvicorn on a free port of 127.0.0.1 ({port}); one session, 32 calls in flight over 32
# keep-alive connections, so askgate gets the same raised bounds as for stdio; then the
# 2026-07-28 approval round trip, stateless, beside the 2025 one.
bench-http: $(STAMP)
	$(BIN)/python bench/http_bench.py \
		--server "$(BIN)/python bench/sdk_http_server.py --port {port}" --label sdk \
		--server "$(BIN)/python -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate

# askgate beside every peer a user would pick, in one run with interleaved rounds: the official
# SDK's MCPServer and low-level Server, fastmcp, the TypeScript SDK and a floor process (the
# least a Python stdio server can do), each serving echo and guarded_echo (asks), over stdio and
# Streamable HTTP. The peers install into .bench-peers/ (ignored): fastmcp into a venv of its own
# (it brings its own mcp release), the TypeScript SDK with npm. Figures: bench/results/peers_*.json.
# PEERS_STDIO_ARGS and PEERS_HTTP_ARGS pass options to the two benchmarks (e.g. fewer calls).
# Over HTTP, askgate runs on uvloop (the test extra installs it; docs/performance.md), and also on asyncio
# (ASKGATE_LOOP=asyncio) and under hypercorn on trio and on asyncio (bench/askgate_hypercorn.py,
# the bench extra); uvicorn picks uvloop for the official SDK's servers in this venv too. Every
# server takes PEERS_CLIENTS concurrent clients, each with its own connection and session
# (http_bench.py phase 8). Then askgate alone is run once more, profiled
# (stdio_bench.py and http_bench.py --profile, bench/startup_profile.py for start-up and memory,
# core_bench.py --profile for the reducer), into $(PROFILES)/: the report explains each missed
# target from those profiles, and the scaling targets from make bench-scale's and bench-core's
# figures (bench/results/scale.json, sessions.json, core.json) and allocation sites.
PEERS := .bench-peers
PEERS_STDIO_ARGS ?=
PEERS_HTTP_ARGS ?=
# Phase 8's bounds: 4000 calls or 8 s per number of clients, whichever ends first (the slow
# peers take the 8 s: at 100 to 300 calls/s that is 800 to 2400 calls, enough for a p99).
PEERS_CLIENTS ?= 32 256
PEERS_CLIENTS_ARGS ?= --client-calls 4000 --client-seconds 8
PROFILES := bench/results/profile
# The profiled run takes more calls than the measured ones: the sampler takes at most one sample
# per tick of the kernel's timer (10 ms of CPU time for the stdio server here), and a profile
# needs a few hundred samples.
PROFILE_STDIO_ARGS ?= --calls 50000 --pings 100 --elicitations 5000
PROFILE_HTTP_ARGS ?= --calls 8000 --sequential 100 --elicitations 300 --elicit-calls 2000 \
	--modern-trips 0 --modern-calls 0
FASTMCP_VERSION := 4.2.3
TS_SDK_VERSION := 1.32.2
$(PEERS)/fastmcp/bin/python:
	$(PYTHON) -m venv $(PEERS)/fastmcp
	$(PEERS)/fastmcp/bin/python -m pip install --quiet fastmcp==$(FASTMCP_VERSION)
$(PEERS)/node/node_modules/@modelcontextprotocol/sdk/package.json:
	mkdir -p $(PEERS)/node
	cd $(PEERS)/node && npm install --silent --no-audit --no-fund \
		@modelcontextprotocol/sdk@$(TS_SDK_VERSION) zod
# The report's plots: matplotlib in a venv of its own, so the project's venv stays as CI has it.
$(PEERS)/plot/bin/python:
	$(PYTHON) -m venv $(PEERS)/plot
	$(PEERS)/plot/bin/python -m pip install --quiet matplotlib
# hypercorn (and trio) in the project's venv: the bench extra, installed only for this target.
$(VENV)/.bench-extra: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@
PEER_DEPS := $(PEERS)/fastmcp/bin/python $(PEERS)/plot/bin/python \
	$(PEERS)/node/node_modules/@modelcontextprotocol/sdk/package.json $(VENV)/.bench-extra

bench-peers: $(STAMP) $(PEER_DEPS)
	NODE_PATH=$(CURDIR)/$(PEERS)/node/node_modules $(BIN)/python bench/stdio_bench.py \
		--out bench/results/peers_stdio.json $(PEERS_STDIO_ARGS) \
		--server "$(BIN)/python -m askgate serve --stdio --demo $(ASKGATE_32)" --label askgate \
		--server "$(BIN)/python bench/sdk_echo_server.py" --label sdk-lowlevel \
		--server "$(BIN)/python bench/peers/mcpserver_server.py" --label mcpserver \
		--server "$(PEERS)/fastmcp/bin/python bench/peers/fastmcp_server.py" --label fastmcp \
		--server "node bench/peers/ts_server.mjs" --label ts-sdk \
		--server "$(BIN)/python bench/peers/floor.py" --label floor
	NODE_PATH=$(CURDIR)/$(PEERS)/node/node_modules $(BIN)/python bench/http_bench.py \
		--out bench/results/peers_http.json $(PEERS_HTTP_ARGS) \
		--server "$(BIN)/python -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate \
		--server "$(BIN)/python bench/sdk_http_server.py --port {port}" --label sdk-lowlevel \
		--server "$(BIN)/python bench/peers/mcpserver_server.py --port {port}" --label mcpserver \
		--server "$(PEERS)/fastmcp/bin/python bench/peers/fastmcp_server.py --port {port}" \
		--label fastmcp \
		--server "node bench/peers/ts_server.mjs --port {port}" --label ts-sdk \
		--server "env ASKGATE_LOOP=asyncio $(BIN)/python -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate-asyncio \
		--server "$(BIN)/python bench/askgate_hypercorn.py --port {port} --backend trio $(ASKGATE_32)" \
		--label askgate-hypercorn-trio \
		--server "$(BIN)/python bench/askgate_hypercorn.py --port {port} --backend asyncio $(ASKGATE_32)" \
		--label askgate-hypercorn-asyncio \
		--clients $(PEERS_CLIENTS) $(PEERS_CLIENTS_ARGS)
	rm -rf $(PROFILES) && mkdir -p $(PROFILES)/stdio $(PROFILES)/http
	$(BIN)/python bench/stdio_bench.py --rounds 1 --profile $(PROFILES)/stdio \
		--out $(PROFILES)/stdio.json $(PROFILE_STDIO_ARGS) \
		--server "$(BIN)/python -m askgate serve --stdio --demo $(ASKGATE_32)" --label askgate \
		> $(PROFILES)/stdio.txt
	$(BIN)/python bench/http_bench.py --rounds 1 --profile $(PROFILES)/http \
		--out $(PROFILES)/http.json $(PROFILE_HTTP_ARGS) \
		--server "$(BIN)/python -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate \
		--server "$(BIN)/python bench/askgate_hypercorn.py --port {port} --backend trio $(ASKGATE_32)" \
		--label askgate-hypercorn-trio \
		> $(PROFILES)/http.txt
	$(BIN)/python bench/startup_profile.py --out $(PROFILES)/startup.json
	$(BIN)/python bench/core_bench.py --events 20000 --repeat 1 --out $(PROFILES)/core_run.json \
		--profile $(PROFILES)/core.json
	$(BIN)/python bench/scale_bench.py --events 10000 --repeat 1 --out $(PROFILES)/scale_run.json \
		--profile $(PROFILES)/scale.json > /dev/null
	$(PEERS)/plot/bin/python bench/report.py --profiles $(PROFILES)

# This tree beside an earlier commit (BASE, default HEAD~1), in the same runs: BASE is unpacked
# into .bench-base/ with a venv of its own; the reducer benchmark runs for each in turn, then the
# stdio and HTTP benchmarks take askgate at BASE and at this tree as two servers, interleaved
# 7 rounds each, interleaved. Figures go to bench/results/compare/ (a few minutes). BASE's
# servers run with -P: `python -m` would otherwise put this tree (the working directory) first
# on sys.path, ahead of BASE's own install, and run this tree's code under BASE's label.
BASE ?= HEAD~1
COMPARE := bench/results/compare
bench-compare: $(STAMP)
	rm -rf .bench-base && mkdir -p .bench-base $(COMPARE)
	git archive $(BASE) | tar -x -C .bench-base
	$(PYTHON) -m venv .bench-base/.venv
	.bench-base/.venv/bin/python -m pip install --quiet -e .bench-base
	git rev-parse $(BASE) > $(COMPARE)/base.txt
	cd .bench-base && .venv/bin/python bench/core_bench.py --out ../$(COMPARE)/core_base.json
	$(BIN)/python bench/core_bench.py --out $(COMPARE)/core.json
	@echo "base:" && .bench-base/.venv/bin/python bench/http_app_bench.py
	@echo "this tree:" && $(BIN)/python bench/http_app_bench.py
	$(BIN)/python bench/stdio_bench.py --rounds 7 --out $(COMPARE)/stdio.json \
		--server ".bench-base/.venv/bin/python -P -m askgate serve --stdio --demo $(ASKGATE_32)" \
		--label askgate-base \
		--server "$(BIN)/python -m askgate serve --stdio --demo $(ASKGATE_32)" --label askgate
	$(BIN)/python bench/http_bench.py --rounds 7 --out $(COMPARE)/http.json \
		--server ".bench-base/.venv/bin/python -P -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate-base \
		--server "$(BIN)/python -m askgate serve --http 127.0.0.1:{port} --demo $(ASKGATE_32)" \
		--label askgate

# The demo tools over Streamable HTTP on 127.0.0.1:8765 (the banner gives the client config).
run: $(STAMP)
	@$(BIN)/askgate serve --demo --http 127.0.0.1:8765 --banner --log-level info

# The demo tools over stdio: type JSON-RPC lines, or point an MCP client at the command.
run-stdio: $(STAMP)
	@echo "askgate demo on stdio: an MCP client runs '$(CURDIR)/$(BIN)/askgate serve --demo' (see README, Connect a client); Ctrl-D ends" >&2
	@$(BIN)/askgate serve --demo

# The official mcp SDK client drives the demo: echo, guarded_echo approved then declined, forbidden.
demo: $(STAMP)
	$(BIN)/python examples/demo_walkthrough.py

# The official MCP conformance suite (0.1.16 active; 0.2.0-alpha.12 --requirements 2025-11-25 and
# --requirements 2026-07-28)
# against examples/conformance_server.py over HTTP on 127.0.0.1. The first run downloads Node 22
# and the suites from npm into .conformance/ (ignored); not part of make test.
conformance: $(STAMP)
	$(BIN)/python examples/run_conformance.py

clean:
	rm -rf $(VENV) build *.egg-info
