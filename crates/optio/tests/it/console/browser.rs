//! The console's page in real browsers (issue 42): Debian's headless `chromium`, driven by
//! `chromedriver` over the W3C WebDriver HTTP protocol (`webdriver.rs`), and Debian's headless
//! `firefox-esr`, driven over Firefox's own Marionette protocol (`marionette.rs`; Debian has
//! no `geckodriver`), each go through one scenario, written once against [`Browser`]: log in
//! through the login form, see the nine devices of an `optio up` cluster, ask what marking one
//! out would move (the page's own controls), commit it (its confirmation accepted), and watch
//! the page's rebalancing progress reach 100 %. A screenshot of each state is kept (PNG) in
//! `$OPTIO_TEST_ARTEFACTS`, else `target/console-screenshots/`, for a look at the layout
//! (Firefox's named `firefox-…`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use optio_local::cluster::LocalCluster;
use optio_placement::DeviceId;
use serde_json::{Value, json};

use super::marionette::{self, Firefox};
use super::webdriver::Chromium;
use super::{Console, epoch, key_of, start_console};
use crate::{cluster, data, runtime};

/// Where the screenshots go.
pub fn artefacts_dir() -> PathBuf {
    match std::env::var_os("OPTIO_TEST_ARTEFACTS") {
        Some(dir) => PathBuf::from(dir),
        // The workspace's target directory (this crate is crates/optio).
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots"),
    }
}

/// Whether Chromium and its driver are here; under `CI=true` their absence fails the test.
pub fn have_chromium() -> bool {
    crate::have_tool("chromium", "chromium") && crate::have_tool("chromedriver", "chromium-driver")
}

/// Whether Firefox is here; under `CI=true` its absence fails the test.
pub fn have_firefox() -> bool {
    crate::have_tool("firefox-esr", "firefox-esr")
}

/// A browser the scenario drives, whichever protocol drives it.
enum Browser {
    Chromium(Chromium),
    Firefox(Firefox),
}

/// `$body` with `$b` the browser's own client.
macro_rules! each {
    ($browser:expr, $b:ident => $body:expr) => {
        match $browser {
            Browser::Chromium($b) => $body,
            Browser::Firefox($b) => $body,
        }
    };
}

impl Browser {
    /// What its screenshots' names start with.
    fn prefix(&self) -> &'static str {
        match self {
            Browser::Chromium(_) => "",
            Browser::Firefox(_) => "firefox-",
        }
    }

    async fn navigate(&self, url: &str) {
        each!(self, b => b.navigate(url).await)
    }

    /// Clicks the first element `css` selects.
    async fn click(&self, css: &str) {
        each!(self, b => b.click(&b.find(css).await).await)
    }

    /// Empties the first field `css` selects and types `text` into it.
    async fn send_keys(&self, css: &str, text: &str) {
        each!(self, b => b.clear_and_type(&b.find(css).await, text).await)
    }

    /// Runs `script` (a function body) in the page; what it returns.
    async fn script(&self, script: &str) -> Value {
        each!(self, b => b.script(script).await)
    }

    /// Resizes the window (its outer size).
    async fn window(&self, width: u64, height: u64) {
        each!(self, b => b.window(width, height).await)
    }

    /// The text of the user prompt (`window.confirm`) the page opens, waited for (10 s).
    async fn alert_text(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(text) = each!(self, b => b.alert_text().await) {
                return text;
            }
            assert!(Instant::now() < deadline, "no prompt within 10 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn accept_alert(&self) {
        each!(self, b => b.accept_alert().await)
    }

    async fn quit(self) {
        each!(self, b => b.quit().await)
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

    /// The window `width` x `height`, its viewport checked `width` wide (a browser may keep
    /// a window wider than asked).
    async fn viewport(&self, width: u64, height: u64) {
        self.window(width, height).await;
        let inner = self.script("return window.innerWidth").await;
        assert_eq!(inner, json!(width), "the viewport {width} px wide");
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

    /// A PNG of what the window shows, saved as `name`.png (after the browser's prefix) in
    /// [`artefacts_dir`].
    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = each!(self, b => b.png().await);
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = artefacts_dir();
        std::fs::create_dir_all(&dir).expect("the artefacts directory");
        let name = format!("{}{name}.png", self.prefix());
        let path = dir.canonicalize().expect("the artefacts directory").join(name);
        std::fs::write(&path, png).expect("the screenshot is written");
        eprintln!("screenshot: {}", path.display());
        path
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

/// `optio up`'s cluster — 3 zones x 3 hosts, a device each, nine servers, with a keyring —
/// with 60 objects written (in a PG pool and in an object-level one: data to move), and
/// `optio console` on it.
fn console_on_a_cluster() -> (tempfile::TempDir, LocalCluster, Console) {
    let spec =
        optio_local::LocalClusterSpec { auth: true, ..optio_local::LocalClusterSpec::default() };
    let (dir, cluster) = cluster(spec);
    assert_eq!(cluster.load_map().expect("the map").devices().len(), 9);
    runtime().block_on(async {
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
    (dir, cluster, console)
}

/// The scenario in `browser`, on [`console_on_a_cluster`]'s console: the screenshots taken.
async fn scenario(browser: &Browser, cluster: &LocalCluster, console: &Console) -> Vec<PathBuf> {
    let before = epoch(cluster);
    let mut shots = Vec::new();
    browser.navigate(&format!("{}/", console.base)).await;
    // Nothing but the login form before a login.
    browser
        .wait_for(
            "the login form",
            Duration::from_secs(20),
            "return !document.getElementById('login').hidden",
        )
        .await;
    assert_eq!(browser.script("return document.getElementById('app').hidden").await, json!(true));
    shots.push(browser.screenshot("00-login").await);
    browser.send_keys("#login-form input[name=entity]", "client.admin").await;
    browser.send_keys("#login-form input[name=key]", &key_of(cluster, "client.admin")).await;
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
    assert_eq!(browser.script("return window.innerWidth").await, json!(1280), "1280 px wide");
    let overflow = browser.script(OVERFLOWING).await;
    assert_eq!(overflow, json!([]), "nothing wider than the page at 1280 px");
    shots.push(browser.screenshot("01-overview").await);
    // The devices, sorted by PG copies (a click on the column's header).
    browser.click("#devices th[data-key=pgs]").await;
    browser
        .script("document.getElementById('devices-section').scrollIntoView(); return true")
        .await;
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
    assert_eq!(epoch(cluster), before, "a what-if stores nothing");

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
    assert_eq!(
        browser.script("return document.getElementById('commit').hidden").await,
        json!(false)
    );
    browser.script("document.getElementById('whatif-section').scrollIntoView(); return true").await;
    shots.push(browser.screenshot("03-whatif").await);

    // Commit: the page asks for a confirmation (window.confirm), accepted here.
    browser.click("#commit").await;
    let asked = browser.alert_text().await;
    assert!(asked.contains(&format!("epoch {before} → {}", before + 1)), "{asked}");
    browser.accept_alert().await;
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
    browser.viewport(390, 844).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let overflow = browser.script(OVERFLOWING).await;
    assert_eq!(overflow, json!([]), "nothing wider than the page at 390 px");
    browser.script("window.scrollTo(0, 0); return true").await;
    shots.push(browser.screenshot("06-phone").await);
    shots.push(browser.screenshot_page("07-phone-full-page", 390, 844).await);
    shots
}

/// The scenario in a browser `start` starts; the screenshots checked after.
fn run_in<F: Future<Output = Browser>>(start: impl FnOnce() -> F) {
    let (_dir, cluster, console) = console_on_a_cluster();
    let shots = runtime().block_on(async {
        let browser = start().await;
        let shots = scenario(&browser, &cluster, &console).await;
        browser.quit().await;
        shots
    });
    for shot in shots {
        assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "{}", shot.display());
    }
}

#[test]
fn console_in_a_real_browser_logs_in_commits_a_what_if_and_shows_the_rebalancing_done() {
    if !have_chromium() {
        return;
    }
    run_in(|| async { Browser::Chromium(Chromium::start().await) });
}

#[test]
fn console_in_firefox_logs_in_commits_a_what_if_and_shows_the_rebalancing_done() {
    if !have_firefox() {
        return;
    }
    run_in(|| async { Browser::Firefox(Firefox::start().await) });
}

/// Marionette's framing: `LEN:JSON` both ways; a length beyond the bound, a length that is
/// not digits, and a message cut short are refused.
#[test]
fn marionette_messages_are_framed_and_bounded() {
    runtime().block_on(async {
        let message = json!([1, 7, null, { "value": "epoch 1 → 2" }]);
        let framed = marionette::frame(&message);
        let text = String::from_utf8(framed.clone()).expect("UTF-8");
        let (length, body) = text.split_once(':').expect("LEN:");
        assert_eq!(length.parse::<usize>().expect("a length"), body.len(), "bytes, not chars");
        let mut two = framed.clone();
        two.extend_from_slice(&framed);
        let mut reader = &two[..];
        assert_eq!(marionette::read_message(&mut reader).await.expect("one"), message);
        assert_eq!(marionette::read_message(&mut reader).await.expect("two"), message);

        let too_long = format!("{}:", marionette::MAX_MESSAGE + 1);
        let error = marionette::read_message(&mut too_long.as_bytes()).await.expect_err("bound");
        assert!(error.to_string().contains("longer than the bound"), "{error}");
        let huge = "99999999999999999999:";
        assert!(marionette::read_message(&mut huge.as_bytes()).await.is_err(), "digits bounded");
        assert!(marionette::read_message(&mut &b"x:{}"[..]).await.is_err(), "not a length");
        assert!(marionette::read_message(&mut &b":{}"[..]).await.is_err(), "no length");
        let short = marionette::read_message(&mut &b"10:[1]"[..]).await.expect_err("cut short");
        assert_eq!(short.kind(), std::io::ErrorKind::UnexpectedEof);
        let not_json = marionette::read_message(&mut &b"3:abc"[..]).await.expect_err("JSON");
        assert!(not_json.to_string().contains("not JSON"), "{not_json}");
    });
}
