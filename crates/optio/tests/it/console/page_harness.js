// Runs the console page's script (console.js) in Node against a live `optio console`, with a
// fake DOM just rich enough for its render paths (fake_dom.js): logs in through the page's
// form, renders the overview, servers, devices and pools from the real API, clicks a device
// row's "out?" button (a what-if), then commits it with the page's button; shows each kind of
// change's fields, and asks (and commits) the elastic membership's changes with the form.
// Prints one JSON line of what the page showed; exits non-zero on any script error.
//
// node page_harness.js CONSOLE_JS BASE_URL ENTITY KEY DEVICE_ROW ACTIVE MEMBER
"use strict";
const fs = require("fs");
const path = require("path");
const { mk, flat, text, install, csrfSent } = require("./fake_dom.js");
const [script, base, entity, key, row, active, member] = process.argv.slice(2);

// The what-if form as index.html (next to the script) has it: its labels — each with its
// class, its text and its control's name — and its controls, with their initial values.
const html = fs.readFileSync(path.join(path.dirname(script), "index.html"), "utf8");
const formHtml = html.slice(html.indexOf('<form id="whatif-form">'), html.indexOf("</form>", html.indexOf('<form id="whatif-form">')));
const select = mk("select");
select.options = [];
select.append = function (...c) { this.options.push(...flat(c)); };
select.replaceChildren = function (...c) { this.options = flat(c); };
const named = { device: select, entity: mk("input"), key: mk("input") };
const labels = [];
for (const m of formHtml.matchAll(/<label(?: class="([^"]*)")?>([^<]*)<(input|select) name="([^"]*)"([^>]*)>/g)) {
  const [, cls, label, tag, name, rest] = m;
  if (!named[name]) named[name] = mk(tag);
  const initial = rest.match(/ value="([^"]*)"/);
  if (initial) named[name].value = initial[1];
  const e = mk("label");
  e.className = cls || "";
  e.label = label.trim();
  labels.push(e);
}
const kinds = [...formHtml.matchAll(/<option value="([^"]*)">/g)].map((m) => m[1]);
named.kind.value = kinds[0];
named.entity.value = entity;
named.key.value = key;

const dom = install(base, {
  querySelector: (q) => named[q.match(/name=(\w+)/)[1]],
  querySelectorAll: (q) => labels.filter((l) => q.startsWith(".") && l.className === q.slice(1)),
});
const get = dom.get;
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
get("whatif-form").elements = { namedItem: (n) => named[n] };
get("login-form").elements = { namedItem: (n) => named[n] };
// (Strict code's declarations stay inside its eval: the script hands out what is called.)
eval(fs.readFileSync(script, "utf8") + "\n;globalThis.page = { refresh };");

const settle = () => new Promise((r) => setTimeout(r, 300));
// The what-if of what the form holds, asked with its button; then, with `commit`, its commit.
async function whatIf(kind, values, commit) {
  named.kind.value = kind;
  await named.kind.listeners.change();
  for (const [name, value] of Object.entries(values)) named[name].value = value;
  get("whatif-summary").textContent = "";
  get("whatif-error").textContent = "";
  get("commit-result").textContent = "";
  const asked = dom.requests.length;
  await get("whatif-form").listeners.submit({ preventDefault() {}, target: get("whatif-form") });
  const sent = dom.requests.slice(asked).find((r) => r.path === "/api/v1/whatif");
  const shown = {
    sent: sent ? sent.body : null,
    summary: get("whatif-summary").textContent,
    moves: get("whatif-moves").children.map(text),
    error: get("whatif-error").textContent,
    commit_hidden: get("commit").hidden,
  };
  if (commit) {
    await get("commit").listeners.click();
    shown.commit_result = get("commit-result").textContent;
  }
  return shown;
}

(async () => {
  await dom.ready();
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
  // Each kind's fields: the labels shown once it is chosen.
  shown.fields = {};
  for (const kind of kinds) {
    named.kind.value = kind;
    await named.kind.listeners.change();
    shown.fields[kind] = labels.filter((l) => !l.hidden).map((l) => l.label);
  }
  // The elastic membership: a resize (asked only), MEMBER deactivated then activated again
  // (each committed), and a resize the API refuses (its error shown).
  shown.resize = await whatIf("resize", { active }, false);
  shown.deactivate = await whatIf("deactivate", { devices: member }, true);
  shown.activate = await whatIf("activate", { devices: " " + member.replace(/^osd\./, "") + " ," }, true);
  shown.resize_refused = await whatIf("resize", { active: "0" }, false);
  const session = await (await global.fetch("/api/v1/session", { method: "GET" })).json();
  shown.csrf_sent = csrfSent(dom.requests, session.csrf_token);
  console.log(JSON.stringify(shown));
})().catch((e) => {
  console.error("the page's script failed:", e);
  process.exit(1);
});
