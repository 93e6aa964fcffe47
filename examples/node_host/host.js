#!/usr/bin/env node
// A minimal MCP host in Node whose decisions are askgate's: it runs `askgate core` as a sidecar,
// feeds it what happens (client messages, worker results, timers) as JSON lines and performs
// the effects it reads back (spec/embedding.md). One guarded tool, remove_file: the authorizer
// asks the client's user before every call; only an exact approval runs it.
//
//   node host.js              serve MCP on stdin/stdout (one client, newline-delimited JSON-RPC)
//   node host.js --selftest   drive a scripted client through approve, decline and timeout,
//                             printing one JSON line per case
//
// ASKGATE names the command that runs askgate (default "askgate"), e.g. "python -m askgate".
// No dependencies: Node 18 or later.
'use strict';

const { spawn } = require('node:child_process');
const readline = require('node:readline');
const { performance } = require('node:perf_hooks');

const now = () => Math.floor(performance.now()); // the monotonic clock, in ms (R-EMB-4)

/** The sidecar: one line out, one reply line back, in order (R-EMB-10). */
class Sidecar {
  constructor(command, init) {
    const [program, ...args] = command;
    this.proc = spawn(program, [...args, 'core', '--init', JSON.stringify(init)], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.waiting = [];
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.waiting.shift()(JSON.parse(line));
    });
    this.exited = new Promise((resolve) => this.proc.on('exit', resolve));
  }

  send(message) {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.proc.stdin.write(JSON.stringify(message) + '\n');
    });
  }

  close() {
    this.proc.stdin.end();
    return this.exited;
  }
}

/** The shell: performs effects and reports what happened; it decides nothing. */
class Host {
  constructor(sidecar, tools, authorize, send) {
    this.sidecar = sidecar;
    this.tools = tools; // name -> async (arguments) => tools/call result
    this.authorize = authorize; // (tool, arguments) => an encoded Allow, Ask or Deny
    this.send = send; // (conn, message) => void: writes to the client
    this.timers = new Map();
    this.killed = new Set();
    this.emitted = [];
  }

  async feed(kind, fields) {
    const reply = await this.sidecar.send({ v: 1, kind, fields });
    if (reply.kind !== 'effects') throw new Error(`askgate core: ${reply.error}`);
    for (const effect of reply.effects) this.perform(effect);
  }

  perform({ kind, fields: f }) {
    switch (kind) {
      case 'Reply':
        if (f.message !== null) this.send(f.conn, f.message);
        break;
      case 'Push':
        this.send(f.conn, f.message);
        break;
      case 'StartTimer': {
        const fire = () => {
          this.timers.delete(JSON.stringify(f.key));
          this.feed('TimerFired', { key: f.key, now: now() });
        };
        this.timers.set(JSON.stringify(f.key), setTimeout(fire, Math.max(0, f.deadline - now())));
        break;
      }
      case 'CancelTimer':
        clearTimeout(this.timers.get(JSON.stringify(f.key)));
        this.timers.delete(JSON.stringify(f.key));
        break;
      case 'StartWorker':
        this.run(f.ref, f.job);
        break;
      case 'KillWorker':
        this.killed.add(f.ref);
        break;
      case 'Emit':
        this.emitted.push(f.name);
        break;
      default: // Resolve: this host's tools ask their client nothing
        break;
    }
  }

  async run(ref, job) {
    let value = null;
    try {
      if (job.$ === 'Authorize') value = this.authorize(job.fields.tool, job.fields.arguments);
      else if (job.$ === 'RunTool') value = await this.tools[job.fields.tool](job.fields.arguments);
    } catch (failed) {
      if (!this.killed.has(ref)) await this.feed('WorkerFailed', { ref, now: now() });
      return;
    }
    if (!this.killed.has(ref)) await this.feed('WorkerFinished', { ref, value, now: now() });
  }

  received(conn, line) {
    return this.feed('MessageReceived', { conn, data: { $: 'bytes', utf8: line }, now: now() });
  }

  stop() {
    for (const timer of this.timers.values()) clearTimeout(timer);
    return this.sidecar.close();
  }
}

const REMOVE_FILE = {
  name: 'remove_file',
  description: 'Removes a file (pretends to).',
  inputSchema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  annotations: { destructiveHint: true },
};

function startHost(send, elicitationTimeoutMs) {
  const command = (process.env.ASKGATE || 'askgate').split(' ').filter(Boolean);
  const init = {
    v: 1,
    kind: 'init',
    options: { has_authorizer: true, elicitation_timeout_ms: elicitationTimeoutMs },
    tools: [],
  };
  const tools = { remove_file: async ({ path }) => ({ content: [{ type: 'text', text: `removed ${path}` }] }) };
  const authorize = (tool, args) => ({ $: 'Ask', fields: { prompt: `Run ${tool} on ${args.path}?` } });
  const host = new Host(new Sidecar(command, init), tools, authorize, send);
  const registered = host.feed('ToolRegistered', {
    name: REMOVE_FILE.name,
    sensitive: true,
    definition: REMOVE_FILE,
  });
  return { host, registered };
}

async function serveStdio() {
  const write = (conn, message) => process.stdout.write(JSON.stringify(message) + '\n');
  const { host, registered } = startHost(write, 60000);
  await registered;
  await host.feed('SubscriberAttached', { conn: 'stdio', now: now() });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) if (line.trim()) await host.received('stdio', line);
  await host.feed('ServerStopping', { now: now() });
  await host.stop();
}

async function selftest() {
  const conn = 'client-1';
  const answers = []; // what the scripted user says to each elicitation, in order
  const pending = new Map(); // request id -> resolve
  let host;
  const clientReceives = (to, message) => {
    if (message.method === 'elicitation/create') {
      console.log(JSON.stringify({ case: 'elicited', method: message.method, message: message.params.message }));
      const answer = answers.shift();
      if (answer !== undefined) {
        const response = { jsonrpc: '2.0', id: message.id, result: answer };
        setImmediate(() => host.received(conn, JSON.stringify(response)));
      }
    } else if (message.id !== undefined && pending.has(message.id)) {
      pending.get(message.id)(message);
      pending.delete(message.id);
    }
  };
  const request = (id, method, params) =>
    new Promise((resolve) => {
      pending.set(id, resolve);
      host.received(conn, JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  const started = startHost(clientReceives, 500);
  host = started.host;
  await started.registered;
  await host.feed('SubscriberAttached', { conn, now: now() });
  await request(1, 'initialize', {
    protocolVersion: '2025-06-18',
    capabilities: { elicitation: {} },
    clientInfo: { name: 'node-selftest', version: '1' },
  });
  await host.received(conn, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  const listed = await request(2, 'tools/list', {});
  console.log(JSON.stringify({ case: 'listed', tools: listed.result.tools.map((t) => t.name) }));
  const call = { name: 'remove_file', arguments: { path: '/tmp/x' } };
  answers.push({ action: 'accept', content: { approve: true } });
  console.log(JSON.stringify({ case: 'approved', reply: await request(3, 'tools/call', call) }));
  answers.push({ action: 'decline' });
  console.log(JSON.stringify({ case: 'declined', reply: await request(4, 'tools/call', call) }));
  // no answer: the reducer's elicitation timer (500 ms here) ends it
  console.log(JSON.stringify({ case: 'timed out', reply: await request(5, 'tools/call', call) }));
  await host.feed('ServerStopping', { now: now() });
  const status = await host.stop();
  console.log(JSON.stringify({ case: 'stopped', status, emitted: host.emitted }));
}

if (process.argv.includes('--selftest')) {
  selftest().catch((failed) => {
    console.error(failed);
    process.exit(1);
  });
} else {
  serveStdio().catch((failed) => {
    console.error(failed);
    process.exit(1);
  });
}
