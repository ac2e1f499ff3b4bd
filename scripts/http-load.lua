-- wrk's requests for scripts/http-load.py: `tools/call` of the echo tool over streamable
-- HTTP. Without MCP_SESSION, session-less at 2026-07-28 (the Mcp-Method and Mcp-Name headers,
-- and the `_meta` fields the revision asks for); with it, 2025-11-25 in that session.
-- MCP_TOKEN adds a bearer token; MCP_CONVERSATION names a dedup conversation in `_meta`;
-- MCP_SAME_ARGUMENTS makes every call's arguments the same (dedup hits).
local session = os.getenv("MCP_SESSION")
local token = os.getenv("MCP_TOKEN")
local conversation = os.getenv("MCP_CONVERSATION")
local same = os.getenv("MCP_SAME_ARGUMENTS")
-- New for each run of wrk, so that one run's arguments are not the warm-up's again.
local run = os.getenv("MCP_RUN") or ""

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
if session then
  wrk.headers["Mcp-Protocol-Version"] = "2025-11-25"
  wrk.headers["Mcp-Session-Id"] = session
else
  wrk.headers["Mcp-Protocol-Version"] = "2026-07-28"
  wrk.headers["Mcp-Method"] = "tools/call"
  wrk.headers["Mcp-Name"] = "echo"
end
if token then
  wrk.headers["Authorization"] = "Bearer " .. token
end

local meta = ""
if not session then
  meta = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"},'
    .. '"io.modelcontextprotocol/clientCapabilities":{}'
  if conversation then
    meta = meta .. ',"io.toolhost/conversation":"' .. conversation .. '"'
  end
  meta = meta .. "}"
end

local n = 0
request = function()
  n = n + 1
  local text = same and "same" or (run .. tostring(n))
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":'
    .. '{"name":"echo","arguments":{"text":"' .. text .. '"}' .. meta .. "}}"
  return wrk.format(nil, nil, nil, body)
end
