// Runs the console page's storage script (storage.js) in Node against a live `optio console`,
// with a fake DOM just rich enough for it: while the app is hidden (logged out) it must ask
// nothing; then it logs in (as console.js would), shows the app, lets one poll run, submits
// the create-volume form with VOLUME (64 MiB), and prints one JSON line of what the section
// showed; exits non-zero on any script error.
//
// node storage_harness.js STORAGE_JS BASE_URL ENTITY KEY VOLUME
"use strict";
const fs = require("fs");
const [script, base, entity, key, volume] = process.argv.slice(2);

const byId = {};
function mk(tag, id) {
  return {
    tag, id, children: [], textContent: "", hidden: false, listeners: {},
    append(...c) { this.children.push(...c); },
    replaceChildren(...c) { this.children = c; },
    addEventListener(t, f) { this.listeners[t] = f; },
  };
}
const get = (id) => byId[id] || (byId[id] = mk("div", id));
for (const t of ["volumes", "s3-users", "s3-buckets"]) get(t).tBodies = [mk("tbody")];
get("app").hidden = true;
get("volume-form").hidden = true;
const fields = { name: { value: volume }, size: { value: "64MiB" }, pool: { value: "" } };
get("volume-form").elements = { namedItem: (n) => fields[n] };
let ready = null;
let tick = null;
global.document = {
  getElementById: get,
  createElement: (t) => mk(t),
  addEventListener: (_, f) => { ready = f; },
};
global.setInterval = (f) => { tick = f; return 1; };
let cookie = null;
let requests = 0;
const realFetch = global.fetch;
global.fetch = async (path, init) => {
  requests++;
  const headers = { ...(init.headers || {}) };
  if (cookie) headers.cookie = cookie;
  const response = await realFetch(base + path, { ...init, headers });
  const set = response.headers.get("set-cookie");
  if (set) cookie = set.split(";")[0];
  return response;
};
eval(fs.readFileSync(script, "utf8"));

const rows = (id) => get(id).tBodies[0].children.map((r) => r.children.map((c) => c.textContent));
(async () => {
  ready();
  await tick();
  const askedLoggedOut = requests;
  const login = await global.fetch("/api/v1/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ entity, key }),
  });
  if (!login.ok) throw new Error("login refused: " + login.status);
  get("app").hidden = false;
  await tick();
  const shown = {
    asked_logged_out: askedLoggedOut,
    form_hidden: get("volume-form").hidden,
    volumes_error: get("volumes-error").textContent,
    s3_error: get("s3-error").textContent,
  };
  await get("volume-form").listeners.submit({ preventDefault() {}, target: get("volume-form") });
  shown.create_result = get("volume-result").textContent;
  shown.volumes = rows("volumes");
  shown.users = rows("s3-users");
  shown.buckets = rows("s3-buckets");
  console.log(JSON.stringify(shown));
})().catch((e) => {
  console.error("the storage script failed:", e);
  process.exit(1);
});
