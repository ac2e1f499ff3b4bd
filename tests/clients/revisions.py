#!/usr/bin/env python3
"""revisions.py MODE (URL | SERVER_CMD [ARGS...])

Official MCP Python SDK (`mcp` 2.3) client at a chosen revision: MODE is `legacy` (the
`initialize` handshake), `auto` (server/discover, falling back to the handshake) or a modern
version such as `2026-07-28` (no handshake). Connects to a streamable HTTP URL, or spawns a
stdio server; lists the tools, calls `echo` with {"from": "python"}; lists the prompts and
resources, gets prompt `greet` with {"name": "python"} and reads the first resource. Prints ONE
JSON line:
  {"protocol_version": "...", "tools": [...], "text": "...", "prompts": [...],
   "prompt": "...", "resources": [...], "resource": "..."}
Exit 0 on success, 1 on error (message on stderr).
"""
import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def run(mode: str, target: list[str]) -> dict:
    if target[0].startswith("http://"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
    async with Client(server, mode=mode) as client:
        listed = await client.list_tools()
        called = await client.call_tool("echo", {"from": "python"})
        text = "".join(getattr(block, "text", "") for block in called.content)
        prompts = await client.list_prompts()
        got = await client.get_prompt("greet", {"name": "python"})
        resources = await client.list_resources()
        read = await client.read_resource(resources.resources[0].uri)
        return {
            "protocol_version": client.protocol_version,
            "tools": sorted(tool.name for tool in listed.tools),
            "text": text,
            "prompts": [prompt.name for prompt in prompts.prompts],
            "prompt": "".join(getattr(m.content, "text", "") for m in got.messages),
            "resources": [str(resource.uri) for resource in resources.resources],
            "resource": "".join(getattr(c, "text", "") for c in read.contents),
        }


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2

    async def go():
        with anyio.fail_after(60):
            return await run(sys.argv[1], sys.argv[2:])

    try:
        out = anyio.run(go)
    except BaseException as e:  # noqa: BLE001 (ExceptionGroup from anyio task groups)
        print(f"revisions.py: error: {e!r}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
