// Runs the console page's storage script (storage.js) in Node against a live `optio console`,
// with a fake DOM just rich enough for it (fake_dom.js): while the app is hidden (logged out)
// it must ask nothing; then it logs in (as console.js would), shows the app, lets one poll
// run, submits the create-volume form with VOLUME (64 MiB), and — where the session is
// offered them — uses the row controls and forms: VOLUME resized to 128 MiB, shrunk back
// (declined once, then confirmed), S3 user USER created (twice: the second refused), given a
// new key, its removal declined then done, and VOLUME removed. Prints one JSON line of what
// the section showed; exits non-zero on any script error.
//
// node storage_harness.js STORAGE_JS BASE_URL ENTITY KEY VOLUME USER
"use strict";
const fs = require("fs");
const { mk, everything, install, csrfSent } = require("./fake_dom.js");
const [script, base, entity, key, volume, user] = process.argv.slice(2);

const dom = install(base);
const get = dom.get;
for (const t of ["volumes", "s3-users", "s3-buckets"]) get(t).tBodies = [mk("tbody")];
get("app").hidden = true;
for (const id of ["volume-form", "s3-user-form", "s3-secret", "volumes-actions", "s3-users-actions"]) get(id).hidden = true;
const fields = { name: { value: volume }, size: { value: "64MiB" }, pool: { value: "" }, user: { value: user } };
for (const form of ["volume-form", "s3-user-form"]) get(form).elements = { namedItem: (n) => fields[n] };
let copied = null;
global.navigator = { clipboard: { writeText: async (t) => { copied = t; } } };
eval(fs.readFileSync(script, "utf8"));

const cells = (r) => r.children.map((c) => (c.className === "actions" ? c.children.map((b) => b.textContent || b.placeholder) : c.textContent));
const rows = (id) => get(id).tBodies[0].children.map(cells);
const rowOf = (id, name) => get(id).tBodies[0].children.find((r) => r.children[0].textContent === name);
// A row's control: its input, or the button showing `label`.
const control = (id, name, label) => {
  const row = rowOf(id, name);
  const actions = row && row.children.find((c) => c.className === "actions");
  return actions && actions.children.find((b) => (label === "input" ? b.tag === "input" : b.textContent === label));
};
const submit = (form) => get(form).listeners.submit({ preventDefault() {}, target: get(form) });
// The secret box: shown or not, and what it holds.
const secretBox = () => ({
  hidden: get("s3-secret").hidden,
  user: get("s3-secret-user").textContent,
  access: get("s3-secret-access").textContent,
  secret: get("s3-secret-key").textContent,
});
// What a step sent (its changes: method, path, body) and what the page then said.
async function step(result, act) {
  const asked = dom.requests.length;
  const confirmed = dom.confirms.length;
  await act();
  return {
    sent: dom.requests.slice(asked).filter((r) => r.method !== "GET").map((r) => [r.method, r.path, r.body]),
    confirms: dom.confirms.slice(confirmed),
    result: get(result).textContent,
  };
}

(async () => {
  dom.ready();
  await dom.tick();
  const askedLoggedOut = dom.requests.length;
  const login = await global.fetch("/api/v1/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ entity, key }),
  });
  if (!login.ok) throw new Error("login refused: " + login.status);
  const { csrf_token: token } = await login.json();
  get("app").hidden = false;
  await dom.tick();
  const shown = {
    asked_logged_out: askedLoggedOut,
    form_hidden: get("volume-form").hidden,
    user_form_hidden: get("s3-user-form").hidden,
    actions_hidden: [get("volumes-actions").hidden, get("s3-users-actions").hidden],
    volumes_error: get("volumes-error").textContent,
    s3_error: get("s3-error").textContent,
  };
  await submit("volume-form");
  shown.create_result = get("volume-result").textContent;
  shown.volumes = rows("volumes");
  shown.users = rows("s3-users");
  shown.buckets = rows("s3-buckets");
  if (!control("volumes", volume, "resize")) {
    // No controls (a read session): nothing more to use.
    console.log(JSON.stringify(shown));
    return;
  }
  shown.resize = await step("volume-result", async () => {
    control("volumes", volume, "input").value = "128MiB";
    await control("volumes", volume, "resize").listeners.click();
  });
  shown.resized_row = rows("volumes").find((r) => r[0] === volume);
  // A smaller size: refused by the API (its error shown) unless the shrink is confirmed.
  dom.answers.push(false);
  shown.shrink_declined = await step("volume-result", async () => {
    control("volumes", volume, "input").value = "64MiB";
    await control("volumes", volume, "resize").listeners.click();
  });
  shown.shrink = await step("volume-result", async () => {
    control("volumes", volume, "input").value = "64MiB";
    await control("volumes", volume, "resize").listeners.click();
  });
  shown.shrunk_row = rows("volumes").find((r) => r[0] === volume);

  // S3: a user created, its key pair shown once.
  shown.user_create = await step("s3-result", () => submit("s3-user-form"));
  shown.created_secret = secretBox();
  shown.user_row = rows("s3-users").find((r) => r[0] === user);
  shown.user_field_after = fields.user.value;
  await get("s3-secret-copy").listeners.click();
  shown.copied = copied === shown.created_secret.secret && copied !== "";
  // The next change empties the box: the secret is nowhere on the page.
  fields.user.value = user;
  shown.user_create_again = await step("s3-result", () => submit("s3-user-form"));
  shown.secret_after_next_change = secretBox();
  shown.first_secret_left = everything(Object.values(dom.byId)).includes(shown.created_secret.secret);
  // A new key pair (confirmed): shown once, the row's access key the new one.
  shown.rotate = await step("s3-result", () => control("s3-users", user, "new key").listeners.click());
  shown.rotated_secret = secretBox();
  shown.rotated_row = rows("s3-users").find((r) => r[0] === user);
  await get("s3-secret-done").listeners.click();
  shown.secret_after_done = secretBox();
  shown.rotated_secret_left = everything(Object.values(dom.byId)).includes(shown.rotated_secret.secret);
  // Removals: a declined confirm sends nothing.
  dom.answers.push(false);
  shown.user_rm_declined = await step("s3-result", () => control("s3-users", user, "remove").listeners.click());
  shown.user_rm = await step("s3-result", () => control("s3-users", user, "remove").listeners.click());
  shown.users_after = rows("s3-users");
  shown.volume_rm = await step("volume-result", () => control("volumes", volume, "remove").listeners.click());
  shown.volumes_after = rows("volumes");
  shown.csrf_sent = csrfSent(dom.requests, token);
  console.log(JSON.stringify(shown));
})().catch((e) => {
  console.error("the storage script failed:", e);
  process.exit(1);
});
