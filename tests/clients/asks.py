#!/usr/bin/env python3
"""asks.py MODE (URL | SERVER_CMD [ARGS...])

Official MCP Python SDK (`mcp` 2.3) client, at revision MODE (`legacy` for the `initialize`
handshake, `2026-07-28` for the stateless revision, whose server asks in `input_required`
rounds), that answers a tool's questions: its sampling callback answers "Paris (python-model)"
and its elicitation callback accepts {"name": "python"}. Calls `ask_model` with
{"prompt": "capital of France?"} and `ask_person` with {}. Prints ONE JSON line:
  {"protocol_version": "...", "model": "...", "person": "..."}
Exit 0 on success, 1 on error (message on stderr).
"""
import json
import os
import sys

import anyio
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters


async def sampling(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="Paris"),
        model="python-model",
    )


async def elicitation(context, params):
    return types.ElicitResult(action="accept", content={"name": "python"})


def text(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def run(mode: str, target: list[str]) -> dict:
    if target[0].startswith("http://"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
    async with Client(
        server, mode=mode, sampling_callback=sampling, elicitation_callback=elicitation
    ) as client:
        model = await client.call_tool("ask_model", {"prompt": "capital of France?"})
        person = await client.call_tool("ask_person", {})
        return {
            "protocol_version": client.protocol_version,
            "model": text(model),
            "person": text(person),
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
        print(f"asks.py: error: {e!r}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
