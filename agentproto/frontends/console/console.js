// agentproto console: the page's only script (served by agentproto itself, see docs/console.md).
// Rules: everything an agent, a tool or the database wrote is put in the page as text
// (textContent, createTextNode, SVG attributes), never as HTML; no cookie; the token lives in
// sessionStorage; streams are read with fetch() so that Authorization and Last-Event-ID go along.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem("agentproto.token"),
  selected: sessionStorage.getItem("agentproto.session"),
  rows: new Map(),
  stream: null, // the selected session's reader: {id, abort, last}
  listAbort: null,
};

// Direction overrides and isolates, zero-width marks: shown as U+FFFD, never acted on.
const CONTROLS = /[\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g;
const clean = (value) => String(value ?? "").replace(CONTROLS, "\ufffd");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = clean(value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(typeof child === "string" ? document.createTextNode(clean(child)) : child);
  return node;
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

function setStatus(text) { $("status").textContent = clean(text); }

// -- the token: the URL's one-time secret, else asked for --------------------------------
async function start() {
  const match = /^#secret=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (match) {
    history.replaceState(null, "", location.pathname + location.search);
    try {
      const r = await fetch("v1/console/exchange", {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({secret: match[1]}), cache: "no-store",
      });
      const body = await r.json();
      if (r.ok) {
        state.token = body.token;
        if (state.token) sessionStorage.setItem("agentproto.token", state.token);
      } else {
        $("login-why").textContent = clean(body.message);
      }
    } catch (e) { setStatus("cannot reach the sidecar"); }
  }
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("agentproto.token", state.token);
    $("token").value = "";
    $("login").hidden = true;
    followList();
    if (state.selected) select(state.selected);
  });
  $("events").addEventListener("scroll", () => {
    const box = $("events");
    stuck = box.scrollTop + box.clientHeight >= box.scrollHeight - 30;
  });
  $("tab-sessions").addEventListener("click", () => showTab("sessions"));
  $("tab-cost").addEventListener("click", () => showTab("cost"));
  $("open-form").addEventListener("submit", openSession);
  $("prompt-form").addEventListener("submit", sendPrompt);
  $("cancel").addEventListener("click", () => op({op: "cancel", session: state.selected}));
  $("close").addEventListener("click", () => op({op: "close", session: state.selected}));
  $("cost-refresh").addEventListener("click", loadCost);
  $("cost-since").addEventListener("change", loadCost);
  $("cost-by").addEventListener("change", loadCost);
  followList();
  if (state.selected) select(state.selected);
  loadAgents();
  setInterval(tickAges, 5000); // the ages go on between updates
  document.addEventListener("visibilitychange", visibility);
}

function needToken(why) {
  $("login").hidden = false;
  if (why) $("login-why").textContent = clean(why);
  setStatus("token needed");
}

function showTab(name) {
  $("view-sessions").hidden = name !== "sessions";
  $("view-cost").hidden = name !== "cost";
  $("tab-sessions").setAttribute("aria-pressed", String(name === "sessions"));
  $("tab-cost").setAttribute("aria-pressed", String(name === "cost"));
  if (name === "cost") loadCost();
}

// -- Server-Sent Events over fetch ---------------------------------------------------------
// onMessage({id, event, data}); resolves when the stream ends; rejects on a network error.
async function readEvents(url, lastId, signal, onMessage) {
  const extra = lastId == null ? {} : {"Last-Event-ID": String(lastId)};
  const r = await fetch(url, {headers: headers(extra), cache: "no-store", signal});
  if (r.status === 401) { needToken(); return "unauthorized"; }
  if (!r.ok) return "status " + r.status;
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return "ended";
    buffer += decoder.decode(value, {stream: true});
    let start = 0, end;
    while ((end = buffer.indexOf("\n\n", start)) >= 0) {
      const block = buffer.slice(start, end);
      start = end + 2;
      const message = {id: null, event: "message", data: ""};
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        if (colon <= 0) continue;
        const field = line.slice(0, colon), text = line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") message.id = Number(text);
        else if (field === "event") message.event = text;
        else if (field === "data") message.data += text;
      }
      if (message.data) onMessage(message);
    }
    buffer = buffer.slice(start); // once per read: never a copy per message
  }
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// -- the session list ----------------------------------------------------------------------
async function followList() {
  if (state.listAbort) state.listAbort.abort();
  const abort = state.listAbort = new AbortController();
  while (!abort.signal.aborted) {
    try {
      const why = await readEvents("v1/sessions", null, abort.signal, (m) => {
        const body = JSON.parse(m.data);
        if (m.event === "sessions") state.rows = new Map();
        const at = performance.now();
        for (const row of body.sessions || []) state.rows.set(String(row.id), Object.assign(row, {receivedAt: at}));
        for (const id of body.gone || []) state.rows.delete(String(id));
        renderList();
        setStatus("live");
      });
      if (why === "unauthorized") return;
    } catch (e) {
      if (abort.signal.aborted) return;
    }
    setStatus("reconnecting…");
    await sleep(1000);
  }
}

const money = (v) => (v == null ? "–" : "$" + Number(v).toFixed(4));
const count = (v) => Number(v || 0).toLocaleString("en-US");
function age(s) {
  s = Math.floor(s);
  return s < 120 ? s + "s" : s < 7200 ? Math.floor(s / 60) + "m" : Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
}

const ageOf = (row) => age(row.age_s + (performance.now() - row.receivedAt) / 1000);
function tickAges() {
  for (const tr of $("sessions").tBodies[0].rows) {
    const row = state.rows.get(tr.dataset.session);
    if (row) tr.cells[8].textContent = ageOf(row);
  }
}

function renderList() {
  const body = $("sessions").tBodies[0];
  body.replaceChildren();
  for (const row of state.rows.values()) {
    const tokens = (row.tokens && (row.tokens.input || 0) + (row.tokens.output || 0)) || 0;
    const tr = el("tr", {"data-session": String(row.id)},
      el("td", {}, el("button", {type: "button", class: "link", text: String(row.id)})),
      el("td", {text: row.agent}), el("td", {text: row.model ?? "–"}), el("td", {text: row.status}),
      el("td", {class: "num", text: String(row.turns)}), el("td", {class: "num", text: count(tokens)}),
      el("td", {class: "num", text: money(row.cost_usd)}), el("td", {class: "num", text: String(row.open_requests)}),
      el("td", {class: "num", text: ageOf(row)}));
    if (String(row.id) === state.selected) tr.classList.add("selected");
    tr.addEventListener("click", () => select(String(row.id)));
    body.append(tr);
  }
  $("no-sessions").hidden = state.rows.size > 0;
  const row = state.rows.get(state.selected);
  if (row) $("session-meta").textContent = clean(`${row.agent} · ${row.model ?? "default model"} · ${row.status} · ${row.turns} turns · ${money(row.cost_usd)}`);
}

// -- one session's events ---------------------------------------------------------------------
function select(id) {
  if (state.stream && state.stream.id === id) return;
  if (state.stream) state.stream.abort.abort();
  state.selected = id;
  sessionStorage.setItem("agentproto.session", id);
  $("session-pane").hidden = false;
  $("session-title").textContent = clean("Session " + id);
  resetView();
  renderList();
  const stream = state.stream = {id, abort: new AbortController(), last: null, ended: false};
  followSession(stream);
}

function resetView() {
  $("events").replaceChildren();
  $("requests").replaceChildren();
  view.messages = new Map();
  view.tools = new Map();
  view.requests = new Map();
}

const view = {messages: new Map(), tools: new Map(), requests: new Map()};

async function followSession(stream) {
  const url = "v1/sessions/" + encodeURIComponent(stream.id) + "/events";
  const abort = stream.abort; // this reader's: a resume makes another
  while (!abort.signal.aborted && !stream.ended) {
    try {
      const why = await readEvents(url, stream.last, abort.signal, (m) => {
        if (m.event === "resync") {
          resetView();
          const body = JSON.parse(m.data);
          addLine(el("div", {class: "ev meta", text: `(earlier events are no longer held: showing from #${body.oldest})`}));
          stream.last = null;
          return;
        }
        if (m.id != null) {
          if (stream.last != null && m.id <= stream.last) return; // never twice
          stream.last = m.id;
        }
        render(JSON.parse(m.data), stream);
      });
      if (why === "unauthorized" || (why && why.startsWith("status"))) return;
    } catch (e) {
      if (abort.signal.aborted) return;
    }
    if (!stream.ended && !abort.signal.aborted) await sleep(1000);
  }
}

// A hidden tab lets its streams go (a browser has six connections per host for every tab)
// and, shown again, resumes them: the session's after the last id it read (Last-Event-ID).
function visibility() {
  if (document.hidden) {
    if (state.listAbort) state.listAbort.abort();
    if (state.stream) state.stream.abort.abort();
    setStatus("paused while hidden");
  } else {
    followList();
    if (state.stream && !state.stream.ended) {
      state.stream.abort = new AbortController();
      followSession(state.stream);
    }
  }
}

// Follow the end (unless the reader scrolled up), once per frame: never a layout per event.
let scrollPending = false, stuck = true;
function addLine(node) {
  $("events").append(node);
  keepAtEnd();
  return node;
}
function keepAtEnd() {
  if (scrollPending) return;
  scrollPending = true;
  requestAnimationFrame(() => {
    scrollPending = false;
    const box = $("events");
    if (stuck) box.scrollTop = box.scrollHeight;
  });
}

function kindOf(kind) {
  return typeof kind === "string" ? [kind, null] : [Object.keys(kind)[0], Object.values(kind)[0]];
}

function render(line, stream) {
  if (line.closed !== undefined) {
    stream.ended = true;
    addLine(el("div", {class: "ev meta", text: "session closed"}));
    return;
  }
  if (line.error) {
    addLine(el("div", {class: "ev error", text: `session error: ${line.error.kind}: ${line.error.message}`}));
    return;
  }
  if (!line.event) return;
  const [name, body] = kindOf(line.event.kind);
  const seq = String(line.event.sequence);
  switch (name) {
    case "TextDelta":
    case "UserMessage": {
      const key = name + ":" + body.message_id;
      let node = view.messages.get(key);
      if (!node) {
        node = addLine(el("div", {class: "ev " + (name === "UserMessage" ? "user" : "text"), "data-seq": seq}));
        view.messages.set(key, node);
      }
      node.append(document.createTextNode(clean(body.text)));
      keepAtEnd();
      break;
    }
    case "ReasoningDelta": {
      const key = "R:" + body.message_id;
      let node = view.messages.get(key);
      if (!node) {
        const details = el("details", {}, el("summary", {text: "Reasoning"}));
        node = el("div", {class: "reasoning"});
        details.append(node);
        addLine(el("div", {class: "ev meta", "data-seq": seq}, details));
        view.messages.set(key, node);
      }
      node.append(document.createTextNode(clean(body.text)));
      break;
    }
    case "ToolUpdated": {
      let node = view.tools.get(body.id);
      if (!node) {
        node = {box: addLine(el("div", {class: "ev tool", "data-seq": seq})), output: ""};
        view.tools.set(body.id, node);
      }
      node.box.replaceChildren(el("strong", {text: body.title || body.kind}), el("span", {class: "status", text: body.status}));
      const command = body.input && body.input.Command ? body.input.Command.command : null;
      if (command) node.box.append(el("pre", {class: "command", text: "$ " + command}));
      if (body.output != null) node.output = body.output;
      if (node.output) node.box.append(el("pre", {class: "output", text: node.output}));
      break;
    }
    case "ToolOutputDelta": {
      const node = view.tools.get(body.tool_id);
      if (node) {
        node.output += body.text;
        const pre = node.box.querySelector("pre.output") || node.box.appendChild(el("pre", {class: "output"}));
        pre.textContent = clean(node.output);
      }
      break;
    }
    case "PlanUpdated":
      addLine(el("div", {class: "ev meta", "data-seq": seq}, el("strong", {text: "Plan"}),
        el("ul", {}, ...body.entries.map((e) => el("li", {text: `[${e.status}] ${e.text}`})))));
      break;
    case "PlanProposed":
      addLine(el("div", {class: "ev meta", "data-seq": seq}, el("strong", {text: "Proposed plan"}), el("pre", {text: body.markdown})));
      break;
    case "Diagnostic":
      addLine(el("div", {class: "ev diag", "data-seq": seq, text: `${body.level}: ${body.message}`}));
      break;
    case "RequestOpened":
      openRequest(body, stream.id);
      break;
    case "RequestClosed": {
      const node = view.requests.get(body.request_id);
      if (node) { node.remove(); view.requests.delete(body.request_id); }
      break;
    }
    case "TurnStarted":
      addLine(el("div", {class: "ev meta", "data-seq": seq, text: "turn started"}));
      break;
    case "TurnEnded": {
      const stop = kindOf(body.stop)[0];
      addLine(el("div", {class: "ev meta turn-ended", "data-seq": seq, text: "turn ended: " + stop}));
      break;
    }
    case "StatusChanged":
      addLine(el("div", {class: "ev meta status-changed", "data-seq": seq, text: "status: " + body}));
      break;
    case "SessionUpdated":
    case "ContextUsage":
    case "PlanUsageUpdated":
    case "MessageEnded":
      break;
    default:
      addLine(el("div", {class: "ev meta", "data-seq": seq, text: name + (body == null ? "" : " " + JSON.stringify(body))}));
  }
}

const OPTION_LABELS = {AllowOnce: "Allow", AllowAlways: "Allow always", DenyOnce: "Deny", DenyAlways: "Deny always"};

function openRequest(request, session) {
  const [kind, body] = kindOf(request);
  const box = el("div", {class: "request", "data-request": body.id});
  const answer = (value) => {
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    op({op: "answer", session, request: body.id, answer: value}).then((result) => {
      if (result && !result.ok) box.append(el("p", {class: "error", text: result.error ? result.error.message : "not answered"}));
    });
  };
  if (kind === "Permission") {
    box.append(el("p", {}, el("strong", {text: "Permission: "}), body.tool.title || body.tool.kind));
    const command = body.tool.input && body.tool.input.Command ? body.tool.input.Command.command : null;
    if (command) box.append(el("pre", {class: "command", text: "$ " + command}));
    if (body.detail) box.append(el("p", {text: body.detail}));
    for (const option of body.options) {
      const b = el("button", {type: "button", text: OPTION_LABELS[option] || option, "data-option": option});
      b.addEventListener("click", () => answer({Permission: option}));
      box.append(b, " ");
    }
  } else if (kind === "Question") {
    const inputs = [];
    for (const q of body.questions) {
      box.append(el("p", {text: (q.header ? q.header + ": " : "") + q.text}));
      if (q.choices.length) {
        const select = el("select", {"aria-label": q.text});
        if (q.multi_select) select.multiple = true;
        for (const c of q.choices) select.append(el("option", {value: c.id, text: c.label}));
        box.append(select);
        inputs.push(() => ({Choices: Array.from(select.selectedOptions, (o) => o.value)}));
      } else {
        const input = el("input", {"aria-label": q.text});
        box.append(input);
        inputs.push(() => ({Text: input.value}));
      }
    }
    const b = el("button", {type: "button", text: "Answer"});
    b.addEventListener("click", () => answer({Question: inputs.map((f) => f())}));
    box.append(" ", b);
  } else {
    box.append(el("p", {text: kind + " " + JSON.stringify(body)}));
  }
  const deny = el("button", {type: "button", text: "Withdraw"});
  deny.addEventListener("click", () => answer("Cancel"));
  if (kind !== "Permission") box.append(" ", deny);
  view.requests.set(body.id, box);
  $("requests").append(box);
}

// -- ops --------------------------------------------------------------------------------------
// POST /v1/agent: its lines (the session's events also come through the stream, shown there).
async function op(request) {
  const r = await fetch("v1/agent", {
    method: "POST", headers: headers({"Content-Type": "application/json"}), body: JSON.stringify(request), cache: "no-store",
  });
  if (r.status === 401) { needToken(); return null; }
  const text = await r.text();
  let result = null;
  for (const line of text.split("\n")) {
    if (!line) continue;
    const obj = JSON.parse(line);
    if (obj.kind === "result") result = obj;
    if (obj.kind === "error") result = {ok: false, error: {message: obj.message}};
  }
  if (result && !result.ok) setStatus(clean(result.error ? result.error.message : "failed"));
  return result;
}

async function openSession(e) {
  e.preventDefault();
  const request = {op: "open", agent: $("open-agent").value.trim(), dir: $("open-dir").value.trim()};
  if ($("open-mode").value) request.permission_mode = $("open-mode").value;
  const result = await op(request);
  if (result && result.ok) select(String(result.session.id));
}

async function sendPrompt(e) {
  e.preventDefault();
  const text = $("prompt").value;
  if (!text.trim() || !state.selected) return;
  $("prompt").value = "";
  await op({op: "prompt", session: state.selected, text});
}

async function loadAgents() {
  const result = await op({op: "discover"}).catch(() => null);
  const list = $("agents");
  const seen = new Set();
  const agents = (result && result.discovery && result.discovery.agents) || [];
  for (const agent of [{id: "mock"}, ...agents]) {
    const id = agent.id || (agent.agent && agent.agent.id);
    if (!id || seen.has(id)) continue;
    seen.add(id);
    list.append(el("option", {value: id}));
  }
}

// -- cost: the same numbers as `inspect --view cost` -----------------------------------------
const PALETTE = ["#2563eb", "#db2777", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d", "#9333ea", "#0d9488"];
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text != null) node.textContent = clean(text);
  return node;
}

async function loadCost() {
  const since = $("cost-since").value, by = $("cost-by").value;
  const [byDay, byModel] = await Promise.all([
    op({op: "inspect", view: "cost", by: "day", since, top: 100000}),
    op({op: "inspect", view: "cost", by: "model", since}),
  ]);
  if (!byDay || !byDay.ok || !byModel || !byModel.ok) {
    $("cost-total").textContent = clean(byDay && byDay.error ? byDay.error.message : "no cost figures");
    return;
  }
  const view = byDay, mview = byModel; // the result holds the view's fields (InspectCost)
  $("cost-total").textContent = clean(`${view.total.turns} turns since ${view.since.slice(0, 16).replace("T", " ")} UTC: ` +
    `${money(view.total.cost_usd)}, ${count(view.total.input_tokens)} in, ${count(view.total.output_tokens)} out`);
  drawDays(view, by);
  drawModels(mview);
  const body = $("top-turns").tBodies[0];
  body.replaceChildren();
  for (const row of (view.top || []).slice(0, 10)) {
    body.append(el("tr", {},
      el("td", {text: String(row.ended_at).slice(0, 16).replace("T", " ")}), el("td", {text: row.agent}),
      el("td", {text: row.model ?? "–"}), el("td", {text: `${row.session}/${row.turn}`}),
      el("td", {class: "num", text: count(row.input_tokens)}), el("td", {class: "num", text: count(row.output_tokens)}),
      el("td", {class: "num", text: money(row.cost_usd)}), el("td", {text: row.stop})));
  }
}

function drawDays(view, by) {
  const days = view.groups.map((g) => g.key).sort();
  const keys = new Map(); // stack key -> colour
  const cells = new Map(); // day -> Map(stack key -> cost)
  for (const row of view.top || []) {
    const d = String(row.ended_at).slice(0, 10);
    const key = (by === "model" ? row.model : row.agent) ?? "(unknown)";
    if (!keys.has(key)) keys.set(key, PALETTE[keys.size % PALETTE.length]);
    const m = cells.get(d) || new Map();
    m.set(key, (m.get(key) || 0) + (row.cost_usd || 0));
    cells.set(d, m);
  }
  const max = Math.max(0, ...view.groups.map((g) => g.cost_usd || 0)) || 1;
  const W = Math.max(320, days.length * 48 + 60), H = 220, base = 190, top = 10;
  const chart = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "spend per day"});
  chart.append(svg("text", {x: 0, y: 12}, money(max)));
  days.forEach((d, i) => {
    const x = 50 + i * 48;
    let y = base;
    const group = view.groups.find((g) => g.key === d);
    const bar = svg("g", {class: "bar", "data-day": d, "data-cost": group.cost_usd ?? 0, "data-turns": group.turns});
    bar.append(svg("title", {}, `${d}: ${money(group.cost_usd)} (${group.turns} turns)`));
    for (const [key, cost] of cells.get(d) || []) {
      const h = (cost / max) * (base - top);
      y -= h;
      bar.append(svg("rect", {x, y, width: 36, height: Math.max(h, 0), fill: keys.get(key), "data-key": key, "data-cost": cost},
        null));
    }
    bar.append(svg("text", {x, y: base + 14}, d.slice(5)));
    chart.append(bar);
  });
  chart.append(svg("line", {x1: 45, x2: W, y1: base, y2: base, stroke: "currentColor"}));
  const legend = el("div", {class: "legend"});
  for (const [key, colour] of keys) {
    const swatch = el("span", {class: "swatch"});
    swatch.style.background = colour;
    legend.append(el("span", {}, swatch, key));
  }
  $("chart-day").replaceChildren(chart, legend);
}

function drawModels(view) {
  const groups = view.groups;
  const max = Math.max(0, ...groups.map((g) => g.input_tokens + g.output_tokens)) || 1;
  const W = 560, row = 24, H = groups.length * row + 10;
  const chart = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "tokens per model"});
  groups.forEach((g, i) => {
    const y = 5 + i * row, total = g.input_tokens + g.output_tokens;
    const bar = svg("g", {class: "bar", "data-model": g.key, "data-tokens": total});
    bar.append(svg("title", {}, `${g.key}: ${count(g.input_tokens)} in, ${count(g.output_tokens)} out`));
    bar.append(svg("text", {x: 0, y: y + 14}, g.key.length > 22 ? g.key.slice(0, 21) + "…" : g.key));
    const wIn = (g.input_tokens / max) * 300, wOut = (g.output_tokens / max) * 300;
    bar.append(svg("rect", {x: 160, y, width: wIn, height: 16, fill: PALETTE[0]}));
    bar.append(svg("rect", {x: 160 + wIn, y, width: wOut, height: 16, fill: PALETTE[1]}));
    bar.append(svg("text", {x: 166 + wIn + wOut, y: y + 13}, count(total)));
    chart.append(bar);
  });
  $("chart-model").replaceChildren(chart);
}

document.addEventListener("DOMContentLoaded", start);
