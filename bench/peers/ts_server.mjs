// The TypeScript SDK's McpServer: echo and guarded_echo, over stdio or Streamable HTTP.
//
//     node bench/peers/ts_server.mjs               # stdio
//     node bench/peers/ts_server.mjs --port PORT   # Streamable HTTP on 127.0.0.1
//
// A peer for `make bench-peers`, with @modelcontextprotocol/sdk and zod from
// .bench-peers/node (NODE_PATH). The tools are written the way the SDK's README shows;
// guarded_echo asks with an elicitation/create related to the call and a boolean `approve`, and echoes only on accept with
// approve true. Over HTTP: stateful sessions (one transport per session), Node's http module,
// as in the SDK's example server. Nothing is tuned.
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { StreamableHTTPServerTransport } = require(
  "@modelcontextprotocol/sdk/server/streamableHttp.js",
);
const { ElicitResultSchema, isInitializeRequest } = require(
  "@modelcontextprotocol/sdk/types.js",
);
const { z } = require("zod");

function build() {
  const server = new McpServer({ name: "ts-echo", version: "0.0.0" });
  server.registerTool(
    "echo",
    { description: "Returns its text argument.", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  server.registerTool(
    "guarded_echo",
    {
      description: "Returns its text argument once the user approves (asks).",
      inputSchema: { text: z.string() },
    },
    async ({ text }, extra) => {
      // Sent through the call's own context, so that over HTTP it goes on the call's stream.
      const ask = {
        method: "elicitation/create",
        params: {
          message: `Allow guarded_echo to echo ${JSON.stringify(text)}?`,
          requestedSchema: {
            type: "object",
            properties: { approve: { type: "boolean", title: "Approve" } },
            required: ["approve"],
          },
        },
      };
      const answer = await extra.sendRequest(ask, ElicitResultSchema);
      if (answer.action !== "accept" || answer.content?.approve !== true) {
        return { content: [{ type: "text", text: "not approved" }], isError: true };
      }
      return { content: [{ type: "text", text }] };
    },
  );
  return server;
}

const portAt = process.argv.indexOf("--port");
if (portAt < 0) {
  await build().connect(new StdioServerTransport());
} else {
  const transports = new Map();
  const http = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport && req.method === "POST" && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await build().connect(transport);
    }
    if (!transport) {
      res.writeHead(400).end(JSON.stringify({ error: "no session" }));
      return;
    }
    await transport.handleRequest(req, res, body);
  });
  http.listen(Number(process.argv[portAt + 1]), "127.0.0.1");
}
