// The console page's storage section: volumes, S3 users and buckets (GET /api/v1/volumes,
// GET /api/v1/s3) and, for an admin session, a form that creates a volume (POST
// /api/v1/volumes). It polls every few seconds while the page shows the logged-in app (the
// section lives in it) and asks nothing otherwise. Data is written with textContent only,
// never as HTML. Its names are its own (one function scope): console.js's are not touched.
(function () {
  "use strict";

  const POLL_MS = 5000;
  const own = { csrf: null, mayChange: false, busy: false };
  const byId = (id) => document.getElementById(id);

  function cell(tag, text) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function size(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  async function call(method, path, body) {
    const init = { method, headers: {}, credentials: "same-origin" };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    if (method !== "GET" && own.csrf) init.headers["x-csrf-token"] = own.csrf;
    const response = await fetch(path, init);
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    if (!response.ok) {
      const error = new Error((data && data.error) || response.statusText);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function fill(tableId, rows) {
    const body = byId(tableId).tBodies[0];
    body.replaceChildren(...rows.map((cells) => {
      const tr = cell("tr");
      for (const c of cells) tr.append(cell("td", c));
      return tr;
    }));
  }

  function renderVolumes(volumes) {
    fill("volumes", volumes.map((v) => [
      v.name,
      size(v.size),
      v.pool,
      (v.snapshots || []).map((s) => s.name + (s.protected ? " (protected)" : "")).join(", ") || "-",
      v.parent ? v.parent.volume + "@" + v.parent.snapshot : "-",
      v.lock ? v.lock.holder : "-",
    ]));
  }

  function renderS3(s3) {
    fill("s3-users", s3.users.map((u) => [u.name, u.access_key, (u.buckets || []).join(", ") || "-"]));
    fill("s3-buckets", s3.buckets.map((b) => [b.bucket, b.pool, b.owner || "(every user)"]));
  }

  // The app is shown (logged in): ask the session for its CSRF token and capability.
  function shown() {
    const app = byId("app");
    return app && !app.hidden;
  }

  async function poll() {
    if (own.busy || !shown()) return;
    own.busy = true;
    try {
      const session = await call("GET", "/api/v1/session");
      own.csrf = session.csrf_token;
      own.mayChange = session.may_change;
      byId("volume-form").hidden = !own.mayChange;
      try {
        renderVolumes((await call("GET", "/api/v1/volumes")).volumes);
        byId("volumes-error").textContent = "";
      } catch (error) {
        byId("volumes-error").textContent = "volumes: " + error.message;
      }
      try {
        renderS3(await call("GET", "/api/v1/s3"));
        byId("s3-error").textContent = "";
      } catch (error) {
        byId("s3-error").textContent = "S3: " + error.message;
      }
    } catch (_) {
      // Logged out meanwhile: console.js shows the login form.
    } finally {
      own.busy = false;
    }
  }

  async function createVolume(event) {
    event.preventDefault();
    const form = event.target;
    const value = (name) => form.elements.namedItem(name).value;
    const body = { name: value("name"), size: value("size") };
    if (value("pool")) body.pool = value("pool");
    const result = byId("volume-result");
    try {
      const created = await call("POST", "/api/v1/volumes", body);
      result.textContent = "created volume " + created.name + " (" + size(created.size) + " in pool " + created.pool + ")";
      await poll();
    } catch (error) {
      result.textContent = "refused: " + error.message;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    byId("volume-form").addEventListener("submit", createVolume);
    poll();
    setInterval(poll, POLL_MS);
  });
})();
