// toolhost as the client of the official MCP conformance suite's client scenarios: the suite
// starts a server (and for auth/* an authorization server) and runs this with the server's
// URL last; this writes a host whose one ensemble imports that URL (`[ensemble.mcp] url`,
// with `oauth` from the scenario) and runs `toolhost` on it: `check` connects and lists the
// tools, `call` calls one, `login` signs in first (its browser step played here), and `serve`
// answers a caller played here that accepts the server's form. See conformance/README.md.
//
//   node conformance/client.mjs URL
//
// Environment: MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT (set by the suite),
// TOOLHOST (the binary; default `toolhost` on PATH).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
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
// Scenarios whose server asks the caller: toolhost serves the import over stdio (granted
// `elicitation`) to a caller played here, which calls the tool and accepts the form as shown.
const asking = {
  'elicitation-sep1034-client-defaults': 'test_client_elicitation_defaults',
};
// The authorization code scenarios: a person signs in (`toolhost login`, whose browser step
// this takes: it opens the printed URL, which the suite's authorization server redirects at
// once to toolhost's loopback listener), then the import is called.
const signIn = scenario.startsWith('auth/') && !scenario.startsWith('auth/client-credentials')
  && scenario !== 'auth/cross-app-access-complete-flow';
const command = commands[scenario] ?? (signIn ? ['call', 'test-tool', '{}'] : undefined);
if (!command && !asking[scenario]) {
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
} else if (signIn) {
  // A client registered beforehand where the scenario has one; else the client ID metadata
  // document the suite's authorization servers know (used where one takes such documents,
  // dynamic registration elsewhere).
  const id = context.client_id
    ? `client-id = ${quoted(context.client_id)}, `
    : 'client-metadata-url = "https://conformance-test.local/client-metadata.json", ';
  let secret = '';
  if (context.client_secret) {
    env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
    secret = 'client-secret-env = "CONFORMANCE_CLIENT_SECRET", ';
  }
  oauth = `oauth = { ${id}${secret}sign-in = true }\n`;
} else if (context.client_secret) {
  env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
  oauth = `oauth = { client-id = ${quoted(context.client_id)}, client-secret-env = "CONFORMANCE_CLIENT_SECRET" }\n`;
}

const dir = mkdtempSync(join(tmpdir(), 'toolhost-conformance-client-'));
env.XDG_STATE_HOME = join(dir, 'state');
const toolhost = process.env.TOOLHOST || 'toolhost';

// `toolhost login remote`, with the browser's part played here: the printed URL is fetched
// and its redirects followed to the loopback listener. Resolves to login's exit status.
function login(config) {
  return new Promise((resolve, reject) => {
    const child = spawn(toolhost, ['--config', config, 'login', 'remote'],
      { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let printed = '';
    let opened = false;
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      printed += chunk;
      const url = printed.match(/^\s+(https?:\/\/\S+)$/m);
      if (url && !opened) {
        opened = true;
        fetch(url[1]).then((answer) => answer.text()).then(
          (text) => console.log(`browser: ${text}`),
          (error) => console.log(`browser: ${error}`));
      }
    });
    child.on('error', reject);
    child.on('exit', (code) => resolve(code ?? 1));
  });
}

// A caller of `toolhost serve` over stdio that can be asked (`elicitation`): calls `tool`,
// accepts each form as shown (an empty answer: the person changed nothing), and resolves to
// 0 when the call answered without error.
function callAsking(config, tool) {
  return new Promise((resolve, reject) => {
    const child = spawn(toolhost, ['--config', config, 'serve'],
      { env, stdio: ['pipe', 'pipe', 'inherit'] });
    const send = (message) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
    const timer = setTimeout(() => { child.kill(); reject(new Error('no answer in 30 s')); }, 30000);
    createInterface({ input: child.stdout }).on('line', (line) => {
      const message = JSON.parse(line);
      if (message.method === 'elicitation/create') {
        console.log(`asked: ${JSON.stringify(message.params)}`);
        send({ id: message.id, result: { action: 'accept', content: {} } });
      } else if (message.id === 1) {
        send({ method: 'notifications/initialized' });
        send({ id: 3, method: 'tools/list' });
      } else if (message.id === 3) {
        // The import's tools join once its server is reached: asked again until they have.
        if (message.result?.tools?.some((t) => t.name === tool)) {
          send({ id: 2, method: 'tools/call', params: { name: tool, arguments: {} } });
        } else {
          setTimeout(() => send({ id: 3, method: 'tools/list' }), 100);
        }
      } else if (message.id === 2) {
        console.log(`answered: ${JSON.stringify(message.result ?? message.error)}`);
        clearTimeout(timer);
        child.stdin.end();
        resolve(message.result && !message.result.isError ? 0 : 1);
      }
    });
    child.on('error', reject);
    send({
      id: 1, method: 'initialize',
      params: {
        protocolVersion: '2025-11-25',
        capabilities: { elicitation: { form: {} } },
        clientInfo: { name: 'conformance caller', version: '1' },
      },
    });
  });
}

try {
  mkdirSync(join(dir, 'ensembles'));
  writeFileSync(join(dir, 'toolhost.toml'),
    'schema-version = 1\n\n[host]\nensembles = "ensembles"\ncache-dir = "cache"\n');
  writeFileSync(join(dir, 'ensembles', 'remote.toml'),
    `schema-version = 1\n\n[ensemble]\nname = "remote"\n\n[ensemble.mcp]\nurl = ${quoted(url)}\n${oauth}` +
    (asking[scenario] ? 'elicitation = true\n' : ''));
  const config = join(dir, 'toolhost.toml');
  const run = () => {
    const done = spawnSync(toolhost, ['--config', config, ...command], { env, encoding: 'utf8' });
    if (done.error) throw done.error;
    process.stdout.write(done.stdout);
    process.stderr.write(done.stderr);
    return done;
  };
  if (asking[scenario]) {
    process.exitCode = await callAsking(config, asking[scenario]);
  } else if (!signIn) {
    process.exitCode = run().status ?? 1;
  } else {
    // As an operator would: sign in, call, and sign in again when toolhost says the server
    // asks for more scope than the sign-in got (it says so once per scope it was not granted).
    for (let signIns = 1; ; signIns++) {
      const status = await login(config);
      if (status !== 0) throw new Error(`toolhost login ended with ${status}`);
      const call = run();
      process.exitCode = call.status ?? 1;
      if (call.status === 0 || !call.stderr.includes('signing in again asks for it') || signIns === 3) break;
    }
  }
} catch (error) {
  console.error(`${error.message}`);
  process.exitCode ||= 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
