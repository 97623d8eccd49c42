//! Debian's headless `chromium`, driven by `chromedriver` over the W3C WebDriver HTTP protocol
//! (with the tests' `reqwest`): the Chromium side of the console's real-browser test
//! (`browser.rs`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::store_support::free_port;

/// The W3C name of a web element's id in JSON.
pub const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

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

/// A headless Chromium session through its own `chromedriver`; the driver (and with it the
/// browser) killed when dropped, the profile directory removed after.
pub struct Chromium {
    http: reqwest::Client,
    session: String,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// A new headless Chromium (a fresh profile in a temporary directory), its window
    /// 1280 x 900.
    pub async fn start() -> Chromium {
        let profile = tempfile::tempdir().expect("a browser profile directory");
        let driver = start_driver().await;
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
            format!("--user-data-dir={}", profile.path().display()),
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
        let session = format!("{}/session/{session}", driver.base);
        Chromium { http, session, _driver: driver, _profile: profile }
    }

    /// One WebDriver command; its `value` (panics on a WebDriver error).
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let value = self.try_command(method, path, body).await;
        assert!(value.get("error").is_none(), "WebDriver {method} {path}: {value}");
        value
    }

    /// One WebDriver command; its `value`, which may be an error.
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

    pub async fn navigate(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// The first element `css` selects: its WebDriver id.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .command("POST", "/element", Some(json!({ "using": "css selector", "value": css })))
            .await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("{css}: {found}")).to_string()
    }

    pub async fn clear_and_type(&self, element: &str, text: &str) {
        self.command("POST", &format!("/element/{element}/clear"), None).await;
        self.command("POST", &format!("/element/{element}/value"), Some(json!({ "text": text })))
            .await;
    }

    pub async fn click(&self, element: &str) {
        self.command("POST", &format!("/element/{element}/click"), None).await;
    }

    /// Runs `script` (a function body) in the page; what it returns.
    pub async fn script(&self, script: &str) -> Value {
        self.command("POST", "/execute/sync", Some(json!({ "script": script, "args": [] }))).await
    }

    pub async fn window(&self, width: u64, height: u64) {
        self.command("POST", "/window/rect", Some(json!({ "width": width, "height": height })))
            .await;
    }

    /// A PNG of what the window shows.
    pub async fn png(&self) -> Vec<u8> {
        let encoded = self.command("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("base64"))
            .expect("a PNG")
    }

    /// The text of the open user prompt (`alert`, `confirm`), if one is open.
    pub async fn alert_text(&self) -> Option<String> {
        let value = self.try_command("GET", "/alert/text", None).await;
        if value["error"] == json!("no such alert") {
            return None;
        }
        assert!(value.get("error").is_none(), "WebDriver GET /alert/text: {value}");
        Some(value.as_str().expect("the prompt's text").to_string())
    }

    pub async fn accept_alert(&self) {
        self.command("POST", "/alert/accept", None).await;
    }

    /// Ends the session (the browser quits); the driver is killed when dropped.
    pub async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}
