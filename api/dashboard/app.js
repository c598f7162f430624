// kiln dashboard: polls /health/detailed and /stats every 2 seconds and draws them.
// Every value is set with textContent: nothing from the server is parsed as HTML.
"use strict";

const REFRESH_MS = 2000;
const WINDOW_MS = 60 * 1000;   // percentiles and rate are computed over this window
const SPARK_MS = 120 * 1000;   // the chart shows this much history
const KEY_STORE = "kiln.apiKey";

let snaps = [];              // {t, total, latency} snapshots, oldest first
const $ = (id) => document.getElementById(id);

// A key may arrive as #key=... (handy for scripts); it is stored, then removed from the URL.
function takeKeyFromHash() {
  const m = location.hash.match(/^#key=(.+)$/);
  if (m) {
    localStorage.setItem(KEY_STORE, decodeURIComponent(m[1]));
    window.history.replaceState(null, "", location.pathname + location.search);
  }
}

function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }

async function getJSON(path) {
  const headers = {};
  if (apiKey()) headers["X-API-Key"] = apiKey();
  const resp = await fetch(path, { headers, cache: "no-store" });
  if (resp.status === 401) throw new Error("unauthorized");
  if (!resp.ok) throw new Error(path + " answered " + resp.status);
  return resp.json();
}

function setText(id, v) { $(id).textContent = v; }

function fmtSeconds(s) {
  if (s === null || s === undefined || !isFinite(s)) return "–";
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + " ms";
  return s.toFixed(s < 10 ? 2 : 1) + " s";
}

function fmtBytes(n) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  if (n < 1 << 20) return (n / 1024).toFixed(0) + " KiB";
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(0) + " MiB";
  return (n / (1 << 30)).toFixed(2) + " GiB";
}

function fmtAge(s) {
  if (s < 60) return s.toFixed(0) + " s";
  if (s < 3600) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function sum(obj) { return Object.values(obj || {}).reduce((a, b) => a + b, 0); }

// quantile estimates q from cumulative bucket counts (last entry is the total), the
// way Prometheus's histogram_quantile does: linear interpolation inside the bucket.
function quantile(q, bounds, counts) {
  const total = counts[counts.length - 1];
  if (!total) return null;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i] >= rank) {
      const lo = i === 0 ? 0 : bounds[i - 1];
      const below = i === 0 ? 0 : counts[i - 1];
      const inBucket = counts[i] - below;
      return inBucket ? lo + (bounds[i] - lo) * ((rank - below) / inBucket) : bounds[i];
    }
  }
  return bounds[bounds.length - 1]; // in the +Inf bucket: at least the largest bound
}

function diff(now, then) { return now.map((v, i) => v - (then ? then[i] : 0)); }

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c.text;
    if (c.cls) td.className = c.cls;
    tr.appendChild(td);
  }
  return tr;
}

function fillTable(id, rows, cols, empty) {
  const body = $(id);
  body.replaceChildren(...(rows.length ? rows : [row([{ text: empty, cls: "muted" }])]));
  if (!rows.length) body.firstChild.firstChild.colSpan = cols;
}

function showHealth(h) {
  const p = h.pool || {};
  setText("pool-target", p.target);
  setText("pool-ready", p.ready);
  setText("pool-warming", p.warming);
  setText("pool-in-use", p.in_use);
  setText("pool-waiting", p.waiting);
  const status = $("status");
  status.textContent = h.status;
  status.className = "pill " + h.status;
  fillTable("pools", (h.pools || []).map((q) => row([
    { text: q.name, cls: "mono" }, { text: q.image || "", cls: "mono" },
    { text: (q.languages || ["not known yet"]).join(" ") },
    { text: q.target, cls: "num" }, { text: q.ready, cls: "num" }, { text: q.warming, cls: "num" },
    { text: q.in_use, cls: "num" }, { text: q.waiting, cls: "num" },
  ])), 8, "no pool");
  fillTable("containers", (p.containers || []).map((c) => row([
    { text: c.id, cls: "mono" }, { text: c.state }, { text: fmtAge(c.age_seconds) },
  ])), 3, "no warm container");
  setText("pool-totals", `created ${p.created} · warm-up failures ${p.failed} · removed ${p.removed}` +
    ` · leaked ${p.leaked} · died in pool ${p.died}` + (h.auth && !h.auth.enabled ? " · auth is OFF" : ""));
  const err = $("pool-error");
  err.hidden = !p.last_error && (!h.docker || h.docker.ok);
  err.textContent = p.last_error ? "last warm-up error: " + p.last_error
    : (h.docker && !h.docker.ok ? "docker: " + h.docker.error : "");
}

// showLive draws the live sessions: how many hold a sandbox now, the memory they hold,
// where their calls ran, and why live sandboxes ended. A kiln with them off says so.
function showLive(l) {
  const on = !!(l && l.enabled);
  $("live-off").hidden = on;
  $("live-on").hidden = !on;
  $("live-ended").hidden = !on;
  if (!on) return;
  setText("live-idle", l.idle);
  setText("live-busy", l.busy);
  setText("live-max", l.max);
  setText("live-memory", fmtBytes(l.memory_bytes));
  const calls = l.calls || {};
  setText("live-reused", calls.reused || 0);
  setText("live-resumed", calls.resumed || 0);
  setText("live-new", calls.new || 0);
  const ended = Object.entries(l.ended || {}).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  setText("live-ended", "ended since start: " +
    (ended.length ? ended.map(([reason, n]) => `${reason} ${n}`).join(" · ") : "none"));
}

function showStats(s) {
  const now = Date.parse(s.time);
  const total = sum(s.executions);
  snaps.push({ t: now, total, latency: s.latency });
  snaps = snaps.filter((x) => now - x.t <= SPARK_MS);

  setText("exec-total", total);
  const prev = snaps.length > 1 ? snaps[snaps.length - 2] : null;
  setText("exec-rate", prev ? ((total - prev.total) / ((now - prev.t) / 1000)).toFixed(2) : "–");

  // Percentiles over the window when it saw executions, else since start (labelled so).
  const base = snaps.find((x) => now - x.t <= WINDOW_MS);
  const since = (phase) => s.latency[phase] || [];
  let pick = since, label = "since start";
  if (base && base.t < now) {
    const windowed = (phase) => diff(since(phase), base.latency[phase]);
    const w = windowed("total");
    if (w.length && w[w.length - 1] > 0) { pick = windowed; label = "last minute"; }
  }
  setText("lat-window", label);
  setText("lat-p50", fmtSeconds(quantile(0.5, s.buckets, pick("total"))));
  setText("lat-p95", fmtSeconds(quantile(0.95, s.buckets, pick("total"))));
  setText("lat-p99", fmtSeconds(quantile(0.99, s.buckets, pick("total"))));
  setText("lat-queue-p95", fmtSeconds(quantile(0.95, s.buckets, pick("queue"))));
  setText("lat-exec-p95", fmtSeconds(quantile(0.95, s.buckets, pick("execution"))));

  const statuses = Object.entries(s.executions).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  fillTable("statuses", statuses.map(([k, n]) => row([
    { text: k, cls: k === "ok" ? "status-ok" : "status-bad" }, { text: String(n), cls: "num" },
  ])), 2, "no execution yet");

  fillTable("failures", (s.recent_failures || []).slice(0, 20).map((f) => row([
    { text: new Date(f.time).toLocaleTimeString() }, { text: f.status, cls: "status-bad" },
    { text: f.summary }, { text: fmtSeconds(f.duration_ms / 1000), cls: "num" }, { text: f.sandbox || "–", cls: "mono" },
  ])), 5, "none");
  drawSpark(now);
}

function drawSpark(now) {
  const svg = $("spark");
  const pts = [];
  for (let i = 1; i < snaps.length; i++) {
    const a = snaps[i - 1], b = snaps[i];
    pts.push({ t: b.t, r: (b.total - a.total) / Math.max((b.t - a.t) / 1000, 0.001) });
  }
  const top = Math.max(1, ...pts.map((p) => p.r));
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.map((p) =>
    `${(600 * (1 - (now - p.t) / SPARK_MS)).toFixed(1)},${(78 - 74 * p.r / top).toFixed(1)}`).join(" "));
  const base = document.createElementNS("http://www.w3.org/2000/svg", "line");
  for (const [k, v] of Object.entries({ x1: 0, y1: 78, x2: 600, y2: 78 })) base.setAttribute(k, v);
  svg.replaceChildren(base, line);
  svg.setAttribute("aria-label", `executions per second, peak ${top.toFixed(2)}`);
}

function message(text) {
  const m = $("message");
  m.hidden = !text;
  m.textContent = text || "";
}

async function refresh() {
  try {
    const [h, s] = await Promise.all([getJSON("../health/detailed"), getJSON("../stats")]);
    showHealth(h);
    showLive(h.live);
    showStats(s);
    message("");
    setText("updated", "updated " + new Date().toLocaleTimeString());
  } catch (e) {
    if (e.message === "unauthorized") {
      message(apiKey() ? "The saved API key was refused. Paste a valid key above." :
        "Authentication is on: paste an API key above to see live data.");
    } else {
      message("Cannot reach kiln: " + e.message);
    }
    $("status").textContent = "no data";
    $("status").className = "pill error";
  }
}

function init() {
  takeKeyFromHash();
  $("keyform").addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem(KEY_STORE, $("key").value.trim());
    $("key").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => { localStorage.removeItem(KEY_STORE); refresh(); });
  refresh();
  setInterval(refresh, REFRESH_MS);
}

init();
