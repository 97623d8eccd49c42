// The console page's storage section: volumes, S3 users and buckets (GET /api/v1/volumes,
// GET /api/v1/s3) and, for an admin session, their changes: a form that creates a volume
// (POST /api/v1/volumes), per volume a resize and a removal (/api/v1/volumes/resize, /rm), a
// form that creates an S3 user and per user a new key pair or a removal (/api/v1/s3/users,
// /rotate, /rm). A key pair's secret is answered once: it is shown in its box, never kept
// elsewhere, and the box is emptied at the next change, when hidden, and at a log-out. It
// polls every few seconds while the page shows the logged-in app (the section lives in it)
// and asks nothing otherwise. Data is written with textContent only, never as HTML. Its names
// are its own (one function scope): console.js's are not touched.
(function () {
  "use strict";

  const POLL_MS = 5000;
  // (`drawn`: what each table was last drawn from, so that a poll does not redraw — and empty
  // the size typed into — a table whose answer did not change.)
  const own = { csrf: null, mayChange: false, busy: null, drawn: {} };
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
      error.code = data && data.code;
      throw error;
    }
    return data;
  }

  // A table's rows: a cell is a text, or a list of elements (an admin's controls).
  function fill(tableId, rows) {
    const body = byId(tableId).tBodies[0];
    body.replaceChildren(...rows.map((cells) => {
      const tr = cell("tr");
      for (const c of cells) {
        if (Array.isArray(c)) {
          const td = cell("td");
          td.className = "actions";
          td.append(...c);
          tr.append(td);
        } else tr.append(cell("td", c));
      }
      return tr;
    }));
  }

  function button(text, title, onClick, danger) {
    const b = cell("button", text);
    b.type = "button";
    b.className = danger ? "small danger" : "small";
    b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }

  // Whether `answer` differs from what `table` was last drawn from (and remembers it).
  function changed(table, answer) {
    const text = JSON.stringify([own.mayChange, answer]);
    if (own.drawn[table] === text) return false;
    own.drawn[table] = text;
    return true;
  }

  function renderVolumes(volumes) {
    byId("volumes-actions").hidden = !own.mayChange;
    fill("volumes", volumes.map((v) => {
      const cells = [
        v.name,
        size(v.size),
        v.pool,
        (v.snapshots || []).map((s) => s.name + (s.protected ? " (protected)" : "")).join(", ") || "-",
        v.parent ? v.parent.volume + "@" + v.parent.snapshot : "-",
        v.lock ? v.lock.holder : "-",
      ];
      if (own.mayChange) cells.push(volumeControls(v));
      return cells;
    }));
  }

  // A volume's resize (a new size such as 20GiB) and removal.
  function volumeControls(v) {
    const input = cell("input");
    input.name = "size";
    input.placeholder = "new size";
    input.size = 8;
    input.setAttribute("aria-label", "new size of " + v.name);
    const resize = button("resize", "Resize volume " + v.name, () => resizeVolume(v.name, input.value.trim()));
    const remove = button("remove", "Remove volume " + v.name, () => removeVolume(v.name), true);
    return [input, resize, remove];
  }

  function renderS3(s3) {
    byId("s3-users-actions").hidden = !own.mayChange;
    fill("s3-users", s3.users.map((u) => {
      const cells = [u.name, u.access_key, (u.buckets || []).join(", ") || "-"];
      if (own.mayChange) {
        cells.push([
          button("new key", "Give S3 user " + u.name + " a new key pair", () => rotateUser(u.name)),
          button("remove", "Remove S3 user " + u.name, () => removeUser(u.name), true),
        ]);
      }
      return cells;
    }));
    fill("s3-buckets", s3.buckets.map((b) => [b.bucket, b.pool, b.owner || "(every user)"]));
  }

  // The app is shown (logged in): ask the session for its CSRF token and capability.
  function shown() {
    const app = byId("app");
    return app && !app.hidden;
  }

  // One poll at a time: a tick while one runs is that one.
  function poll() {
    if (!shown()) {
      // Logged out: nothing asked, no secret left on the page.
      hideSecret();
      own.drawn = {};
      return Promise.resolve();
    }
    if (!own.busy) own.busy = pollOnce().finally(() => { own.busy = null; });
    return own.busy;
  }

  // The lists asked again after a change: by a poll started after it.
  async function pollAgain() {
    if (own.busy) await own.busy;
    await poll();
  }

  async function pollOnce() {
    try {
      const session = await call("GET", "/api/v1/session");
      own.csrf = session.csrf_token;
      own.mayChange = session.may_change;
      byId("volume-form").hidden = !own.mayChange;
      byId("s3-user-form").hidden = !own.mayChange;
      try {
        const volumes = (await call("GET", "/api/v1/volumes")).volumes;
        if (changed("volumes", volumes)) renderVolumes(volumes);
        byId("volumes-error").textContent = "";
      } catch (error) {
        byId("volumes-error").textContent = "volumes: " + error.message;
      }
      try {
        const s3 = await call("GET", "/api/v1/s3");
        if (changed("s3", s3)) renderS3(s3);
        byId("s3-error").textContent = "";
      } catch (error) {
        byId("s3-error").textContent = "S3: " + error.message;
      }
    } catch (_) {
      // Logged out meanwhile: console.js shows the login form.
    }
  }

  // A change: the secret box emptied first (a secret is shown until the next change), the
  // request, then `done`'s text — or the API's error — in `resultId`, and the lists asked
  // again.
  async function change(resultId, path, body, done) {
    hideSecret();
    const result = byId(resultId);
    result.textContent = "";
    try {
      const answer = await call("POST", path, body);
      result.textContent = done(answer);
      await pollAgain();
      return answer;
    } catch (error) {
      result.textContent = "refused: " + error.message;
      return null;
    }
  }

  async function createVolume(event) {
    event.preventDefault();
    const form = event.target;
    const value = (name) => form.elements.namedItem(name).value;
    const body = { name: value("name"), size: value("size") };
    if (value("pool")) body.pool = value("pool");
    await change("volume-result", "/api/v1/volumes", body,
      (created) => "created volume " + created.name + " (" + size(created.size) + " in pool " + created.pool + ")");
  }

  async function resizeVolume(name, to) {
    if (to === "") {
      byId("volume-result").textContent = "resize " + name + ": type its new size (such as 20GiB)";
      return;
    }
    const resized = (r) => "resized volume " + r.volume + " from " + size(r.size_before) + " to " + size(r.size);
    hideSecret();
    try {
      const answer = await call("POST", "/api/v1/volumes/resize", { name, size: to });
      byId("volume-result").textContent = resized(answer);
      await pollAgain();
    } catch (error) {
      // A smaller size is refused unless asked for: what lies beyond it is discarded.
      if (error.code === "would_shrink" &&
          window.confirm("Shrink volume " + name + " to " + to + "? The data beyond " + to + " is discarded.")) {
        await change("volume-result", "/api/v1/volumes/resize", { name, size: to, allow_shrink: true }, resized);
      } else {
        byId("volume-result").textContent = "refused: " + error.message;
      }
    }
  }

  async function removeVolume(name) {
    if (!window.confirm("Remove volume " + name + "? Its data is deleted: this cannot be undone.")) return;
    await change("volume-result", "/api/v1/volumes/rm", { name },
      (r) => "removed volume " + r.removed + (r.in_background ? " (its data is deleted in the background)" : ""));
  }

  async function createUser(event) {
    event.preventDefault();
    const input = event.target.elements.namedItem("user");
    const name = input.value.trim();
    const pair = await change("s3-result", "/api/v1/s3/users", { name }, () => "created S3 user " + name);
    if (pair) {
      input.value = "";
      showSecret(name, pair);
    }
  }

  async function rotateUser(name) {
    if (!window.confirm("Give S3 user " + name + " a new key pair? Its current key stops working.")) return;
    const pair = await change("s3-result", "/api/v1/s3/users/rotate", { name }, () => "new key pair for S3 user " + name);
    if (pair) showSecret(name, pair);
  }

  async function removeUser(name) {
    if (!window.confirm("Remove S3 user " + name + " and its key?")) return;
    await change("s3-result", "/api/v1/s3/users/rm", { name }, (r) => "removed S3 user " + r.removed);
  }

  // The one place a secret is written: its box (the answer it came in is not kept).
  function showSecret(name, pair) {
    byId("s3-secret-user").textContent = name;
    byId("s3-secret-access").textContent = pair.access_key;
    byId("s3-secret-key").textContent = pair.secret_key;
    byId("s3-secret").hidden = false;
  }

  function hideSecret() {
    for (const id of ["s3-secret-user", "s3-secret-access", "s3-secret-key"]) byId(id).textContent = "";
    byId("s3-secret").hidden = true;
  }

  async function copySecret() {
    const key = byId("s3-secret-key");
    try {
      await navigator.clipboard.writeText(key.textContent);
      byId("s3-result").textContent = "the secret is copied";
    } catch (_) {
      // (No clipboard outside a secure context: the secret selected, for Ctrl+C.)
      window.getSelection().selectAllChildren(key);
      byId("s3-result").textContent = "the secret is selected: copy it with Ctrl+C";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    byId("volume-form").addEventListener("submit", createVolume);
    byId("s3-user-form").addEventListener("submit", createUser);
    byId("s3-secret-copy").addEventListener("click", copySecret);
    byId("s3-secret-done").addEventListener("click", hideSecret);
    poll();
    setInterval(poll, POLL_MS);
  });
})();
