"""The floor: the least a Python stdio MCP server can do per message on this machine.

    python bench/peers/floor.py

Reads a line, decodes it with rapidjson, writes a reply built by string formatting; no
validation, no policy, no state beyond the one pending approval. It answers ``initialize``,
``tools/list`` (``echo``, ``guarded_echo``), ``ping``, ``tools/call echo`` and ``tools/call
guarded_echo`` (an ``elicitation/create`` first, the echo when the answer comes back). What
askgate costs above this is what its decisions, validation and shell cost; no Python server
can go below it.
"""

from __future__ import annotations

import sys

import rapidjson

INIT = (
    '{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},'
    '"serverInfo":{"name":"floor","version":"0.0.0"}}'
)
TOOLS = (
    '{"tools":[{"name":"echo","inputSchema":{"type":"object"}},'
    '{"name":"guarded_echo","inputSchema":{"type":"object"}}]}'
)
ASK = (
    '{"jsonrpc":"2.0","id":"ask-%d","method":"elicitation/create","params":'
    '{"mode":"form","message":"Allow?","requestedSchema":{"type":"object",'
    '"properties":{"approve":{"type":"boolean"}},"required":["approve"]}}}\n'
)


def text_result(rid: object, text: object) -> str:
    content = rapidjson.dumps([{"type": "text", "text": text}])
    return f'{{"jsonrpc":"2.0","id":{rapidjson.dumps(rid)},"result":{{"content":{content}}}}}\n'


def main() -> None:
    out = sys.stdout
    pending: dict[str, tuple[object, object]] = {}
    asked = 0
    for line in sys.stdin.buffer:
        msg = rapidjson.loads(line)
        method = msg.get("method")
        rid = msg.get("id")
        if method is None:
            call = pending.pop(rid, None) if isinstance(rid, str) else None
            if call is not None:
                out.write(text_result(*call))
        elif method == "tools/call":
            params = msg["params"]
            text = params["arguments"]["text"]
            if params["name"] == "guarded_echo":
                asked += 1
                pending[f"ask-{asked}"] = (rid, text)
                out.write(ASK % asked)
            else:
                out.write(text_result(rid, text))
        elif rid is not None:
            body = INIT if method == "initialize" else TOOLS if method == "tools/list" else "{}"
            out.write(f'{{"jsonrpc":"2.0","id":{rapidjson.dumps(rid)},"result":{body}}}\n')
        out.flush()


if __name__ == "__main__":
    main()
