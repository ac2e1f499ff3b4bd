#!/usr/bin/env python3
"""oauth_client.py URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE TOOL ARGUMENTS_JSON

The official MCP Python SDK (`mcp` 2.3) as a machine client of a server that needs OAuth:
its ClientCredentialsOAuthProvider meets the server's 401, reads the protected resource
metadata it points at, then the authorization server's metadata, gets an access token by
client credentials for the server's resource (from ISSUER alone: the provider names the
authorization server its credentials belong to), and the client lists the tools and calls
TOOL.
Prints ONE JSON line: {"tools": [...], "text": "...", "is_error": bool}
Exit 0 on success, 1 on error (message on stderr).
"""
import json
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client


class Memory:
    """Tokens and client information, kept for this run only."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def run(url, issuer, client_id, secret, scope, tool, arguments) -> dict:
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=Memory(),
        client_id=client_id,
        client_secret=secret,
        scope=scope,
        issuer=issuer,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            listed = await client.list_tools()
            called = await client.call_tool(tool, arguments)
            return {
                "tools": sorted(t.name for t in listed.tools),
                "text": "".join(getattr(block, "text", "") for block in called.content),
                "is_error": bool(called.is_error),
            }


def main() -> int:
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    url, issuer, client_id, secret, scope, tool, arguments = sys.argv[1:]

    async def go():
        with anyio.fail_after(60):
            return await run(url, issuer, client_id, secret, scope, tool, json.loads(arguments))

    try:
        out = anyio.run(go)
    except BaseException as e:  # noqa: BLE001 (ExceptionGroup from anyio task groups)
        print(f"oauth_client.py: error: {e!r}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
