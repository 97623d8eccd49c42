// The Optio console's page: everything it shows comes from /api/v1/ (docs/console-openapi.yaml),
// polled every second. Data is written with textContent only, never as HTML.
"use strict";

const state = { csrf: null, mayChange: false, devices: [], sort: { key: "id", up: true }, pending: null, timer: null };

const $ = (id) => document.getElementById(id);
// A form's control by name (not `form.NAME`: a control named `id` would be the form's own id).
const field = (form, name) => form.elements.namedItem(name);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (method !== "GET" && state.csrf) init.headers["x-csrf-token"] = state.csrf;
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (response.status === 401 && path !== "/api/v1/login") showLogin();
  if (!response.ok) {
    const error = new Error((data && data.error) || response.statusText);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}

function showLogin() {
  state.csrf = null;
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  $("app").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
}

function showApp(session) {
  state.csrf = session.csrf_token;
  state.mayChange = session.may_change;
  $("who").textContent = session.entity + " (" + session.cap + ")";
  $("login").hidden = true;
  $("logout").hidden = false;
  $("app").hidden = false;
  refresh();
  if (!state.timer) state.timer = setInterval(refresh, 1000);
}

async function refresh() {
  try {
    const [health, map, devices, pools, servers] = await Promise.all([
      api("GET", "/api/v1/health"), api("GET", "/api/v1/map"),
      api("GET", "/api/v1/devices"), api("GET", "/api/v1/pools"), api("GET", "/api/v1/servers"),
    ]);
    renderOverview(health, map);
    renderServers(servers.servers, map.epoch);
    state.devices = devices.devices;
    renderDevices();
    renderPools(pools.pools);
    $("footer").textContent = "map " + map.source + " · updated " + new Date().toLocaleTimeString();
  } catch (error) {
    if (error.status !== 401) $("footer").textContent = "cannot refresh: " + error.message;
  }
}

function renderOverview(health, map) {
  const level = $("health-level");
  level.textContent = health.health.level;
  level.className = "value " + health.health.level;
  $("epoch").textContent = map.epoch;
  $("device-counts").textContent = map.devices_up + " / " + map.devices_in + " / " + map.devices;
  const share = map.capacity_bytes > 0 ? map.used_bytes / map.capacity_bytes : 0;
  $("capacity").textContent = bytes(map.used_bytes) + " of " + bytes(map.capacity_bytes);
  $("capacity-bar").style.width = Math.min(100, share * 100).toFixed(1) + "%";
  const reasons = $("health-reasons");
  reasons.replaceChildren();
  for (const problem of health.health.problems) reasons.append(el("li", problem));
  for (const note of health.health.notes) reasons.append(el("li", "(note) " + note));
  const pgs = health.health;
  reasons.append(el("li", "placement groups: " + pgs.pgs_healthy + " healthy, " + pgs.pgs_degraded +
    " degraded, " + pgs.pgs_recovering + " recovering, " + pgs.pgs_inactive + " inactive"));
}

function eta(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  return seconds < 120 ? seconds + " s" : Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
}

// Each server's progress moving data to where the map's epoch places it (`optio status`).
function renderServers(servers, epoch) {
  const body = $("servers").tBodies[0];
  body.replaceChildren();
  for (const s of servers) {
    const tr = el("tr");
    tr.append(el("td", s.name + " " + s.addr));
    if (s.error) {
      tr.append(el("td", "-"), el("td", "unreachable", "down"), el("td", "-"), el("td", "-"), el("td", "-"), el("td", s.error));
      body.append(tr);
      continue;
    }
    const m = s.migration;
    const planned = Math.max(m.copies_planned, m.copies_done);
    const share = planned > 0 ? m.copies_done / planned : 1;
    const cell = el("td");
    const bar = el("div", null, "bar");
    const fill = el("div");
    fill.style.width = (share * 100).toFixed(1) + "%";
    bar.append(fill);
    cell.append(bar, el("small", m.copies_done + " / " + planned + " copies (" + (share * 100).toFixed(0) + "%)"));
    tr.append(el("td", s.epoch), el("td", m.phase), cell, el("td", bytes(m.rate_bytes_per_sec) + "/s"),
      el("td", m.phase === "done" ? "-" : eta(m.eta_seconds)),
      el("td", s.epoch < epoch ? "behind the map's epoch " + epoch : (m.last_error || "")));
    body.append(tr);
  }
}

function sortValue(d, key) {
  const s = d.status;
  switch (key) {
    case "state": return (d.up ? 0 : 2) + (d.in ? 0 : 1);
    case "objects": return s ? s.objects : -1;
    case "used": return s && s.metrics.capacity_bytes ? s.metrics.used_bytes / s.metrics.capacity_bytes : -1;
    case "latency": return s ? s.metrics.latency_us : -1;
    default: return d[key] === null || d[key] === undefined ? "" : d[key];
  }
}

function renderDevices() {
  const { key, up } = state.sort;
  const rows = state.devices.slice().sort((a, b) => {
    const x = sortValue(a, key), y = sortValue(b, key);
    return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
  });
  const body = $("devices").tBodies[0];
  body.replaceChildren();
  for (const d of rows) {
    const tr = el("tr");
    const stateText = (d.up ? "up" : "down") + (d.in ? "" : ", out");
    tr.append(el("td", d.id), el("td", d.name), el("td", d.zone || "-"), el("td", d.host || "-"),
      el("td", d.unreachable ? stateText + " (not answering)" : stateText, d.up && d.in && !d.unreachable ? "" : "down"),
      el("td", d.weight.toFixed(3)), el("td", d.pgs),
      el("td", d.status ? d.status.objects : "-"));
    const usage = el("td");
    if (d.status) {
      const m = d.status.metrics;
      const share = m.capacity_bytes ? m.used_bytes / m.capacity_bytes : 0;
      const bar = el("div", null, share > 0.85 ? "bar high" : "bar");
      const fill = el("div");
      fill.style.width = Math.min(100, share * 100).toFixed(1) + "%";
      bar.append(fill);
      bar.title = bytes(m.used_bytes) + " of " + bytes(m.capacity_bytes);
      usage.append(bar, el("small", (share * 100).toFixed(1) + "% of " + bytes(m.capacity_bytes)));
    } else usage.textContent = "-";
    tr.append(usage, el("td", d.status ? (d.status.metrics.latency_us / 1000).toFixed(2) + " ms" : "-"));
    // A state change starts as a what-if: what it moves is shown before it can be committed.
    const action = el("td");
    const button = el("button", d.in ? "out?" : "in?", "small");
    button.title = "What marking " + d.name + (d.in ? " out" : " in") + " would move";
    button.addEventListener("click", () => askWhatIf(d.in ? "out" : "in", d.id));
    action.append(button);
    tr.append(action);
    body.append(tr);
  }
  for (const th of $("devices").tHead.querySelectorAll("th")) {
    th.classList.toggle("sorted", th.dataset.key === key);
    th.classList.toggle("up", th.dataset.key === key && up);
  }
  const select = document.querySelector("#whatif-form select[name=device]");
  const chosen = select.value;
  if (select.options.length !== state.devices.length) {
    select.replaceChildren();
    for (const d of state.devices) {
      const option = el("option", d.name + " (" + (d.up ? "up" : "down") + (d.in ? "" : ", out") + ")");
      option.value = String(d.id);
      select.append(option);
    }
    if (chosen) select.value = chosen;
  }
}

function renderPools(pools) {
  const body = $("pools").tBodies[0];
  body.replaceChildren();
  for (const p of pools) {
    const b = p.balance || {};
    const shape = p.erasure ? "EC " + p.erasure.k + "+" + p.erasure.m : "size " + p.size + " (min " + p.min_size + ")";
    body.append(rowOf([p.name, p.engine_detail, p.pg_num || "-", shape,
      b.max_over_mean !== undefined ? b.max_over_mean.toFixed(3) : "-",
      b.stdev !== undefined ? b.stdev.toFixed(2) : "-"]));
  }
}

function rowOf(cells) {
  const tr = el("tr");
  for (const c of cells) tr.append(el("td", c));
  return tr;
}

function changeFromForm(form) {
  const kind = field(form, "kind").value;
  const device = field(form, "device").value;
  switch (kind) {
    case "out": return { kind: "set_state", device, in: false };
    case "in": return { kind: "set_state", device, in: true };
    case "reweight": return { kind: "reweight", device, weight: Number(field(form, "weight").value) };
    case "remove": return { kind: "remove_device", device };
    default: return {
      kind: "add_device", id: Number(field(form, "id").value), at: field(form, "at").value,
      capacity_bytes: Math.round(Number(field(form, "capacity").value) * 1073741824),
      weight: Number(field(form, "weight").value), allow_unreachable: true,
    };
  }
}

function showFields() {
  const kind = document.querySelector("#whatif-form select[name=kind]").value;
  for (const e of document.querySelectorAll(".for-device")) e.hidden = kind === "add";
  for (const e of document.querySelectorAll(".for-weight")) e.hidden = !(kind === "reweight" || kind === "add");
  for (const e of document.querySelectorAll(".for-add")) e.hidden = kind !== "add";
}

function askWhatIf(kind, device) {
  const form = $("whatif-form");
  field(form, "kind").value = kind;
  field(form, "device").value = String(device);
  showFields();
  form.requestSubmit();
  $("whatif-section").scrollIntoView({ behavior: "smooth" });
}

async function whatIf(event) {
  event.preventDefault();
  $("whatif-error").textContent = "";
  $("commit-result").textContent = "";
  const change = changeFromForm(event.target);
  try {
    const report = await api("POST", "/api/v1/whatif", { change });
    state.pending = { change, epoch: report.epoch_before };
    renderWhatIf(report);
  } catch (error) {
    $("whatif-result").hidden = true;
    $("whatif-error").textContent = error.message;
  }
}

function renderWhatIf(report) {
  $("whatif-result").hidden = false;
  const moves = Array.isArray(report.moves) ? report.moves : [];
  const parts = moves.map((m) => "pool '" + m.pool + "': " + m.moved + " of " + m.copies + " " +
    (m.unit === "pg_copies" ? "PG copies" : "object copies (simulated)") + " move" +
    (m.moved_over_minimum !== null && m.moved_over_minimum !== undefined ? " (" + m.moved_over_minimum.toFixed(2) + "× the minimum)" : ""));
  if (report.below_min_size) parts.push("WARNING: leaves data below its pool's min_size");
  $("whatif-summary").textContent = "At epoch " + report.epoch_before + ": " + parts.join("; ");
  const body = $("whatif-devices").tBodies[0];
  body.replaceChildren();
  const maxGain = Math.max(1, ...report.devices.map((d) => Math.abs(d.gained)));
  for (const d of report.devices) {
    if (d.gained === 0 && d.pgs_before === d.pgs_after) continue;
    const tr = el("tr");
    tr.append(el("td", d.name), el("td", d.pgs_before), el("td", d.pgs_after),
      el("td", (d.gained > 0 ? "+" : "") + d.gained, d.gained > 0 ? "gain" : d.gained < 0 ? "loss" : ""));
    const cell = el("td");
    const bar = el("div", null, "bar");
    const fill = el("div");
    fill.style.width = (Math.abs(d.gained) / maxGain * 100).toFixed(1) + "%";
    bar.append(fill);
    cell.append(bar);
    tr.append(cell);
    body.append(tr);
  }
  $("commit").hidden = !state.mayChange;
}

async function commit() {
  if (!state.pending) return;
  if (!window.confirm("Store this change in the map (epoch " + state.pending.epoch + " → " + (state.pending.epoch + 1) + ")?")) return;
  try {
    const result = await api("POST", "/api/v1/map/edit", { expected_epoch: state.pending.epoch, dry_run: false, change: state.pending.change });
    $("commit-result").textContent = "stored epoch " + result.epoch + "; the servers rebalance now";
    state.pending = null;
    $("commit").hidden = true;
    refresh();
  } catch (error) {
    $("commit-result").textContent = error.status === 409
      ? "the map changed meanwhile (now epoch " + (error.data && error.data.epoch) + "): nothing was stored; ask again"
      : "refused: " + error.message;
  }
}

async function login(event) {
  event.preventDefault();
  const form = event.target;
  $("login-error").textContent = "";
  try {
    const session = await api("POST", "/api/v1/login", { entity: field(form, "entity").value, key: field(form, "key").value });
    field(form, "key").value = "";
    showApp(session);
  } catch (error) {
    $("login-error").textContent = error.message;
  }
}

async function logout() {
  try { await api("POST", "/api/v1/logout"); } catch (_) { /* already gone */ }
  showLogin();
}

document.addEventListener("DOMContentLoaded", async () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("whatif-form").addEventListener("submit", whatIf);
  document.querySelector("#whatif-form select[name=kind]").addEventListener("change", showFields);
  $("commit").addEventListener("click", commit);
  for (const th of $("devices").tHead.querySelectorAll("th")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      state.sort = { key, up: state.sort.key === key ? !state.sort.up : true };
      renderDevices();
    });
  }
  showFields();
  try { showApp(await api("GET", "/api/v1/session")); } catch (_) { showLogin(); }
});
