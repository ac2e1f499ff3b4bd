#!/usr/bin/env python3
"""list_tools.py SERVER_CMD [ARGS...]

Official MCP Python SDK (`mcp`, tested 2.3.0 and 1.x) client: spawn a stdio server,
`initialize` (legacy handshake, protocol 2025-11-25), then call tools/list following
nextCursor until it is absent. Prints ONE JSON line on stdout:
  {"count": N, "pages": P, "names_unique": true|false}
Exit 0 on success, 1 on error (message on stderr). Server stderr passes through to ours.
Env: LIST_TOOLS_TIMEOUT (seconds, default 60), LIST_TOOLS_MAX_PAGES (default 10000).
"""
import json
import os
import sys

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def run(cmd: list[str]) -> dict:
    # The SDK passes only HOME/LOGNAME/PATH/SHELL/TERM/USER to the child by default;
    # forward our whole environment so the server sees RUST_LOG etc.
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    max_pages = int(os.environ.get("LIST_TOOLS_MAX_PAGES", "10000"))
    names: list[str] = []
    pages = 0
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            cursor = None
            while True:
                req = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
                res = await session.list_tools(params=req)
                pages += 1
                names.extend(t.name for t in res.tools)
                # 2.x: next_cursor; 1.x: nextCursor
                cursor = getattr(res, "next_cursor", None) or getattr(res, "nextCursor", None)
                if cursor is None:
                    break
                if pages >= max_pages:
                    raise RuntimeError(f"more than {max_pages} pages; server pagination not terminating?")
    return {"count": len(names), "pages": pages, "names_unique": len(names) == len(set(names))}


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    timeout = float(os.environ.get("LIST_TOOLS_TIMEOUT", "60"))

    async def go():
        with anyio.fail_after(timeout):
            return await run(sys.argv[1:])

    try:
        out = anyio.run(go)
    except BaseException as e:  # noqa: BLE001 (ExceptionGroup from anyio task groups)
        print(f"list_tools.py: error: {e!r}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
