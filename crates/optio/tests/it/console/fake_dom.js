// The fake browser both console harnesses run the page's scripts in (page_harness.js for
// console.js, storage_harness.js for storage.js): elements just rich enough for the scripts'
// render paths, a document whose elements are made on first ask by id, `window.confirm`
// answering from a queue (and remembering what it asked), `setInterval` handing its callback
// to the harness, and `fetch` against the live console with one origin's cookie jar, every
// request logged (method, path, body, CSRF header).
"use strict";

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

// The text an element shows (its own, or its first child's).
const text = (e) => e.textContent || (e.children[0] ? text(e.children[0]) : "");

// Every text and value under `roots` (elements, and what they hold), for a search.
function everything(roots) {
  const seen = new Set();
  const out = [];
  const walk = (e) => {
    if (!e || typeof e !== "object" || seen.has(e)) return;
    seen.add(e);
    out.push(String(e.textContent || ""), String(e.value || ""));
    for (const c of e.children || []) walk(c);
    for (const b of e.tBodies || []) walk(b);
    for (const o of e.options || []) walk(o);
  };
  roots.forEach(walk);
  return out.join("\n");
}

// Installs the fake browser on `globalThis` for a console at `base`; `document` adds to (or
// overrides) the document's methods.
function install(base, document = {}) {
  const byId = {};
  const get = (id) => byId[id] || (byId[id] = mk("div", id));
  const dom = {
    byId, get, ready: null, tick: null,
    // What each confirm() asked, and its answers to come (true once they run out).
    confirms: [], answers: [],
    // Every request: { method, path, body (parsed), csrf (its x-csrf-token or null), status }.
    requests: [],
  };
  global.document = {
    getElementById: get,
    createElement: (t) => mk(t),
    createElementNS: (_, t) => mk(t),
    createDocumentFragment: () => mk("#fragment"),
    body: mk("body"),
    querySelector: () => null,
    querySelectorAll: () => [],
    addEventListener: (_, f) => { dom.ready = f; },
    ...document,
  };
  global.window = {
    confirm: (question) => {
      dom.confirms.push(question);
      return dom.answers.length ? dom.answers.shift() : true;
    },
    addEventListener() {},
    performance: global.performance,
  };
  global.setInterval = (f) => { dom.tick = f; return 1; };
  // The browser's cookie jar, for one origin.
  let cookie = null;
  const realFetch = global.fetch;
  global.fetch = async (path, init) => {
    const headers = { ...(init.headers || {}) };
    if (cookie) headers.cookie = cookie;
    const logged = {
      method: init.method || "GET", path,
      body: init.body === undefined ? null : JSON.parse(init.body),
      csrf: headers["x-csrf-token"] || null,
    };
    dom.requests.push(logged);
    const response = await realFetch(base + path, { ...init, headers });
    logged.status = response.status;
    const set = response.headers.get("set-cookie");
    if (set) cookie = set.split(";")[0];
    return response;
  };
  return dom;
}

// Whether every change (a request neither GET nor the login) carried the session's CSRF
// token, `token`.
function csrfSent(requests, token) {
  const changes = requests.filter((r) => r.method !== "GET" && r.path !== "/api/v1/login");
  return changes.length > 0 && changes.every((r) => r.csrf !== null && r.csrf === token);
}

module.exports = { mk, flat, text, everything, install, csrfSent };
