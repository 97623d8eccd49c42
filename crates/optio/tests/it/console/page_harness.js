// Runs the console page's script (console.js) in Node against a live `optio console`, with a
// fake DOM just rich enough for its render paths: logs in through the page's form, renders
// the overview, servers, devices and pools from the real API, clicks a device row's "out?"
// button (a what-if), then commits it with the page's button. Prints one JSON line of what the
// page showed; exits non-zero on any script error.
//
// node page_harness.js CONSOLE_JS BASE_URL ENTITY KEY DEVICE_ROW
"use strict";
const fs = require("fs");
const [script, base, entity, key, row] = process.argv.slice(2);

const byId = {};
// A DocumentFragment's children are moved into what it is appended to.
const flat = (c) => c.flatMap((x) => (x && x.tag === "#fragment" ? x.children : [x]));
function mk(tag, id) {
  return {
    tag, id, children: [], textContent: "", className: "", hidden: false, style: {}, title: "",
    value: "", dataset: {}, listeners: {}, attributes: {},
    classList: { toggle() {} },
    parentNode: { classList: { toggle() {} } },
    setAttribute(k, v) { this.attributes[k] = v; },
    append(...c) { this.children.push(...flat(c)); },
    replaceChildren(...c) { this.children = flat(c); },
    addEventListener(t, f) { this.listeners[t] = f; },
    querySelectorAll() { return this.headers || []; },
    scrollIntoView() {},
    requestSubmit() { return this.listeners.submit({ preventDefault() {}, target: this }); },
  };
}
const get = (id) => byId[id] || (byId[id] = mk("div", id));
for (const t of ["devices", "pools", "whatif-devices", "servers"]) {
  const table = get(t);
  table.tBodies = [mk("tbody")];
  table.tHead = mk("thead");
  table.tHead.headers = ["id", "name", "state", "used"].map((k) => {
    const th = mk("th");
    th.dataset.key = k;
    return th;
  });
}
const select = mk("select");
select.options = [];
select.append = function (...c) { this.options.push(...flat(c)); };
select.replaceChildren = function (...c) { this.options = flat(c); };
const named = {
  kind: mk("select"), device: select, weight: mk("input"), id: mk("input"), at: mk("input"),
  capacity: mk("input"), entity: mk("input"), key: mk("input"),
};
named.kind.value = "out";
named.weight.value = "1";
named.entity.value = entity;
named.key.value = key;
get("whatif-form").elements = { namedItem: (n) => named[n] };
get("login-form").elements = { namedItem: (n) => named[n] };
let ready = null;
global.document = {
  getElementById: get,
  createElement: (t) => mk(t),
  createElementNS: (_, t) => mk(t),
  createDocumentFragment: () => mk("#fragment"),
  body: mk("body"),
  querySelector: (q) => (q.includes("kind") ? named.kind : select),
  querySelectorAll: () => [],
  addEventListener: (_, f) => { ready = f; },
};
global.window = { confirm: () => true, addEventListener() {}, performance: global.performance };
global.setInterval = () => 1;
// The browser's cookie jar, for one origin.
let cookie = null;
const realFetch = global.fetch;
global.fetch = async (path, init) => {
  const headers = { ...(init.headers || {}) };
  if (cookie) headers.cookie = cookie;
  const response = await realFetch(base + path, { ...init, headers });
  const set = response.headers.get("set-cookie");
  if (set) cookie = set.split(";")[0];
  return response;
};
// (Strict code's declarations stay inside its eval: the script hands out what is called.)
eval(fs.readFileSync(script, "utf8") + "\n;globalThis.page = { refresh };");

const settle = () => new Promise((r) => setTimeout(r, 300));
const text = (e) => e.textContent || (e.children[0] ? text(e.children[0]) : "");
(async () => {
  await ready();
  const loginShown = !get("login").hidden;
  await get("login-form").listeners.submit({ preventDefault() {}, target: get("login-form") });
  await settle();
  await globalThis.page.refresh();
  const rows = get("devices").tBodies[0].children;
  const shown = {
    login_shown_first: loginShown,
    login_error: get("login-error").textContent,
    who: get("who").textContent,
    health: get("health-level").textContent,
    epoch: get("epoch").textContent,
    devices: rows.map((r) => r.children.map(text)),
    servers: get("servers").tBodies[0].children.length,
    pools: get("pools").tBodies[0].children.map((r) => r.children.map(text)),
    // Per pool plot: its bars' path has a bar ("M…Z") per device.
    plots: get("placement-plots").children.map((f) => {
      const svg = f.children[1].children[0];
      const bars = svg.children.find((c) => c.attributes.class === "bars");
      return (bars.attributes.d.match(/Z/g) || []).length;
    }),
    rebalancing: get("rebalancing-figures").textContent,
    filled: global.document.body.dataset.filled,
  };
  const chosen = rows.find((r) => text(r.children[0]) === row);
  const button = chosen.children[chosen.children.length - 1].children[0];
  await button.listeners.click();
  // The what-if answers in its own time: wait for the page to show it (at most 60 s).
  for (let waited = 0; waited < 60000 && !get("whatif-summary").textContent && !get("whatif-error").textContent; waited += 100) {
    await new Promise((r) => setTimeout(r, 100));
  }
  shown.whatif_summary = get("whatif-summary").textContent;
  shown.whatif_rows = get("whatif-devices").tBodies[0].children.map((r) => r.children.map(text));
  shown.whatif_error = get("whatif-error").textContent;
  shown.commit_hidden = get("commit").hidden;
  await get("commit").listeners.click();
  shown.commit_result = get("commit-result").textContent;
  shown.footer = get("footer").textContent;
  console.log(JSON.stringify(shown));
})().catch((e) => {
  console.error("the page's script failed:", e);
  process.exit(1);
});
