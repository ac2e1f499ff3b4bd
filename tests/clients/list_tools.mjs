#!/usr/bin/env node
// list_tools.mjs SERVER_CMD [ARGS...]
//
// Official MCP TypeScript SDK (@modelcontextprotocol/sdk 1.x, tested 1.32.2) client:
// spawn a stdio server, initialize (2025-11-25 handshake), call tools/list following
// nextCursor until absent. Prints ONE JSON line on stdout:
//   {"count": N, "pages": P, "names_unique": true|false}
// Exit 0 ok, 1 error (stderr). Server stderr is inherited.
// The SDK is loaded from the folder $MCP_CLIENTS_NODE (where scripts/test-tools.sh installs
// it: target/test-tools/node).
// Env: LIST_TOOLS_TIMEOUT (seconds, default 60), LIST_TOOLS_MAX_PAGES (default 10000).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const base = process.env.MCP_CLIENTS_NODE ?? join(here, '..', '..', 'target', 'test-tools', 'node');
const req = createRequire(join(base, 'package.json'));
const sdk = (p) => import(pathToFileURL(req.resolve(`@modelcontextprotocol/sdk/${p}`)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const argv = process.argv.slice(2);
if (argv.length < 1) {
  console.error('usage: list_tools.mjs SERVER_CMD [ARGS...]');
  process.exit(2);
}
const timeoutMs = Number(process.env.LIST_TOOLS_TIMEOUT ?? 60) * 1000;
const maxPages = Number(process.env.LIST_TOOLS_MAX_PAGES ?? 10000);

async function main() {
  // Default env passed to the child is only HOME/LOGNAME/PATH/SHELL/TERM/USER: forward all.
  const transport = new StdioClientTransport({
    command: argv[0],
    args: argv.slice(1),
    env: { ...process.env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'list-tools-ts', version: '0.1.0' });
  await client.connect(transport, { timeout: timeoutMs });
  const names = [];
  let pages = 0;
  let cursor;
  try {
    do {
      const res = await client.listTools(cursor !== undefined ? { cursor } : undefined, { timeout: timeoutMs });
      pages += 1;
      for (const t of res.tools) names.push(t.name);
      cursor = res.nextCursor;
      if (cursor !== undefined && pages >= maxPages) throw new Error(`more than ${maxPages} pages`);
    } while (cursor !== undefined);
  } finally {
    await client.close();
  }
  return { count: names.length, pages, names_unique: new Set(names).size === names.length };
}

const timer = setTimeout(() => {
  console.error(`list_tools.mjs: error: timed out after ${timeoutMs} ms`);
  process.exit(1);
}, timeoutMs);
try {
  const out = await main();
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
} catch (e) {
  console.error(`list_tools.mjs: error: ${e?.stack ?? e}`);
  process.exit(1);
}
