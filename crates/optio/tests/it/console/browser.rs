//! The console's page in a real browser (issue 42): Debian's headless `chromium`, driven by
//! `chromedriver` over the W3C WebDriver HTTP protocol, logs in through the login form, sees
//! the nine devices of an `optio up` cluster, asks what marking one out would move (the
//! page's own controls), commits it (its confirmation accepted), and watches the page's
//! rebalancing progress reach 100 %. A screenshot of each state is kept (PNG) in
//! `$OPTIO_TEST_ARTEFACTS`, else `target/console-screenshots/`, for a look at the layout.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use optio_placement::DeviceId;
use serde_json::{Value, json};

use super::{epoch, key_of, start_console};
use crate::store_support::free_port;
use crate::{cluster, data, runtime};

/// The W3C name of a web element's id in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromedriver` on a loopback port, in a process group of its own with the browser it
/// starts: the group is killed when dropped (a test that fails leaves no browser behind).
struct Driver {
    child: Child,
    base: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser session: ended (the browser quits) with [`Browser::quit`].
struct Browser {
    http: reqwest::Client,
    session: String,
}

/// Where the screenshots go.
pub fn artefacts_dir() -> PathBuf {
    match std::env::var_os("OPTIO_TEST_ARTEFACTS") {
        Some(dir) => PathBuf::from(dir),
        // The workspace's target directory (this crate is crates/optio).
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots"),
    }
}

/// Whether Chromium and its driver are here; under `CI=true` their absence fails the test.
pub fn have_browser() -> bool {
    crate::have_tool("chromium", "chromium") && crate::have_tool("chromedriver", "chromium-driver")
}

async fn start_driver() -> Driver {
    let port = free_port();
    use std::os::unix::process::CommandExt as _;
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver { child, base: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = http.get(format!("{}/status", driver.base)).send().await;
        if let Ok(response) = ready
            && let Ok(status) = response.json::<Value>().await
            && status["value"]["ready"] == json!(true)
        {
            return driver;
        }
        assert!(Instant::now() < deadline, "chromedriver did not answer within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Browser {
    /// A new headless Chromium (a fresh profile in `profile`), its window 1280 x 900.
    async fn start(driver: &Driver, profile: &Path) -> Browser {
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            format!("--user-data-dir={}", profile.display()),
            "--window-size=1280,900".into(),
        ];
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args },
        }}});
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("an HTTP client");
        let answer = http
            .post(format!("{}/session", driver.base))
            .json(&capabilities)
            .send()
            .await
            .expect("chromedriver answers");
        let value: Value = answer.json().await.expect("JSON");
        let session = value["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a browser session: {value}"))
            .to_string();
        Browser { http, session: format!("{}/session/{session}", driver.base) }
    }

    /// One WebDriver command; its `value` (panics on a WebDriver error).
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let value = self.try_command(method, path, body).await;
        assert!(value.get("error").is_none(), "WebDriver {method} {path}: {value}");
        value
    }

    async fn try_command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let answer = request.send().await.expect("chromedriver answers");
        let value: Value = answer.json().await.expect("JSON");
        value["value"].clone()
    }

    async fn navigate(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url }))).await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .command("POST", "/element", Some(json!({ "using": "css selector", "value": css })))
            .await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("{css}: {found}")).to_string()
    }

    async fn send_keys(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.command("POST", &format!("/element/{element}/clear"), None).await;
        self.command("POST", &format!("/element/{element}/value"), Some(json!({ "text": text })))
            .await;
    }

    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.command("POST", &format!("/element/{element}/click"), None).await;
    }

    /// Runs `script` (a function body) in the page; what it returns.
    async fn script(&self, script: &str) -> Value {
        self.command("POST", "/execute/sync", Some(json!({ "script": script, "args": [] }))).await
    }

    /// Waits (at most `bound`) until `script` returns something truthy; that.
    async fn wait_for(&self, what: &str, bound: Duration, script: &str) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let value = self.script(script).await;
            if !(value.is_null() || value == json!(false) || value == json!("")) {
                return value;
            }
            if Instant::now() >= deadline {
                let footer =
                    self.script("return document.getElementById('footer').textContent").await;
                panic!("the page did not show {what} within {bound:?} (footer: {footer})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn window(&self, width: u64, height: u64) {
        self.command("POST", "/window/rect", Some(json!({ "width": width, "height": height })))
            .await;
    }

    /// A PNG of the whole page at `width`: the window made as tall as the page first (WebDriver
    /// screenshots show the viewport only), then back to `height`.
    async fn screenshot_page(&self, name: &str, width: u64, height: u64) -> PathBuf {
        self.window(width, height).await;
        let tall = self
            .script("return Math.ceil(document.documentElement.scrollHeight)")
            .await
            .as_u64()
            .unwrap_or(height);
        // The window's frame: what the window has beyond its viewport.
        let frame = self
            .script("return window.outerHeight - window.innerHeight")
            .await
            .as_u64()
            .unwrap_or(0);
        self.window(width, tall.max(height) + frame).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let path = self.screenshot(name).await;
        self.window(width, height).await;
        path
    }

    /// A PNG of what the window shows, saved as `name`.png in [`artefacts_dir`].
    async fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self.command("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("base64"))
            .expect("a PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = artefacts_dir();
        std::fs::create_dir_all(&dir).expect("the artefacts directory");
        let path = dir.canonicalize().expect("the artefacts directory").join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        eprintln!("screenshot: {}", path.display());
        path
    }

    async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

/// What the page shows that a layout must not cut: any element wider than the page's width
/// that is not inside a horizontally scrolling box, by its id or tag.
const OVERFLOWING: &str = r##"
    const width = document.documentElement.clientWidth;
    const out = [];
    for (const e of document.querySelectorAll("#app *, header *")) {
      if (e.closest(".scroll")) continue;
      const r = e.getBoundingClientRect();
      if (r.width > 0 && (r.right > width + 1 || r.left < -1)) out.push((e.id || e.tagName) + " " + Math.round(r.left) + ".." + Math.round(r.right));
    }
    return out.slice(0, 10);
"##;

#[test]
fn console_in_a_real_browser_logs_in_commits_a_what_if_and_shows_the_rebalancing_done() {
    if !have_browser() {
        return;
    }
    // `optio up`'s cluster: 3 zones x 3 hosts, a device each, nine servers.
    let spec =
        optio_local::LocalClusterSpec { auth: true, ..optio_local::LocalClusterSpec::default() };
    let (_dir, cluster) = cluster(spec);
    assert_eq!(cluster.load_map().expect("the map").devices().len(), 9);
    let rt = runtime();
    // Data to move: objects in a PG pool and in an object-level one.
    rt.block_on(async {
        let credentials = optio_cluster::keyring::credentials(
            &cluster.dir().join(optio_local::cluster::KEYRING_FILE),
            "client.admin",
        )
        .expect("the admin key");
        let config = optio_client::ClientConfig {
            credentials: Some(credentials),
            ..optio_client::ClientConfig::default()
        };
        let client = optio_client::Client::connect_source(cluster.source().clone(), config)
            .await
            .expect("the client connects");
        for i in 0..60 {
            let pool = if i % 2 == 0 {
                optio_local::cluster::CRUSH_POOL
            } else {
                optio_local::cluster::PLAIN_POOL
            };
            client.put(pool, &format!("o{i}"), data(i, 20_000)).await.expect("a put");
        }
    });
    let console = start_console(cluster.dir(), &[]);
    let before = epoch(&cluster);
    let profile = tempfile::tempdir().expect("a browser profile directory");
    let shots = rt.block_on(async {
        let driver = start_driver().await;
        let browser = Browser::start(&driver, profile.path()).await;
        let mut shots = Vec::new();
        browser.navigate(&format!("{}/", console.base)).await;
        // Nothing but the login form before a login.
        browser
            .wait_for("the login form", Duration::from_secs(20), "return !document.getElementById('login').hidden")
            .await;
        assert_eq!(browser.script("return document.getElementById('app').hidden").await, json!(true));
        shots.push(browser.screenshot("00-login").await);
        browser.send_keys("#login-form input[name=entity]", "client.admin").await;
        browser.send_keys("#login-form input[name=key]", &key_of(&cluster, "client.admin")).await;
        browser.click("#login-form button[type=submit]").await;
        // The overview and the nine devices, from the API.
        browser
            .wait_for(
                "the nine devices",
                Duration::from_secs(60),
                "return document.body.dataset.filled === 'true' && document.querySelectorAll('#devices tbody tr').length === 9",
            )
            .await;
        let who = browser.script("return document.getElementById('who').textContent").await;
        assert_eq!(who, json!("client.admin (admin)"));
        let names = browser
            .script("return [...document.querySelectorAll('#devices tbody tr')].map((r) => r.cells[1].textContent)")
            .await;
        let expected: Vec<String> = (0..9).map(|i| format!("osd.{i}")).collect();
        assert_eq!(names, json!(expected));
        let health = browser.script("return document.getElementById('health-level').textContent").await;
        assert!(health.as_str().is_some_and(|h| h.starts_with("HEALTH_")), "{health}");
        assert_eq!(
            browser.script("return document.getElementById('epoch').textContent").await,
            json!(before.to_string())
        );
        // A placement plot per pool, a bar per device.
        let plots = browser
            .script("return [...document.querySelectorAll('#placement-plots svg')].length")
            .await;
        let pools = cluster.load_map().expect("the map").pools().len();
        assert_eq!(plots, json!(pools), "a plot per pool");
        // The rebalancing of the first epoch done before anything changes.
        browser
            .wait_for(
                "the first rebalancing done",
                Duration::from_secs(120),
                "return document.getElementById('rebalancing-total').dataset.done === 'true'",
            )
            .await;
        let overflow = browser.script(OVERFLOWING).await;
        assert_eq!(overflow, json!([]), "nothing wider than the page at 1280 px");
        shots.push(browser.screenshot("01-overview").await);
        // The devices, sorted by PG copies (a click on the column's header).
        browser.click("#devices th[data-key=pgs]").await;
        browser.script("document.getElementById('devices-section').scrollIntoView(); return true").await;
        shots.push(browser.screenshot("02-devices").await);
        shots.push(browser.screenshot_page("02-devices-full-page", 1280, 900).await);
        browser.click("#devices th[data-key=id]").await;

        // A set_attr what-if (stores nothing): osd.2's capacity doubled, only the fields
        // filled in sent; the attributed pool, which places by capacity, moves objects to it.
        browser
            .script(
                "const f = document.getElementById('whatif-form');
                 f.elements.namedItem('kind').value = 'attr';
                 f.elements.namedItem('kind').dispatchEvent(new Event('change'));
                 f.elements.namedItem('device').value = '2';
                 return true",
            )
            .await;
        let visible = browser
            .script(
                "return [...document.querySelectorAll('#whatif-form label')]
                   .filter((l) => l.offsetParent !== null).map((l) => l.firstChild.textContent.trim())",
            )
            .await;
        assert_eq!(
            visible,
            json!(["Change", "Device", "Capacity (GiB)", "Bandwidth (MB/s)", "Class"]),
            "the set_attr fields only"
        );
        browser.send_keys("#whatif-form input[name=attr-capacity]", "32").await;
        browser.click("#whatif-form button[type=submit]").await;
        let hetero = browser
            .wait_for(
                "the set_attr what-if's answer",
                Duration::from_secs(60),
                "return [...document.querySelectorAll('#whatif-moves li')].map((l) => l.textContent).find((t) => t.startsWith('hetero:')) || document.getElementById('whatif-error').textContent",
            )
            .await;
        assert!(
            hetero.as_str().is_some_and(|t| t.starts_with("hetero:") && !t.starts_with("hetero: 0 ")),
            "the attributed pool moves objects: {hetero}"
        );
        let osd2 = browser
            .script(
                "const r = [...document.querySelectorAll('#whatif-devices tbody tr')].find((r) => r.cells[0].textContent === 'osd.2');
                 return r ? r.cells[3].textContent : null",
            )
            .await;
        assert!(osd2.as_str().is_some_and(|g| g.starts_with('+')), "osd.2 gains: {osd2}");
        assert_eq!(epoch(&cluster), before, "a what-if stores nothing");

        // What-if: the form, "mark a device out", osd.4, "Show what moves".
        browser
            .script(
                "const f = document.getElementById('whatif-form');
                 f.elements.namedItem('kind').value = 'out';
                 f.elements.namedItem('kind').dispatchEvent(new Event('change'));
                 f.elements.namedItem('device').value = '4';
                 document.getElementById('whatif-summary').textContent = '';
                 f.scrollIntoView(); return true",
            )
            .await;
        browser.click("#whatif-form button[type=submit]").await;
        let summary = browser
            .wait_for(
                "the what-if's answer",
                Duration::from_secs(60),
                "return document.getElementById('whatif-summary').textContent || document.getElementById('whatif-error').textContent",
            )
            .await;
        assert!(summary.as_str().unwrap().contains("PG copies move"), "{summary}");
        let osd4 = browser
            .script(
                "const r = [...document.querySelectorAll('#whatif-devices tbody tr')].find((r) => r.cells[0].textContent === 'osd.4');
                 return r ? r.cells[3].textContent : null",
            )
            .await;
        assert!(osd4.as_str().is_some_and(|g| g.starts_with('-')), "osd.4 loses copies: {osd4}");
        assert_eq!(browser.script("return document.getElementById('commit').hidden").await, json!(false));
        browser.script("document.getElementById('whatif-section').scrollIntoView(); return true").await;
        shots.push(browser.screenshot("03-whatif").await);

        // Commit: the page asks for a confirmation (window.confirm), accepted here.
        browser.click("#commit").await;
        let asked = browser.command("GET", "/alert/text", None).await;
        assert!(
            asked.as_str().is_some_and(|t| t.contains(&format!("epoch {before} → {}", before + 1))),
            "{asked}"
        );
        browser.command("POST", "/alert/accept", None).await;
        let result = browser
            .wait_for(
                "the commit's answer",
                Duration::from_secs(60),
                "return document.getElementById('commit-result').textContent",
            )
            .await;
        assert_eq!(result, json!(format!("stored epoch {}; the servers rebalance now", before + 1)));
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.epoch().0, before + 1);
        assert!(!map.device(DeviceId(4)).expect("osd.4").is_in, "osd.4 is out");

        // The page follows the rebalancing to the new epoch until it reaches 100 %.
        let seen = browser
            .wait_for(
                "the rebalancing at 100 %",
                Duration::from_secs(180),
                &format!(
                    "const t = document.getElementById('rebalancing-total');
                     const epoch = document.getElementById('epoch').textContent;
                     return epoch === '{}' && t.dataset.done === 'true'
                       ? document.getElementById('rebalancing-figures').textContent : null",
                    before + 1
                ),
            )
            .await;
        assert!(seen.as_str().unwrap().starts_with("100 %"), "{seen}");
        let bar = browser.script("return document.getElementById('rebalancing-bar').style.width").await;
        assert_eq!(bar, json!("100%"), "the bar full");
        let rows = browser
            .script("return [...document.querySelectorAll('#servers tbody tr')].map((r) => r.cells[3].textContent)")
            .await;
        let rows = rows.as_array().expect("server rows");
        assert_eq!(rows.len(), 9, "{rows:?}");
        assert!(rows.iter().all(|r| r.as_str().unwrap().ends_with("100 %")), "{rows:?}");
        let state = browser
            .script("return [...document.querySelectorAll('#devices tbody tr')].find((r) => r.cells[1].textContent === 'osd.4').cells[4].textContent")
            .await;
        assert_eq!(state, json!("up, out"));
        browser.script("window.scrollTo(0, 0); return true").await;
        shots.push(browser.screenshot("04-rebalancing-done").await);
        shots.push(browser.screenshot_page("05-full-page", 1280, 900).await);

        // A phone: 390 px wide; nothing wider than the page but inside scrolling boxes.
        browser.window(390, 844).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let overflow = browser.script(OVERFLOWING).await;
        assert_eq!(overflow, json!([]), "nothing wider than the page at 390 px");
        browser.script("window.scrollTo(0, 0); return true").await;
        shots.push(browser.screenshot("06-phone").await);
        shots.push(browser.screenshot_page("07-phone-full-page", 390, 844).await);
        browser.quit().await;
        drop(driver);
        shots
    });
    for shot in shots {
        assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "{}", shot.display());
    }
}
