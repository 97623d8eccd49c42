// The Optio console's page: everything it shows comes from /api/v1/ (docs/console-openapi.yaml),
// polled every second. Data is written with textContent only, never as HTML.
"use strict";

const state = {
  csrf: null, mayChange: false, devices: [], sort: { key: "id", up: true }, pending: null, timer: null,
  // What was last drawn, by section: an answer's text that has not changed is not drawn again.
  drawn: {}, rows: new Map(), order: "", pools: [], filled: false,
  // The devices table shows a page of rows at a time (a 1,000-device map: laying out every
  // row takes the browser longer than the API takes to answer); "all" shows every row.
  page: 0, pageSize: 100,
};
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);
// A form's control by name (not `form.NAME`: a control named `id` would be the form's own id).
const field = (form, name) => form.elements.namedItem(name);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

// An SVG element with its attributes.
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

// A progress bar: `share` 0..1 of it filled.
function bar(share, cls) {
  const b = el("div", null, cls ? "bar " + cls : "bar");
  const fill = el("div");
  fill.style.width = (Math.max(0, Math.min(1, share)) * 100).toFixed(1) + "%";
  b.append(fill);
  return b;
}

function percent(share) {
  return Math.floor(share * 100) + " %";
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
  const text = await response.text();
  let data = null;
  try { data = JSON.parse(text); } catch (_) { data = null; }
  if (response.status === 401 && path !== "/api/v1/login") showLogin();
  if (!response.ok) {
    const error = new Error((data && data.error) || response.statusText);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  if (data && typeof data === "object") Object.defineProperty(data, "text", { value: text });
  return data;
}

// Whether `answer` differs from what was last drawn for `section` (and remembers it).
function changed(section, ...answers) {
  const text = answers.map((a) => a.text).join("\n");
  if (state.drawn[section] === text) return false;
  state.drawn[section] = text;
  return true;
}

function showLogin() {
  state.csrf = null;
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  $("app").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  state.drawn = {};
}

function showApp(session, prefetched) {
  state.csrf = session.csrf_token;
  state.mayChange = session.may_change;
  $("who").textContent = session.entity + " (" + session.cap + ")";
  $("login").hidden = true;
  $("logout").hidden = false;
  $("app").hidden = false;
  refresh(prefetched);
  if (!state.timer) state.timer = setInterval(refresh, 1000);
}

// Every answer a refresh draws, asked at once.
function fetchAll() {
  return Promise.all([
    api("GET", "/api/v1/health"), api("GET", "/api/v1/map"),
    api("GET", "/api/v1/devices"), api("GET", "/api/v1/pools"), api("GET", "/api/v1/servers"),
  ]);
}

async function refresh(prefetched) {
  try {
    const [health, map, devices, pools, servers] = await (prefetched || fetchAll());
    state.membership = map.membership;
    if (changed("overview", health, map)) renderOverview(health, map);
    if (changed("devices", devices)) {
      state.devices = devices.devices;
      renderDevices();
      renderIo(devices.devices);
    }
    if (changed("servers", servers, health, devices)) renderServers(servers.servers, map.epoch, health.health);
    if (changed("pools", pools)) {
      state.pools = pools.pools;
      renderPools(pools.pools);
      renderPlacement();
    }
    $("footer").textContent = "map " + map.source + " · updated " + new Date().toLocaleTimeString();
    if (!state.filled) {
      // From the navigation to every table filled and painted (the next frame, then the end
      // of its tasks): what scripts/bench-console-browser.sh times.
      state.filled = true;
      const mark = () => {
        if (window.performance && performance.mark) performance.mark("optio-console-filled");
        document.body.dataset.filled = "true";
      };
      if (window.requestAnimationFrame) requestAnimationFrame(() => setTimeout(mark, 0));
      else mark();
    }
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
  // Raw: what the pools' files take on the devices; logical: what clients stored (raw over
  // each pool's copy factor, an estimate).
  const space = map.capacity;
  $("capacity-detail").textContent = space && typeof space === "object"
    ? "raw " + bytes(space.raw_used_bytes) + " · logical ≈ " + bytes(Math.round(space.logical_used_bytes))
    : "";
  const reasons = $("health-reasons");
  reasons.replaceChildren();
  for (const problem of health.health.problems) reasons.append(el("li", problem));
  for (const note of health.health.notes) reasons.append(el("li", "(note) " + note));
  const pgs = health.health;
  reasons.append(el("li", "placement groups: " + pgs.pgs_healthy + " healthy, " + pgs.pgs_degraded +
    " degraded, " + pgs.pgs_recovering + " recovering, " + pgs.pgs_inactive + " inactive"));
}

// The cluster's requests and bytes per second now: each server's totals (every device of a
// server carries its server's, besides its own rates), added up over the servers.
function renderIo(devices) {
  const servers = new Map();
  for (const d of devices) {
    const totals = d.server_rates || d.rates;
    if (totals && d.addr) servers.set(d.addr, totals);
  }
  if (servers.size === 0) {
    $("io").textContent = "-";
    $("io-detail").textContent = "measured from the second poll on";
    return;
  }
  let ops = 0, received = 0, sent = 0, weighted = 0, timed = 0;
  for (const r of servers.values()) {
    ops += r.total_per_s;
    received += r.received_bytes_per_s || 0;
    sent += r.sent_bytes_per_s || 0;
    if (r.mean_latency_ms !== null && r.mean_latency_ms !== undefined) {
      weighted += r.mean_latency_ms * r.total_per_s;
      timed += r.total_per_s;
    }
  }
  $("io").textContent = ops.toFixed(ops < 10 ? 1 : 0) + " ops/s";
  $("io-detail").textContent = "read " + bytes(Math.round(sent)) + "/s · written " + bytes(Math.round(received)) + "/s" +
    (timed > 0 ? " · " + (weighted / timed).toFixed(2) + " ms mean" : "");
}

function eta(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  return seconds < 120 ? seconds + " s" : Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
}

// The share of a server's round done: 1 once it is done with the map's epoch.
function migrationShare(s, epoch) {
  const m = s.migration;
  if (m.phase === "done" && s.epoch >= epoch) return 1;
  const planned = Math.max(m.copies_planned, m.copies_done);
  return planned > 0 ? Math.min(m.copies_done / planned, 0.999) : 0;
}

// Scrubbing on a server's devices: the pass under way (its share, rate and ETA), else the
// last pass's findings.
function scrubCell(devices) {
  const cell = el("td", null, "progress-cell");
  const running = devices.filter((d) => d.status.scrubbing);
  if (running.length) {
    const p = running[0].status.scrubbing;
    const share = p.objects_total > 0 ? Math.min(p.objects / p.objects_total, 1) : 0;
    const rate = p.seconds > 0 ? p.objects / p.seconds : 0;
    const left = rate > 0 ? Math.round((p.objects_total - p.objects) / rate) : null;
    cell.append(bar(share, ""), el("small", running[0].name + " " + (p.deep ? "deep" : "light") + " · " +
      p.objects + " / " + p.objects_total + " objects · " + Math.round(rate) + "/s" +
      (p.deep ? " · " + bytes(p.seconds > 0 ? Math.round(p.bytes_read / p.seconds) : 0) + "/s" : "") +
      " · ETA " + eta(left)));
    return cell;
  }
  const last = devices.filter((d) => d.status.scrub).map((d) => d.status.scrub);
  if (!last.length) {
    cell.textContent = "no pass yet";
    return cell;
  }
  const objects = last.reduce((n, r) => n + r.objects, 0);
  const damaged = last.reduce((n, r) => n + r.damaged + r.stale, 0);
  cell.textContent = "last: " + objects + " objects" + (damaged ? ", " + damaged + " damaged or stale" : ", clean");
  return cell;
}

// Each server's progress moving data to where the map's epoch places it (`optio status`), and
// recovery: its devices catching up, the placement groups healthy.
function renderServers(servers, epoch, health) {
  const body = $("servers").tBodies[0];
  const fragment = document.createDocumentFragment();
  let done = 0, planned = 0, settled = 0, answering = 0;
  const byName = servers.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const s of byName) {
    const tr = el("tr");
    const who = el("td", s.name, "server");
    who.append(el("small", s.addr));
    tr.append(who);
    if (s.error) {
      tr.append(el("td", "-"), el("td", "unreachable", "down"), el("td", "-"), el("td", "-"), el("td", "-"), el("td", "-"), el("td", "-"), el("td", s.error));
      fragment.append(tr);
      continue;
    }
    answering++;
    const m = s.migration;
    const share = migrationShare(s, epoch);
    if (share === 1) settled++;
    done += m.copies_done;
    planned += Math.max(m.copies_planned, m.copies_done);
    const cell = el("td", null, "progress-cell");
    cell.append(bar(share, share === 1 ? "done" : ""),
      el("small", m.copies_done + " / " + Math.max(m.copies_planned, m.copies_done) + " copies · " + percent(share)));
    // Recovery: its devices catching up on writes they missed.
    const mine = state.devices.filter((d) => s.devices.includes(d.id) && d.status);
    const catching = mine.filter((d) => d.status.recovering);
    const recovered = mine.reduce((n, d) => n + (d.status.caught_up || 0), 0);
    const recovery = el("td", null, "progress-cell");
    const healthy = mine.length ? (mine.length - catching.length) / mine.length : 1;
    recovery.append(bar(healthy, catching.length ? "" : "done"),
      el("small", catching.length ? catching.map((d) => d.name).join(", ") + " catching up" : "devices serving" + (recovered ? " (" + recovered + " caught up)" : "")));
    tr.append(el("td", s.epoch), el("td", m.phase, m.phase === "done" ? "" : "busy"), cell,
      el("td", bytes(m.rate_bytes_per_sec) + "/s"),
      el("td", share === 1 ? "-" : eta(m.eta_seconds)), recovery, scrubCell(mine),
      el("td", s.epoch < epoch ? "behind the map's epoch " + epoch : (m.last_error || "")));
    fragment.append(tr);
  }
  body.replaceChildren(fragment);
  // The whole cluster: copies moved of those planned; 100 % when every server is done.
  const all = answering > 0 && settled === answering;
  const share = all ? 1 : planned > 0 ? Math.min(done / planned, 0.999) : 0;
  const total = $("rebalancing-total");
  total.dataset.done = String(all);
  $("rebalancing-bar").style.width = (share * 100).toFixed(1) + "%";
  $("rebalancing-bar").parentNode.classList.toggle("done", all);
  $("rebalancing-figures").textContent = answering === 0 ? "no server answers"
    : percent(share) + " — " + done + " of " + planned + " copies; " + settled + " of " + answering +
      " servers done with epoch " + epoch;
  const pgs = health.pgs_healthy + health.pgs_degraded + health.pgs_recovering + health.pgs_inactive;
  const healthy = pgs > 0 ? health.pgs_healthy / pgs : 1;
  $("recovery-total").dataset.done = String(healthy === 1);
  $("recovery-bar").style.width = (healthy * 100).toFixed(1) + "%";
  $("recovery-bar").parentNode.classList.toggle("done", healthy === 1);
  $("recovery-figures").textContent = percent(healthy) + " — " + health.pgs_healthy + " of " + pgs +
    " PGs healthy" + (health.pgs_degraded + health.pgs_recovering + health.pgs_inactive > 0
      ? " (" + health.pgs_degraded + " degraded, " + health.pgs_recovering + " recovering, " + health.pgs_inactive + " inactive)" : "");
}

function sortValue(d, key) {
  const s = d.status;
  switch (key) {
    case "state": return (d.up ? 0 : 2) + (d.in ? 0 : 1);
    case "objects": return s ? s.objects : -1;
    case "used": return s && s.metrics.capacity_bytes ? s.metrics.used_bytes / s.metrics.capacity_bytes : -1;
    case "latency": return s ? s.metrics.latency_us : -1;
    case "ops": return d.rates ? d.rates.total_per_s : -1;
    default: return d[key] === null || d[key] === undefined ? "" : d[key];
  }
}

// A device's row; rows are kept by device and built again only when the device changed.
function deviceRow(d) {
  const key = JSON.stringify(d);
  const kept = state.rows.get(d.id);
  if (kept && kept.key === key) return kept.tr;
  const tr = el("tr");
  const stateText = (d.up ? "up" : "down") + (d.in ? "" : ", out");
  tr.append(el("td", d.id), el("td", d.name), el("td", d.zone || "-"), el("td", d.host || "-"),
    el("td", d.unreachable ? stateText + " (not answering)" : stateText, d.up && d.in && !d.unreachable ? "" : "down"),
    el("td", d.weight.toFixed(3)), el("td", d.pgs),
    el("td", d.status ? d.status.objects : "-"));
  const usage = el("td", null, "progress-cell");
  if (d.status) {
    const m = d.status.metrics;
    const share = m.capacity_bytes ? m.used_bytes / m.capacity_bytes : 0;
    const b = bar(share, share > 0.85 ? "high" : "");
    b.title = bytes(m.used_bytes) + " of " + bytes(m.capacity_bytes);
    usage.append(b, el("small", (share * 100).toFixed(1) + "% of " + bytes(m.capacity_bytes)));
  } else usage.textContent = "-";
  tr.append(usage, el("td", d.status ? (d.status.metrics.latency_us / 1000).toFixed(2) + " ms" : "-"),
    ratesCell(d.rates));
  // A state change starts as a what-if: what it moves is shown before it can be committed.
  const action = el("td");
  const button = el("button", d.in ? "out?" : "in?", "small");
  button.title = "What marking " + d.name + (d.in ? " out" : " in") + " would move";
  button.addEventListener("click", () => askWhatIf(d.in ? "out" : "in", d.id));
  action.append(button);
  tr.append(action);
  state.rows.set(d.id, { key, tr });
  return tr;
}

// A device's own requests per second, with their mean time to answer; a server that does not
// count per device gives its devices its totals, shown with "(server)".
function ratesCell(r) {
  if (!r) return el("td", "-");
  const td = el("td", r.total_per_s.toFixed(1));
  td.className = "rates";
  const server = r.scope === "server";
  if (server) td.append(el("small", " (server)"));
  if (r.mean_latency_ms !== null && r.mean_latency_ms !== undefined) {
    td.append(el("small", r.mean_latency_ms.toFixed(2) + " ms"));
  }
  const ops = Object.entries(r.requests_per_s || {}).filter(([, v]) => v > 0)
    .map(([op, v]) => op + " " + v.toFixed(1) + "/s");
  td.title = (server ? "the server's totals (it does not count per device): " : "this device's requests: ") +
    (ops.length ? ops.join(", ") : "none") + "; errors " + r.errors_per_s.toFixed(1) + "/s; received " +
    bytes(Math.round(r.received_bytes_per_s)) + "/s, sent " + bytes(Math.round(r.sent_bytes_per_s)) + "/s";
  return td;
}

function renderDevices() {
  const { key, up } = state.sort;
  const rows = state.devices.slice().sort((a, b) => {
    const x = sortValue(a, key), y = sortValue(b, key);
    return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
  });
  const body = $("devices").tBodies[0];
  const present = new Set(rows.map((d) => d.id));
  for (const id of state.rows.keys()) if (!present.has(id)) state.rows.delete(id);
  const pages = Math.max(1, Math.ceil(rows.length / state.pageSize));
  state.page = Math.min(state.page, pages - 1);
  const from = state.pageSize === Infinity ? 0 : state.page * state.pageSize;
  const shown = rows.slice(from, from + state.pageSize);
  // One insertion of every row (a DocumentFragment), not one per row.
  const fragment = document.createDocumentFragment();
  for (const d of shown) fragment.append(deviceRow(d));
  body.replaceChildren(fragment);
  $("devices-pager").hidden = rows.length <= 100;
  $("devices-shown").textContent = shown.length === rows.length ? "all " + rows.length + " devices"
    : "devices " + (from + 1) + "–" + (from + shown.length) + " of " + rows.length;
  $("devices-prev").disabled = state.page === 0;
  $("devices-next").disabled = state.page >= pages - 1;
  $("devices-all").textContent = state.pageSize === Infinity ? "by pages" : "show all";
  for (const th of $("devices").tHead.querySelectorAll("th")) {
    th.classList.toggle("sorted", th.dataset.key === key);
    th.classList.toggle("up", th.dataset.key === key && up);
  }
  // The what-if's choice of device: made again only when a device's name or state changed
  // (not with every poll's figures: an open list would close under its user).
  const labels = state.devices.map((d) => d.name + " (" + (d.up ? "up" : "down") + (d.in ? "" : ", out") + ")");
  const select = document.querySelector("#whatif-form select[name=device]");
  if (state.deviceLabels === labels.join("\n")) return;
  state.deviceLabels = labels.join("\n");
  const chosen = select.value;
  const options = document.createDocumentFragment();
  state.devices.forEach((d, i) => {
    const option = el("option", labels[i]);
    option.value = String(d.id);
    options.append(option);
  });
  select.replaceChildren(options);
  if (chosen) select.value = chosen;
}

function renderPools(pools) {
  const body = $("pools").tBodies[0];
  const fragment = document.createDocumentFragment();
  for (const p of pools) {
    const b = p.balance || {};
    const shape = p.erasure ? "EC " + p.erasure.k + "+" + p.erasure.m : "size " + p.size + " (min " + p.min_size + ")";
    fragment.append(rowOf([p.name, p.engine_detail, p.pg_num || "-", shape,
      b.max_over_mean !== undefined ? b.max_over_mean.toFixed(3) : "-",
      b.stdev !== undefined ? b.stdev.toFixed(2) : "-"]));
  }
  body.replaceChildren(fragment);
}

// Per pool, an SVG plot: a bar per device (what placement gives it), its ideal over it, the
// mean as a dashed line. Drawn at the width the page has (again when it changes), so that its
// text keeps its size on a phone.
function renderPlacement() {
  const box = $("placement-plots");
  const width = Math.max(280, Math.floor(box.clientWidth || 600));
  state.plotWidth = width;
  const names = new Map(state.devices.map((d) => [d.id, d.name]));
  const fragment = document.createDocumentFragment();
  for (const p of state.pools) {
    const placement = p.placement;
    if (!placement || !placement.devices || placement.devices.length === 0) continue;
    fragment.append(placementPlot(p, placement, width, names));
  }
  box.replaceChildren(fragment);
}

function placementPlot(pool, pl, width, names) {
  const figure = el("figure", null, "plot");
  const unit = pl.unit === "pg_copies" ? "PG copies" : "simulated objects";
  const caption = el("figcaption");
  caption.append(el("strong", pool.name), el("span", " — " + unit + " per device, " + pl.devices.length + " devices"));
  // The legend: above the plot, never over its data.
  const legend = el("div", null, "legend");
  legend.append(el("span", unit, "key bars"), el("span", "ideal", "key ideal"), el("span", "mean " + pl.mean.toFixed(1), "key mean"));
  caption.append(legend);
  figure.append(caption);
  const n = pl.devices.length;
  const labels = n <= 24;
  const left = 44, right = 8, top = 8, bottom = labels ? 34 : 20;
  const height = 150;
  const plotW = width - left - right, plotH = height - top - bottom;
  const max = Math.max(1, ...pl.counts, ...pl.ideal) * 1.08;
  const y = (v) => top + plotH - (v / max) * plotH;
  const step = plotW / n;
  const gap = step >= 4 ? Math.min(step * 0.2, 6) : 0;
  const chart = svg("svg", { width, height, viewBox: "0 0 " + width + " " + height, role: "img",
    "aria-label": pool.name + ": " + unit + " per device against the ideal" });
  // Axes and the y scale (0, the middle and the top).
  for (const v of [0, max / 2, max / 1.08]) {
    chart.append(svg("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }));
    chart.append(svg("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end", class: "tick" }, Math.round(v)));
  }
  let bars = "", ideal = "";
  for (let i = 0; i < n; i++) {
    const x = left + i * step + gap / 2, w = Math.max(step - gap, 0.5);
    bars += "M" + x.toFixed(2) + " " + y(0).toFixed(2) + "V" + y(pl.counts[i]).toFixed(2) + "h" + w.toFixed(2) + "V" + y(0).toFixed(2) + "Z";
    ideal += "M" + x.toFixed(2) + " " + y(pl.ideal[i]).toFixed(2) + "h" + w.toFixed(2);
  }
  chart.append(svg("path", { d: bars, class: "bars" }));
  chart.append(svg("path", { d: ideal, class: "ideal" }));
  chart.append(svg("line", { x1: left, x2: width - right, y1: y(pl.mean), y2: y(pl.mean), class: "mean" }));
  if (labels) {
    for (let i = 0; i < n; i++) {
      const x = left + (i + 0.5) * step;
      const name = names.get(pl.devices[i]) || "osd." + pl.devices[i];
      const text = svg("text", { x, y: height - bottom + 14, "text-anchor": "middle", class: "tick" }, step >= 44 ? name : pl.devices[i]);
      text.append(svg("title", {}, name + ": " + pl.counts[i] + " (ideal " + pl.ideal[i] + ")"));
      chart.append(text);
    }
  }
  const first = pl.devices[0], last = pl.devices[n - 1];
  chart.append(svg("text", { x: left + plotW / 2, y: height - 4, "text-anchor": "middle", class: "axis" },
    labels ? "device" : "devices " + first + "–" + last + " by id"));
  const min = Math.min(...pl.counts), top_ = Math.max(...pl.counts);
  chart.append(svg("title", {}, pool.name + ": " + unit + " per device from " + min + " to " + top_ + ", mean " + pl.mean.toFixed(1)));
  const scroll = el("div", null, "plot-area");
  scroll.append(chart);
  figure.append(scroll);
  if (pool.engine === "crush" && pool.pg_num > 0) figure.append(...comparison(pool, width, names));
  return figure;
}

// A crush pool's button that places it with seed 002's optimised CRUSH and with the incremental
// balanced placement (GET /api/v1/pools/compare) and draws their plots under its own.
function comparison(pool, width, names) {
  const button = el("button", "compare with seed 002 and incremental placement", "small");
  const out = el("div", null, "compare");
  button.addEventListener("click", async () => {
    button.disabled = true;
    out.textContent = "placing " + pool.name + " with each engine…";
    try {
      const c = await api("GET", "/api/v1/pools/compare?pool=" + encodeURIComponent(pool.name));
      const summary = el("p", c.engines.map((e) => e.engine + ": stdev from ideal " + e.stdev_from_ideal +
        ", max/ideal " + e.max_over_ideal).join(" · "));
      out.replaceChildren(summary);
      for (const e of c.engines) {
        if (e.engine === "as_mapped") continue;
        out.append(placementPlot({ name: pool.name + " — " + e.label }, e.placement, width, names));
      }
    } catch (error) {
      out.textContent = "cannot compare: " + error.message;
    }
    button.disabled = false;
  });
  return [button, out];
}

function rowOf(cells) {
  const tr = el("tr");
  // (Long texts — an engine's settings — wrap rather than push the figures off the table.)
  for (const c of cells) tr.append(el("td", c, String(c).length > 40 ? "wrap" : ""));
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
    case "attr": {
      // Only what is filled in changes.
      const change = { kind: "set_attr", device };
      const capacity = field(form, "attr-capacity").value;
      const bandwidth = field(form, "bandwidth").value;
      const cls = field(form, "class").value.trim();
      if (capacity !== "") change.capacity_bytes = Math.round(Number(capacity) * 1073741824);
      if (bandwidth !== "") change.bandwidth_mb_per_s = Math.round(Number(bandwidth));
      if (cls !== "") change.class = cls;
      return change;
    }
    // The elastic membership: how many servers (by rank) stay active, or devices named.
    case "resize": return { kind: "resize", active: Number(field(form, "active").value) };
    case "activate":
    case "deactivate": return { kind, devices: deviceList(field(form, "devices").value) };
    default: return {
      kind: "add_device", id: Number(field(form, "id").value), at: field(form, "at").value,
      capacity_bytes: Math.round(Number(field(form, "capacity").value) * 1073741824),
      weight: Number(field(form, "weight").value), allow_unreachable: true,
    };
  }
}

// "osd.5, 6 osd.7" → ["osd.5", 6, "osd.7"]: ids as numbers, names as they are.
function deviceList(text) {
  return text.split(/[\s,]+/).filter((d) => d !== "").map((d) => (/^\d+$/.test(d) ? Number(d) : d));
}

// The kinds that name no single device.
const WITHOUT_DEVICE = ["add", "resize", "activate", "deactivate"];

function showFields() {
  const kind = document.querySelector("#whatif-form select[name=kind]").value;
  for (const e of document.querySelectorAll(".for-device")) e.hidden = WITHOUT_DEVICE.includes(kind);
  for (const e of document.querySelectorAll(".for-weight")) e.hidden = !(kind === "reweight" || kind === "add");
  for (const e of document.querySelectorAll(".for-add")) e.hidden = kind !== "add";
  for (const e of document.querySelectorAll(".for-attr")) e.hidden = kind !== "attr";
  for (const e of document.querySelectorAll(".for-resize")) e.hidden = kind !== "resize";
  // The resize starts from the servers active now (the map's membership in force).
  const active = field($("whatif-form"), "active");
  if (kind === "resize" && active && state.membership) {
    active.placeholder = "now " + state.membership.active + " of " + state.membership.servers;
    if (active.value === "") active.value = String(state.membership.active);
  }
  for (const e of document.querySelectorAll(".for-members")) e.hidden = kind !== "activate" && kind !== "deactivate";
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

// An elastic membership change moves nothing when stored: its versions and servers active,
// and what follows (as `optio resize … --dry-run` says it).
function membershipSummary(report, m) {
  const summary = "At epoch " + report.epoch_before + ": membership version " + m.from_version + " → " +
    m.to_version + ": " + m.active_before + " → " + m.active_after + " of " + m.servers + " servers active";
  const next = m.active_after < m.active_before
    ? "nothing moves: data on the inactive servers stays there and every object keeps a copy on a primary; new writes to elastic pools skip the inactive servers and are recorded in the dirty table"
    : m.active_after === m.servers
      ? "full power: re-integration moves the offloaded copies recorded in the dirty table back to their servers"
      : "re-integration moves the offloaded copies recorded in the dirty table to where this version places them";
  return [summary, next];
}

function renderWhatIf(report) {
  $("whatif-result").hidden = false;
  const membership = report.moves && !Array.isArray(report.moves) ? report.moves.membership : null;
  if (membership) {
    const [summary, next] = membershipSummary(report, membership);
    $("whatif-summary").textContent = summary;
    $("whatif-moves").replaceChildren(el("li", next));
    $("whatif-devices").tBodies[0].replaceChildren();
    $("commit").hidden = !state.mayChange;
    return;
  }
  const moves = Array.isArray(report.moves) ? report.moves : [];
  // One line in all, then one per pool (a list: readable on a phone too).
  const sum = (pgs, key) => moves.filter((m) => (m.unit === "pg_copies") === pgs).reduce((n, m) => n + m[key], 0);
  const pgs = moves.filter((m) => m.unit === "pg_copies").length;
  let summary = "At epoch " + report.epoch_before + ": " + sum(true, "moved") + " of " +
    sum(true, "copies") + " PG copies move in " + pgs + " PG pool" + (pgs === 1 ? "" : "s");
  if (moves.length > pgs) {
    summary += "; " + sum(false, "moved") + " of " + sum(false, "copies") +
      " simulated object copies in " + (moves.length - pgs) + " other" + (moves.length - pgs === 1 ? "" : "s");
  }
  if (report.below_min_size) summary += ". WARNING: this leaves data below its pool's min_size";
  $("whatif-summary").textContent = summary;
  const list = document.createDocumentFragment();
  for (const m of moves) {
    list.append(el("li", m.pool + ": " + m.moved + " of " + m.copies + " " +
      (m.unit === "pg_copies" ? "PG copies" : "object copies (simulated)") + " move" +
      (m.moved_over_minimum !== null && m.moved_over_minimum !== undefined ? " (" + m.moved_over_minimum.toFixed(2) + "× the minimum)" : "")));
  }
  $("whatif-moves").replaceChildren(list);
  const body = $("whatif-devices").tBodies[0];
  const fragment = document.createDocumentFragment();
  const maxGain = Math.max(1, ...report.devices.map((d) => Math.abs(d.gained)));
  for (const d of report.devices) {
    if (d.gained === 0 && d.pgs_before === d.pgs_after) continue;
    const tr = el("tr");
    tr.append(el("td", d.name), el("td", d.pgs_before), el("td", d.pgs_after),
      el("td", (d.gained > 0 ? "+" : "") + d.gained, d.gained > 0 ? "gain" : d.gained < 0 ? "loss" : ""));
    const cell = el("td");
    cell.append(bar(Math.abs(d.gained) / maxGain, d.gained > 0 ? "gain" : "loss"));
    tr.append(cell);
    fragment.append(tr);
  }
  body.replaceChildren(fragment);
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
  const turn = (page, size) => () => {
    if (size !== undefined) state.pageSize = size;
    state.page = page(state.page);
    renderDevices();
  };
  $("devices-prev").addEventListener("click", turn((p) => Math.max(0, p - 1)));
  $("devices-next").addEventListener("click", turn((p) => p + 1));
  $("devices-all").addEventListener("click", () => turn(() => 0, state.pageSize === Infinity ? 100 : Infinity)());
  for (const th of $("devices").tHead.querySelectorAll("th")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      state.sort = { key, up: state.sort.key === key ? !state.sort.up : true };
      renderDevices();
    });
  }
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      const box = $("placement-plots");
      if (state.pools.length && Math.floor(box.clientWidth) !== state.plotWidth) renderPlacement();
    }, 150);
  });
  showFields();
  // The session and the data asked at once: a page opened with a session is filled after one
  // round of requests, not two.
  const prefetched = fetchAll();
  prefetched.catch(() => {});
  try { showApp(await api("GET", "/api/v1/session"), prefetched); } catch (_) { showLogin(); }
});
