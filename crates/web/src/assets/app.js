// toolhost's web chat: the HTTP chat API (docs/chat-api.md) in a page. Everything a model or
// a tool wrote is put in the page as text (textContent), never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem("toolhost-token") || "",
  settings: null,
  conversation: null, // the id of the conversation shown
  replyTo: null,      // the question the next message answers
  assistant: null,    // the bubble the model's text goes to
  calls: new Map(),   // call id -> its block
  questions: new Map(), // question id -> its form
  prompts: [],        // GET /api/prompts
  attached: [],       // URIs to attach to the next message
};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

// --- talking to the host -------------------------------------------------------------------

let asking = null;
function askToken() {
  if (!asking) {
    asking = new Promise((resolve) => {
      const dialog = $("token-dialog");
      $("token-form").onsubmit = () => {
        state.token = $("token").value.trim();
        sessionStorage.setItem("toolhost-token", state.token);
        asking = null;
        resolve();
      };
      dialog.showModal();
      // A host that signs people in with its provider offers that first.
      fetch("/auth/options").then((r) => (r.ok ? r.json() : {})).then((options) => {
        $("sign-in-row").hidden = !options.sign_in;
      }, () => {});
    });
  }
  return asking;
}

async function api(path, options = {}) {
  for (;;) {
    const headers = Object.assign({}, options.headers || {});
    if (state.token) headers.authorization = "Bearer " + state.token;
    if (options.body) headers["content-type"] = "application/json";
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status !== 401) return response;
    await askToken();
  }
}

async function failure(response) {
  try {
    const body = await response.json();
    return body.error || response.statusText;
  } catch {
    return `HTTP ${response.status}`;
  }
}

// Reads a Server-Sent Events body, calling onEvent with each event's JSON.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (data.length) onEvent(JSON.parse(data.join("\n")));
    }
  }
}

function notice(text, kind = "") {
  const node = el("div", { class: "notice " + kind, text, "data-testid": "notice", role: "status" });
  $("notices").append(node);
  return node;
}

// --- the chat ------------------------------------------------------------------------------

function pretty(value) {
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

function oneLine(value, limit = 100) {
  const text = (typeof value === "string" ? value : JSON.stringify(value)).replace(/\s+/g, " ");
  return text.length > limit ? text.slice(0, limit) + "…" : text;
}

function item(node) {
  const li = el("li", {}, node);
  $("messages").append(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function addUser(text, brought = {}) {
  state.assistant = null;
  const chips = [];
  if (brought.prompt) chips.push(el("span", { class: "chip", text: `/${brought.prompt}`, "data-testid": "user-prompt" }));
  for (const uri of brought.resources || []) chips.push(el("span", { class: "chip", text: uri, "data-testid": "user-resource" }));
  const box = el("div", { class: "user", "data-testid": "user-text" }, ...chips, text);
  item(box);
  for (const note of brought.notes || []) notice(note, "info");
}

// The prompts and resources this caller may bring into a message (after each reload too).
async function loadOffers() {
  const [prompts, resources] = await Promise.all([api("/api/prompts"), api("/api/resources")]);
  if (prompts.ok) {
    state.prompts = (await prompts.json()).prompts;
    const pick = $("prompt-pick");
    const chosen = pick.value;
    pick.replaceChildren(el("option", { value: "", text: "none" }),
      ...state.prompts.map((p) => el("option", { value: p.name, text: p.title || p.name, title: p.description })));
    pick.value = state.prompts.some((p) => p.name === chosen) ? chosen : "";
    if (pick.value !== chosen) promptArguments();
  }
  if (resources.ok) {
    const listed = (await resources.json()).resources;
    $("attach").replaceChildren(el("option", { value: "", text: "a resource…" }),
      ...listed.map((r) => el("option", { value: r.uri, text: r.uri, title: `${r.mime_type}, ${r.size} bytes` })));
  }
}

// One input per argument of the picked prompt (its values offered as suggestions).
function promptArguments() {
  const prompt = state.prompts.find((p) => p.name === $("prompt-pick").value);
  const inputs = (prompt ? prompt.arguments : []).map((a, i) => {
    const list = el("datalist", { id: `arg-values-${i}` }, ...a.values.map((v) => el("option", { value: v })));
    const input = el("input", { name: a.name, placeholder: a.description || a.name, "data-testid": `arg-${a.name}` });
    input.setAttribute("list", list.id); // read-only as a property
    input.required = a.required;
    return el("label", {}, `${a.name}${a.required ? "*" : ""} `, input, list);
  });
  $("prompt-args").replaceChildren(...inputs);
}

function attach() {
  const uri = $("attach").value;
  $("attach").value = "";
  if (!uri || state.attached.includes(uri)) return;
  state.attached.push(uri);
  showAttached();
}

function showAttached() {
  $("attached").replaceChildren(...state.attached.map((uri) => {
    const drop = el("button", { type: "button", text: "×", "aria-label": `Detach ${uri}` });
    drop.onclick = () => { state.attached = state.attached.filter((u) => u !== uri); showAttached(); };
    return el("span", { class: "chip" }, uri, drop);
  }));
}

function addText(text) {
  if (!state.assistant) {
    state.assistant = el("div", { class: "assistant", "data-testid": "assistant-text" });
    item(state.assistant);
  }
  state.assistant.textContent += text;
}

function callBlock(id, name, args) {
  state.assistant = null;
  const status = el("span", { class: "badge", text: "running…" });
  const block = el("details", { class: "call", "data-testid": "tool-call", "data-call-id": id, "data-tool": name, "data-status": "running" },
    el("summary", {}, el("span", { class: "tool", text: name }), el("span", { class: "preview", text: oneLine(args) }), status),
    el("div", { class: "body" }, el("h3", { text: "Arguments" }), el("pre", { text: pretty(args) })));
  block.status = status;
  state.calls.set(id, block);
  item(block);
  return block;
}

function callResult(event) {
  const block = state.calls.get(event.id) || callBlock(event.id, event.name, "");
  block.dataset.status = event.outcome;
  block.classList.toggle("error", event.is_error);
  block.status.textContent = `${event.outcome} · ${event.duration_ms.toFixed(1)} ms`;
  block.status.className = "badge " + (event.is_error ? "bad" : "ok");
  const summary = block.querySelector("summary");
  if (event.deduplicated) summary.append(el("span", { class: "badge dedup", text: "deduplicated" }));
  if (event.is_error) summary.append(el("span", { class: "badge bad", text: "error" }));
  const body = block.querySelector(".body");
  body.append(el("h3", { text: event.is_error ? "Error" : "Result" }),
    el("pre", { text: pretty(event.content), "data-testid": "tool-result" }));
}

function approvalRequest(event, live) {
  const block = state.calls.get(event.id) || callBlock(event.id, event.tool, event.arguments);
  const box = el("div", { class: "approval" },
    el("div", { text: `${event.tool} (${event.ensemble}) is destructive: ${event.description}` }));
  if (live) {
    const conversation = state.conversation;
    const buttons = el("div", { class: "buttons" });
    const answer = (decision) => async () => {
      for (const b of buttons.children) b.disabled = true;
      const response = await api(`/api/conversations/${conversation}/approvals/${encodeURIComponent(event.id)}`,
        { method: "POST", body: JSON.stringify({ decision }) });
      if (!response.ok) notice(await failure(response));
    };
    buttons.append(
      el("button", { type: "button", class: "primary", text: "Allow", "data-testid": "approve-allow", onclick: answer("allow") }),
      el("button", { type: "button", text: "Deny", "data-testid": "approve-deny", onclick: answer("deny") }),
      el("button", { type: "button", text: "Allow all for this tool", "data-testid": "approve-allow-all", onclick: answer("allow-all") }));
    box.append(buttons);
  }
  block.approval = box;
  block.querySelector(".body").before(box);
  block.open = true;
  block.status.textContent = "waiting for approval";
  if (live) box.querySelector("button").focus();
}

function approvalDecided(event) {
  const block = state.calls.get(event.id);
  if (!block || !block.approval) return;
  for (const b of block.approval.querySelectorAll("button")) b.disabled = true;
  block.approval.append(el("div", { class: "muted", text: `decision: ${event.decision}` }));
}

// A tool's question (elicitation): a form from the requested schema, whose properties are
// strings (an enum is a choice), numbers, integers or booleans.
function field(name, property, required) {
  const label = property.title || name;
  const choices = property.enum || (property.oneOf || []).map((o) => o.const);
  const names = property.enumNames || (property.oneOf || []).map((o) => o.title || o.const);
  let input;
  if (property.type === "array") {
    const items = property.items || {};
    const values = items.enum || (items.anyOf || []).map((o) => o.const);
    const titles = items.enum || (items.anyOf || []).map((o) => o.title || o.const);
    const chosen = new Set(property.default || []);
    input = el("select", { multiple: true },
      ...values.map((v, i) => el("option", { value: v, text: titles[i], selected: chosen.has(v) })));
  } else if (property.type === "boolean") {
    input = el("input", { type: "checkbox", checked: property.default === true });
  } else if (choices.length) {
    input = el("select", {}, ...(required ? [] : [el("option", { value: "", text: "" })]),
      ...choices.map((c, i) => el("option", { value: c, text: names[i] || c, selected: property.default === c })));
  } else {
    const kinds = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
    const number = property.type === "number" || property.type === "integer";
    input = el("input", { type: number ? "number" : kinds[property.format] || "text", required });
    if (property.type === "integer") input.step = "1";
    if (property.type === "number") input.step = "any";
    if (property.minimum != null) input.min = property.minimum;
    if (property.maximum != null) input.max = property.maximum;
    if (property.default != null) input.value = property.default;
  }
  input.name = name;
  input.dataset.kind = property.type || "string";
  return el("label", { class: "field" }, el("span", { text: label + (required ? " *" : "") }), input,
    property.description && property.title ? el("span", { class: "muted", text: property.description }) : null);
}

function formValues(form) {
  const content = {};
  for (const input of form.querySelectorAll("input, select")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") content[input.name] = input.checked;
    else if (kind === "array") content[input.name] = [...input.selectedOptions].map((o) => o.value);
    else if (input.value === "") continue;
    else if (kind === "number" || kind === "integer") content[input.name] = Number(input.value);
    else content[input.name] = input.value;
  }
  return content;
}

function elicitationRequest(event, live) {
  const block = state.calls.get(event.call_id) || callBlock(event.call_id, event.tool, "");
  const schema = event.schema || {};
  const required = new Set(schema.required || []);
  const form = el("form", { class: "elicitation", "data-testid": "elicitation", "data-question": event.id },
    el("div", { text: `${event.tool} asks: ${event.message}` }),
    ...Object.entries(schema.properties || {}).map(([name, p]) => field(name, p, required.has(name))));
  if (live) {
    const conversation = state.conversation;
    const buttons = el("div", { class: "buttons" });
    const reply = (action) => async (e) => {
      if (e) e.preventDefault();
      const body = action === "accept" ? { action, content: formValues(form) } : { action };
      for (const b of buttons.children) b.disabled = true;
      const response = await api(`/api/conversations/${conversation}/elicitations/${encodeURIComponent(event.id)}`,
        { method: "POST", body: JSON.stringify(body) });
      if (!response.ok) {
        notice(await failure(response));
        for (const b of buttons.children) b.disabled = false;
      }
    };
    form.onsubmit = reply("accept");
    buttons.append(
      el("button", { type: "submit", class: "primary", text: "Send", "data-testid": "elicit-accept" }),
      el("button", { type: "button", text: "Decline", "data-testid": "elicit-decline", onclick: reply("decline") }),
      el("button", { type: "button", text: "Cancel", "data-testid": "elicit-cancel", onclick: reply("cancel") }));
    form.append(buttons);
  } else {
    for (const input of form.querySelectorAll("input, select")) input.disabled = true;
  }
  state.questions.set(event.id, form);
  block.querySelector(".body").before(form);
  block.open = true;
  block.status.textContent = "waiting for an answer";
  if (live) (form.querySelector("input, select") || form.querySelector("button")).focus();
}

function elicitationAnswered(event) {
  const form = state.questions.get(event.id);
  if (!form) return;
  for (const input of form.querySelectorAll("input, select, button")) input.disabled = true;
  form.append(el("div", { class: "muted", text: `answer: ${event.action}`, "data-testid": "elicitation-answer" }));
}

const ENDINGS = { "iteration-limit": 1, "size-limit": 1, error: 1, cancelled: 1, "shut-down": 1 };

function show(event, live) {
  switch (event.type) {
    case "user": addUser(event.text, event); break;
    case "text": case "text_delta": addText(event.text); break;
    case "tool_call": callBlock(event.id, event.name, event.arguments); break;
    case "tool_result": callResult(event); break;
    case "approval_request": approvalRequest(event, live); break;
    case "approval": approvalDecided(event); break;
    case "elicitation_request": elicitationRequest(event, live); break;
    case "elicitation": elicitationAnswered(event); break;
    case "question":
      state.assistant = null;
      item(el("div", { class: "assistant question", text: event.text, "data-testid": "question" }));
      state.replyTo = event.id;
      break;
    case "done": {
      state.assistant = null;
      const used = event.usage ? ` · ${event.usage.input_tokens} in, ${event.usage.output_tokens} out` : "";
      const bad = ENDINGS[event.ending];
      const text = (bad ? `${event.ending}: ${event.text}` : `${event.iterations} model call(s)`) + used;
      item(el("div", { class: "end" + (bad ? " bad" : ""), text }));
      if (event.ending !== "question") state.replyTo = null;
      break;
    }
    case "retry":
      // The text that streamed since the last call is void: marked, and a new answer begins.
      if (state.assistant) state.assistant.classList.add("void");
      state.assistant = null;
      item(el("div", { class: "end bad", text: `${event.reason}; asking again (try ${event.attempt} of ${event.attempts})` }));
      break;
    case "error": notice(event.message); break;
  }
}

function clearChat() {
  $("messages").replaceChildren();
  $("notices").replaceChildren();
  state.calls.clear();
  state.questions.clear();
  state.assistant = null;
  state.replyTo = null;
}

function setRunning(running) {
  document.body.dataset.running = String(running);
  $("send").disabled = running;
}

async function send(event) {
  event.preventDefault();
  const text = $("composer").value;
  const promptName = $("prompt-pick").value;
  const brings = promptName || state.attached.length > 0;
  if ((!text.trim() && !brings) || document.body.dataset.running === "true") return;
  const body = { message: text, tools: $("opt-tools").checked };
  if (promptName) {
    const args = {};
    for (const input of $("prompt-args").querySelectorAll("input")) if (input.value) args[input.name] = input.value;
    body.prompt = { name: promptName, arguments: args };
  }
  if (state.attached.length > 0) body.resources = [...state.attached];
  const iterations = parseInt($("opt-iterations").value, 10);
  if (iterations > 0) body.max_iterations = iterations;
  if ($("opt-choice").value) body.tool_choice = $("opt-choice").value;
  if (state.replyTo && state.conversation) body.reply_to = state.replyTo;
  const path = state.conversation ? `/api/conversations/${state.conversation}/messages` : "/api/conversations";
  setRunning(true);
  $("notices").replaceChildren();
  try {
    const response = await api(path, { method: "POST", body: JSON.stringify(body) });
    if (!response.ok) { notice(await failure(response)); return; }
    $("composer").value = "";
    addUser(text, { prompt: promptName, resources: body.resources });
    $("prompt-pick").value = "";
    promptArguments();
    state.attached = [];
    showAttached();
    state.replyTo = null;
    await readEvents(response, (e) => {
      if (e.type === "conversation") { state.conversation = e.id; listConversations(); }
      else show(e, true);
    });
  } catch (error) {
    notice(`the connection broke: ${error.message}`);
  } finally {
    setRunning(false);
    listConversations();
    $("composer").focus();
  }
}

async function openConversation(id) {
  if (document.body.dataset.running === "true") return;
  clearChat();
  state.conversation = id;
  document.body.classList.remove("menu-open");
  markCurrent();
  const response = await api(`/api/conversations/${id}`);
  if (!response.ok) { notice(await failure(response)); return; }
  const conversation = await response.json();
  for (const event of conversation.log) show(event, false);
  state.replyTo = conversation.pending_question || null;
  if (conversation.running) notice("A run of this conversation is going on elsewhere.", "info");
}

function markCurrent() {
  for (const li of $("conversations").children) li.classList.toggle("current", li.dataset.id === state.conversation);
}

async function listConversations() {
  const response = await api("/api/conversations");
  if (!response.ok) return;
  const { conversations } = await response.json();
  $("conversations").replaceChildren(...conversations.map((c) => {
    const li = el("li", { "data-id": c.id, "data-testid": "conversation-item" },
      el("button", { type: "button", text: c.title || "(untitled)", title: `${c.title}\nupdated ${c.updated}`, onclick: () => openConversation(c.id) }),
      el("button", { type: "button", class: "delete", text: "✕", "aria-label": `Delete ${c.title}`, onclick: () => remove(c) }));
    return li;
  }));
  markCurrent();
}

async function remove(conversation) {
  if (!confirm(`Delete “${conversation.title}”?`)) return;
  const response = await api(`/api/conversations/${conversation.id}`, { method: "DELETE" });
  if (!response.ok) { notice(await failure(response)); return; }
  if (state.conversation === conversation.id) newChat();
  listConversations();
}

function newChat() {
  if (document.body.dataset.running === "true") return;
  clearChat();
  state.conversation = null;
  markCurrent();
  document.body.classList.remove("menu-open");
  $("composer").focus();
}

// --- the catalog ---------------------------------------------------------------------------

function renderCatalog(catalog) {
  $("catalog-status").textContent = `Generation ${catalog.generation}, reloaded ${catalog.reloaded_at}`;
  $("refused").replaceChildren(...catalog.refused.map((r) => el("section", { class: "refused", "data-testid": "catalog-refused" },
    el("h2", { text: `Refused: ${r.file}` }),
    el("p", { class: "muted", text: r.kept_previous ? "Its previous version is serving." : "Not loaded." }),
    el("pre", { text: r.errors.join("\n\n") }))));
  $("loading").replaceChildren(...catalog.loading.map((l) => el("section", {},
    el("h2", { text: `Compiling: ${l.file}` }),
    el("p", { class: "muted", text: "Its previous version, if any, serves meanwhile." }))));
  $("ensembles").replaceChildren(...catalog.ensembles.map(ensembleSection));
}

function toolRow(t) {
  const schema = el("details", {}, el("summary", { text: "input schema" }), el("pre", { text: pretty(t.input_schema) }));
  return el("tr", { "data-testid": "catalog-tool", "data-tool": t.name },
    el("td", {}, el("code", { text: t.name }), el("div", { class: "muted", text: t.description })),
    el("td", { text: t.enabled ? "yes" : "no" }),
    el("td", { text: t.destructive ? "destructive" : t.read_only ? "read-only" : "" }),
    el("td", { class: "hash", text: t.version }),
    el("td", {}, schema));
}

function ensembleSection(e) {
  const hashes = e.components.map((h) => el("span", { class: "hash", title: h, text: h.slice(0, 12) + " " }));
  const head = el("tr", {}, ...["Tool", "Enabled", "Kind", "Version", "Schema"].map((h) => el("th", { text: h })));
  return el("section", { "data-testid": "catalog-ensemble" },
    el("h2", { text: e.name + (e.enabled ? "" : " (disabled)") }),
    el("p", { class: "muted" }, `${e.file} · loaded ${e.loaded_at} · components `, ...hashes),
    el("table", {}, el("thead", {}, head), el("tbody", {}, ...e.tools.map(toolRow))));
}

async function followCatalog() {
  for (;;) {
    try {
      const response = await api("/api/catalog/events");
      if (response.ok) await readEvents(response, (e) => { if (e.type === "catalog") { renderCatalog(e); loadOffers(); } });
      else $("catalog-status").textContent = await failure(response);
    } catch (error) {
      $("catalog-status").textContent = `Reconnecting: ${error.message}`;
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

function showView(name) {
  const chat = name === "chat";
  $("chat-view").hidden = !chat;
  $("catalog-view").hidden = chat;
  $("tab-chat").setAttribute("aria-selected", String(chat));
  $("tab-catalog").setAttribute("aria-selected", String(!chat));
}

// --- who is signed in ----------------------------------------------------------------------

function showIdentity(identity) {
  if (!identity) return;
  const local = identity.kind === "local";
  $("who").textContent = local ? "local operator" : `Signed in as ${identity.name}`;
  $("who").title = (identity.groups || []).length ? `groups: ${identity.groups.join(", ")}` : "";
  $("who").hidden = false;
  $("sign-out").hidden = local;
}

// Forgets the token this page holds and the host's sign-in cookie, then starts over (the page
// asks again: sign in, or a token).
async function signOut() {
  sessionStorage.removeItem("toolhost-token");
  state.token = "";
  await fetch("/auth/sign-out", { method: "POST" }).catch(() => {});
  location.assign("/");
}

// --- start ---------------------------------------------------------------------------------

async function start() {
  $("composer-form").addEventListener("submit", send);
  $("composer").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer-form").requestSubmit(); }
  });
  $("new-chat").onclick = newChat;
  $("prompt-pick").onchange = promptArguments;
  $("attach").onchange = attach;
  $("tab-chat").onclick = () => showView("chat");
  $("tab-catalog").onclick = () => showView("catalog");
  $("menu").onclick = () => {
    const open = document.body.classList.toggle("menu-open");
    $("menu").setAttribute("aria-expanded", String(open));
  };
  $("sign-out").onclick = signOut;
  const response = await api("/api/settings");
  const settings = response.ok ? await response.json() : { chat: false, problem: await failure(response) };
  state.settings = settings;
  showIdentity(settings.identity);
  if (settings.chat) {
    $("model").textContent = `${settings.provider} · ${settings.model}`;
    $("opt-iterations").max = settings.max_iterations;
  } else {
    notice(`The chat is off: ${settings.problem}`, "info");
    $("send").disabled = true;
  }
  listConversations();
  followCatalog();
  $("composer").focus();
}

start();
