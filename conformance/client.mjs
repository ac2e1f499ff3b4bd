// toolhost as the client of the official MCP conformance suite's client scenarios: the suite
// starts a server (and for auth/* an authorization server) and runs this with the server's
// URL last; this writes a host whose one ensemble imports that URL (`[ensemble.mcp] url`,
// with `oauth` from the scenario's credentials) and runs `toolhost` on it: `list` connects
// and lists the tools, `call` calls one. See conformance/README.md.
//
//   node conformance/client.mjs URL
//
// Environment: MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT (set by the suite),
// TOOLHOST (the binary; default `toolhost` on PATH).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO || '';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || '{}');

// What each scenario has the client do: the toolhost command after `--config FILE`.
const commands = {
  initialize: ['check'],
  tools_call: ['call', 'add_numbers', '{"a": 2, "b": 3}'],
  'sse-retry': ['call', 'test_reconnection', '{}'],
  'auth/client-credentials-basic': ['call', 'test-tool', '{}'],
  'auth/client-credentials-jwt': ['call', 'test-tool', '{}'],
};
const command = commands[scenario];
if (!command) {
  console.error(`toolhost runs no client scenario ${JSON.stringify(scenario)} (conformance/README.md says which it runs)`);
  process.exit(2);
}

// TOML basic strings take JSON's escapes.
const quoted = (text) => JSON.stringify(String(text));
const env = { ...process.env };
let oauth = '';
if (context.private_key_pem) {
  env.CONFORMANCE_PRIVATE_KEY = context.private_key_pem;
  oauth = `oauth = { client-id = ${quoted(context.client_id)}, private-key-env = "CONFORMANCE_PRIVATE_KEY", algorithm = ${quoted(context.signing_algorithm || 'ES256')} }\n`;
} else if (context.client_secret) {
  env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
  oauth = `oauth = { client-id = ${quoted(context.client_id)}, client-secret-env = "CONFORMANCE_CLIENT_SECRET" }\n`;
}

const dir = mkdtempSync(join(tmpdir(), 'toolhost-conformance-client-'));
try {
  mkdirSync(join(dir, 'ensembles'));
  writeFileSync(join(dir, 'toolhost.toml'),
    'schema-version = 1\n\n[host]\nensembles = "ensembles"\ncache-dir = "cache"\n');
  writeFileSync(join(dir, 'ensembles', 'remote.toml'),
    `schema-version = 1\n\n[ensemble]\nname = "remote"\n\n[ensemble.mcp]\nurl = ${quoted(url)}\n${oauth}`);
  const run = spawnSync(process.env.TOOLHOST || 'toolhost',
    ['--config', join(dir, 'toolhost.toml'), ...command], { env, stdio: 'inherit' });
  if (run.error) throw run.error;
  process.exitCode = run.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
