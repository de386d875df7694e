// The ReleasePlan dashboard: draws what the plugin's server pushes (server-sent
// events); computes nothing about plans itself. Overview rows are keyed by
// namespace/name and redrawn only when their data changed, once per frame.
"use strict";
const token = document.querySelector('meta[name="rp-token"]').content;
// The token came in the URL once; the server keeps it in a cookie since:
// take it out of the address bar and the history.
if (location.search) history.replaceState(null, "", location.pathname + location.hash);
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
const RANK = {failing: 0, moving: 1, settled: 2};
let clockSkew = 0; // server time minus browser time, ms
// Figures for the benchmark (benches/dashboard.rs): when the first snapshot was
// drawn, and how long the longest and the last frame of updates took.
window.rpStats = {firstRender: null, renders: 0, lastRender: null, lastFlushMs: 0, maxFlushMs: 0};

function since(iso) {
  if (!iso) return "-";
  let s = Math.max(0, Math.round((Date.now() + clockSkew - Date.parse(iso)) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d";
}
function dur(a, b) {
  if (!a || !b) return "-";
  let s = Math.round((Date.parse(b) - Date.parse(a)) / 1000);
  return s < 60 ? s + "s" : Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
}
function setNow(iso) { if (iso) clockSkew = Date.parse(iso) - Date.now(); }
function showErrors(errs) { $("errors").textContent = (errs || []).join("\n"); }

// A step's state: done, cur (being run), fail (where a failed rollout stopped), todo.
function stepState(r, k) {
  const i = r.step.index;
  if (r.phase === "Stable" || k < i) return "done";
  if (k !== i) return "todo";
  return r.attention === "failing" ? "fail" : "cur";
}
// The step bar: one segment per step, done / current / to come, pauses hatched.
// A segment's label is drawn by CSS from data-l (no text node: 1,000 rows of
// four segments are 4,000 nodes fewer); the bar's aria-label and each
// segment's title say the same in words.
function stepsBar(r) {
  const segs = r.steps.map((s, k) => {
    const state = stepState(r, k);
    const word = {cur: "current", done: "done", todo: "to come", fail: "failed here"}[state];
    return `<span class="seg ${s.kind} ${state}" data-l="${s.kind === "pause" ? "||" : esc(s.label)}" title="step ${k + 1}: ${esc(s.label)} (${word})"></span>`;
  }).join("");
  const none = r.step.text === "no steps" ? '<span class="seg done" data-l="100%"></span>' : "";
  return `<div class="steps" role="img" aria-label="${esc(r.step.text)}">${segs || none}</div><span class="st">${esc(r.step.text)}</span>`;
}
// The weight. `weight` is the replica split (status.weight); `trafficWeight`,
// there only when a router is configured, is the share of requests on the
// current revision, which can lag the pods: both are shown then.
function weightText(r, word = "") {
  if (Number.isInteger(r.trafficWeight)) return `traffic ${r.trafficWeight}% · pods ${r.weight}%`;
  return `${word}${r.weight}%`;
}
function revisions(r) {
  return r.components.map((c) => {
    const same = c.stableHash === c.currentHash;
    const rev = same ? esc(c.currentHash || "-") : `${esc(c.stableHash || "-")} → <b>${esc(c.currentHash || "-")}</b>`;
    const ready = same ? `${c.currentReady}/${c.replicas}` : `${c.stableReady}/${c.stableReplicas} · ${c.currentReady}/${c.currentReplicas}`;
    const auto = c.autoscaling ? ` <span class="st" title="autoscaled: replicas set by ${esc(c.autoscaling.hpa ? "hpa/" + c.autoscaling.hpa : "componentscale/" + c.autoscaling.scale)}">(autoscaled)</span>` : "";
    return `<div>${esc(c.name)} <span class="mono">${rev}</span> <span class="st">${ready} ready</span>${auto}</div>`;
  }).join("") || "-";
}
function gates(r) {
  return r.gates.map((g) => `<div class="g-${esc(g.verdict)}">${esc(g.name)}: ${esc(g.verdict)}${g.value != null ? " (" + esc(g.value) + ")" : ""}</div>`).join("") || "-";
}
function message(r) {
  if (r.failure && r.attention === "failing") return `<span class="fail">failed: ${esc(r.failure.gate)} (${esc(r.failure.reason)}): ${esc(r.failure.message)}</span>`;
  return esc(r.message || "");
}
// A row's cells. role="cell" (and "row" on the tr): the overview's rows are
// grids, not table rows, for speed (app.css); the roles keep it a table to
// assistive technology in every browser.
function cells(r) {
  return `<td role="cell"><a href="#/plan/${encodeURIComponent(r.namespace)}/${encodeURIComponent(r.name)}">${esc(r.namespace)}/<b>${esc(r.name)}</b></a></td>` +
    `<td role="cell" class="state">${esc(r.phase)}<div class="st">${esc(r.attentionText)}</div></td>` +
    `<td role="cell">${stepsBar(r)}</td><td role="cell">${weightText(r)}</td><td role="cell">${revisions(r)}</td><td role="cell">${gates(r)}</td>` +
    `<td role="cell" data-since="${esc(r.stepStartedAt || "")}">${since(r.stepStartedAt)}</td><td role="cell" class="msg">${message(r)}</td>`;
}

// --- the overview ---------------------------------------------------------
const rows = new Map(); // key -> {r, json, tr}
let pending = [], scheduled = false, order = [];
function enqueue(msg) {
  if (window.rpStats.firstMessage === undefined) window.rpStats.firstMessage = performance.now();
  pending.push(msg);
  if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
}
function flush() {
  const t0 = performance.now();
  scheduled = false;
  const msgs = pending; pending = [];
  let reorder = false;
  const announce = [];
  for (const m of msgs) {
    setNow(m.now); showErrors(m.errors);
    if (m.reset && rows.size === 0) { firstDraw(m.upsert); continue; }
    if (m.reset) {
      const keep = new Set(m.upsert.map((r) => r.key));
      for (const k of [...rows.keys()]) if (!keep.has(k)) { rows.get(k).tr.remove(); rows.delete(k); reorder = true; }
    }
    for (const k of m.delete) { const e = rows.get(k); if (e) { e.tr.remove(); rows.delete(k); reorder = true; } }
    for (const r of m.upsert) {
      const json = JSON.stringify(r);
      let e = rows.get(r.key);
      if (e && (e.json ?? JSON.stringify(e.r)) === json) continue;
      if (!e) { e = {tr: document.createElement("tr")}; e.tr.dataset.key = r.key; e.tr.setAttribute("role", "row"); rows.set(r.key, e); reorder = true; }
      else {
        if (e.r.attention !== r.attention) reorder = true;
        if (e.r.phase !== r.phase && !m.reset) announce.push(`${r.key}: ${e.r.phase} → ${r.phase}`);
      }
      e.r = r; e.json = json;
      e.tr.className = "a-" + r.attention;
      // A keyboard user on this row's link keeps it: the new cells replace
      // the focused element, and focus would fall back to the page.
      const refocus = e.tr.contains(document.activeElement);
      e.tr.innerHTML = cells(r);
      e.tr.hidden = !matches(r);
      if (refocus) e.tr.querySelector("a[href]")?.focus();
    }
  }
  if (reorder) sortRows();
  counts();
  if (announce.length) $("live").textContent = announce.slice(-3).join("; ");
  const st = window.rpStats;
  st.renders++;
  st.lastRender = performance.now();
  st.lastFlushMs = st.lastRender - t0;
  st.maxFlushMs = Math.max(st.maxFlushMs, st.lastFlushMs);
  if (st.firstRender === null && msgs.some((m) => m.reset)) {
    st.firstRender = performance.now();
    st.firstDrawMs = st.lastFlushMs;
    // The frame after next: the rows are laid out and painted.
    requestAnimationFrame(() => requestAnimationFrame(() => { st.firstPaint = performance.now(); }));
  }
}
// The first snapshot: one string, parsed once (1,000 rows in one innerHTML is
// several times faster than 1,000 rows built one by one).
function firstDraw(list) {
  const byRank = (a, b) => (RANK[a.attention] - RANK[b.attention]) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  list = list.slice().sort(byRank);
  $("rows").innerHTML = list.map((r) => `<tr role="row" data-key="${esc(r.key)}" class="a-${r.attention}"${matches(r) ? "" : " hidden"}>${cells(r)}</tr>`).join("");
  const trs = $("rows").children;
  // json (for the diff) is computed when the row first changes.
  list.forEach((r, k) => rows.set(r.key, {r, json: null, tr: trs[k]}));
  order = list.map((r) => r.key);
}
function sortRows() {
  const keys = [...rows.keys()].sort((a, b) => (RANK[rows.get(a).r.attention] - RANK[rows.get(b).r.attention]) || (a < b ? -1 : a > b ? 1 : 0));
  if (keys.length === order.length && keys.every((k, i) => k === order[i])) return;
  const frag = document.createDocumentFragment();
  for (const k of keys) frag.appendChild(rows.get(k).tr);
  $("rows").appendChild(frag);
  order = keys;
}
function counts() {
  let f = 0, m = 0, s = 0;
  for (const e of rows.values()) e.r.attention === "failing" ? f++ : e.r.attention === "moving" ? m++ : s++;
  $("counts").textContent = `(${rows.size}: ${f} failing, ${m} in progress, ${s} healthy)`;
  $("empty").hidden = rows.size > 0;
}
function matches(r) {
  const q = $("filter").value.trim().toLowerCase();
  return !q || r.key.toLowerCase().includes(q) || r.phase.toLowerCase().includes(q) || r.attentionText.includes(q);
}
$("filter").addEventListener("input", () => { for (const e of rows.values()) e.tr.hidden = !matches(e.r); });
// Time in step ticks every second. Writes only (reading layout between writes
// would lay the table out once per row), and only where the text changed.
setInterval(() => {
  if ($("overview").hidden) return;
  for (const td of document.querySelectorAll("#rows [data-since]")) {
    if (!td.dataset.since) continue;
    const t = since(td.dataset.since);
    if (td.textContent !== t) td.textContent = t;
  }
}, 1000);

function connect(url, onMsg) {
  const es = new EventSource(url);
  es.onopen = () => { $("conn").textContent = "live"; };
  es.onerror = () => { $("conn").textContent = "reconnecting…"; };
  es.onmessage = (ev) => onMsg(JSON.parse(ev.data));
  return es;
}
connect("/api/stream", enqueue);

// --- the plan page --------------------------------------------------------
let planStream = null, current = null;
function route() {
  const m = location.hash.match(/^#\/plan\/([^/]+)\/([^/]+)$/);
  if (planStream) { planStream.close(); planStream = null; }
  if (!m) { $("plan").hidden = true; $("overview").hidden = false; current = null; document.title = "ReleasePlans"; return; }
  const [ns, name] = [decodeURIComponent(m[1]), decodeURIComponent(m[2])];
  current = {ns, name};
  $("overview").hidden = true; $("plan").hidden = false;
  $("plan").innerHTML = `<p>Loading ${esc(ns)}/${esc(name)}…</p>`;
  document.title = `${name} · ReleasePlans`;
  planStream = connect(`/api/plans/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/stream`, drawPlan);
}
window.addEventListener("hashchange", route);

function chart(points) {
  const vals = points.map((p) => parseFloat(p.value)).filter((v) => !isNaN(v));
  if (vals.length < 2) return `<span class="st">${vals.length} value${vals.length === 1 ? "" : "s"} so far</span>`;
  const lo = Math.min(...vals), hi = Math.max(...vals), span = hi - lo || 1;
  const pts = vals.map((v, i) => `${(i * 240 / (vals.length - 1)).toFixed(1)},${(44 - (v - lo) * 40 / span).toFixed(1)}`).join(" ");
  return `<svg class="chart" viewBox="0 0 240 48" role="img" aria-label="values from ${lo} to ${hi}"><polyline points="${pts}"/></svg> <span class="st">${lo} – ${hi}</span>`;
}
function table(head, body) {
  return `<table><thead><tr>${head.map((h) => `<th scope="col">${h}</th>`).join("")}</tr></thead><tbody>${body.join("") || `<tr><td colspan="${head.length}">none</td></tr>`}</tbody></table>`;
}
let lastNotice = "";
function drawPlan(msg) {
  setNow(msg.now); showErrors(msg.errors);
  const focused = document.activeElement && document.activeElement.id;
  const d = msg.detail;
  if (!d) { $("plan").innerHTML = `<p><a href="#/">← all plans</a></p><p role="alert">This plan does not exist (or was deleted).</p>`; return; }
  const r = d.plan;
  // One button per request of the operator, in the server's order.
  const buttons = (r.actions || []).map(({word: w, title, whyNot: why}) => {
    return `<button id="act-${esc(w)}" data-action="${esc(w)}" data-title="${esc(title)}" ${why ? `disabled title="${esc(why)}"` : `title="${esc(title)}"`}>${esc(w.replace("-", " "))}</button>`;
  }).join("");
  const timeline = r.steps.map((s, k) => {
    const st = stepState(r, k);
    const note = {cur: "current, " + since(r.stepStartedAt), done: "done", fail: "failed here", todo: ""}[st];
    return `<li class="${st}">${k + 1}. ${s.kind === "weight" ? "weight " : ""}${esc(s.label)} <span class="st">${note}</span></li>`;
  }).join("");
  const autoText = (a) => a ? ` · autoscaled by ${esc(a.hpa ? "hpa/" + a.hpa : "componentscale/" + a.scale)}${a.message ? ": " + esc(a.message) : ""}` : "";
  const comps = r.components.map((c) => `<h4>${esc(c.name)} <span class="st">${c.replicas} replicas${autoText(c.autoscaling)}</span></h4>` + table(["Deployment", "hash", "ready / wanted", "role", "images", "config read"],
    (c.revisions || []).map((v) => `<tr><td class="mono">${esc(v.deployment)}</td><td class="mono">${esc(v.hash)}</td><td>${v.ready}/${v.replicas}</td><td>${esc(v.role)}</td><td class="mono">${esc(v.images.join(", "))}</td><td class="mono">${esc((v.config || []).join(", ") || "-")}</td></tr>`))).join("");
  const gateRows = r.gates.map((g) => `<tr><td>${esc(g.name)}</td><td class="g-${esc(g.verdict)}">${esc(g.verdict)}</td><td>${esc(g.value ?? "-")}</td><td>${g.failures}</td><td>${chart(d.gateSeries[g.name] || [])}</td></tr>`);
  // An analysis gate's last judgement: the score, then each metric judged.
  const num = (x, f) => x == null ? "-" : f(x);
  const analyses = r.gates.filter((g) => g.analysis).map((g) => `<h4 class="analysis">${esc(g.name)} <span class="st">score ${Math.round(g.analysis.score)} · ${esc(g.analysis.outcome)}${g.analysis.comparedWith ? ` · against ${esc(g.analysis.comparedWith)}` : ""}</span></h4>` +
    table(["metric", "verdict", `new / ${(g.analysis.comparedWith || "").endsWith("-baseline") ? "baseline" : "stable"} samples`, "change", "p-value", "shift interval"], (g.analysis.metrics || []).map((m) =>
      `<tr><td>${esc(m.name)}</td><td class="g-${esc(m.verdict)}">${esc(m.verdict)}</td><td>${m.canarySamples} / ${m.baselineSamples}</td>` +
      `<td>${num(m.effect, (e) => (e >= 0 ? "+" : "") + (e * 100).toFixed(1) + "%")}</td><td>${num(m.pValue, (p) => p.toExponential(2))}</td>` +
      `<td>${m.interval && m.interval.length === 2 ? esc(m.interval[0].toPrecision(3) + " … " + m.interval[1].toPrecision(3)) : "-"}</td></tr>`))).join("");
  const hist = d.history.items.slice().reverse().map((h) => `<tr><td>${h.number}</td><td class="mono">${esc(h.revision)}</td><td class="${h.outcome === "RolledBack" ? "fail" : ""}">${esc(h.outcome)}</td><td>${since(h.startedAt)} ago</td><td>${dur(h.startedAt, h.finishedAt)}</td><td>${esc(h.reason || "")}</td><td class="mono">${esc((h.config || []).join(", ") || "-")}</td></tr>`);
  if (d.history.inProgress) { const p = d.history.inProgress; hist.unshift(`<tr><td>${p.number}</td><td class="mono">${esc(p.revision)}</td><td>${esc(p.phase)} (in progress)</td><td>${since(p.startedAt)} ago</td><td>-</td><td></td><td></td></tr>`); }
  const events = d.events.map((e) => `<tr><td class="${e.type === "Warning" ? "fail" : ""}">${esc(e.type)}</td><td>${esc(e.reason)}</td><td>${esc(e.message)}</td><td>${e.count}</td><td>${since(e.last)} ago</td></tr>`);
  const conds = d.conditions.map((c) => `<tr><td>${esc(c.type)}</td><td>${esc(c.status)}</td><td>${esc(c.reason)}</td><td>${esc(c.message)}</td></tr>`);
  $("plan").innerHTML = `<p><a href="#/">← all plans</a></p>
<h2 class="a-${r.attention}">${esc(r.namespace)}/${esc(r.name)} <span class="state">${esc(r.phase)}</span> <span class="st">${esc(r.attentionText)} · ${esc(r.step.text)} · ${weightText(r, "weight ")} · stable ${esc(r.stableRevision || "-")} · current ${esc(r.currentRevision || "-")}</span></h2>
<p id="plan-message" class="msg">${message(r)}</p>
<div class="actions" role="group" aria-label="actions">${buttons}</div>
<div id="notice" role="status">${lastNotice}</div>
<h3>Steps</h3><ol class="timeline">${timeline || `<li>${r.step.text === "no steps" ? "no steps: straight to 100%" : esc(r.step.text)}</li>`}</ol>
<h3>Components</h3>${comps}
<h3>Gates of this step</h3>${table(["gate", "verdict", "value", "failures", "values seen"], gateRows)}${analyses}
<h3>Rollouts</h3>${table(["#", "revision", "outcome", "started", "took", "reason", "config"], hist)}
<h3>Events</h3>${table(["type", "reason", "message", "count", "last"], events)}
<h3>Conditions</h3>${table(["type", "status", "reason", "message"], conds)}`;
  if (focused && $(focused)) $(focused).focus();
}
$("plan").addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b || !current) return;
  const w = b.dataset.action, {ns, name} = current;
  $("confirm-text").textContent = `${b.dataset.title}, on ${ns}/${name}?`;
  const dlg = $("confirm");
  dlg.returnValue = "";
  dlg.onclose = () => { if (dlg.returnValue === "ok") act(ns, name, w); };
  dlg.showModal();
  $("confirm-no").focus();
});
async function act(ns, name, w) {
  let text, err = false;
  try {
    const res = await fetch(`/api/plans/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/actions/${w}`, {method: "POST", headers: {"x-releaseplan-token": token}});
    const body = await res.json();
    text = body.message; err = !res.ok;
  } catch (e) { text = "the dashboard did not answer: " + e; err = true; }
  lastNotice = `<p class="notice${err ? " err" : ""}" ${err ? 'role="alert"' : ""}>${err ? "Refused: " : ""}${esc(text)}</p>`;
  if ($("notice")) $("notice").innerHTML = lastNotice;
}
window.addEventListener("hashchange", () => { lastNotice = ""; });
route();
