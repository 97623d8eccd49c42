//! Debian's headless `firefox-esr`, driven over Firefox's own Marionette protocol (Debian has
//! no `geckodriver`): the Firefox side of the console's real-browser test (`browser.rs`).
//!
//! Firefox starts with `--marionette` on a fresh profile whose `user.js` asks for port 0:
//! Firefox picks a free loopback port and writes it to the profile's `MarionetteActivePort`.
//! Marionette speaks over TCP in messages `LEN:JSON` (LEN the JSON's length in bytes): a
//! hello from the server first, then commands `[0, id, "WebDriver:Name", {params}]` answered
//! by `[1, id, error or null, result]` — the W3C WebDriver commands under other names.

use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::webdriver::ELEMENT;

/// The longest message read (a screenshot of a whole page is a few MiB of base64).
pub const MAX_MESSAGE: usize = 64 << 20;

/// How long a command may take to be answered (a script's own bound is Marionette's 30 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long Firefox may take to start and listen.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The profile's preferences: Marionette on a port Firefox picks; no first-run pages, default
/// browser check, updates, telemetry, studies, safe browsing lists or other traffic to the
/// outside; the profile's `chrome/userChrome.css` read (below).
const USER_JS: &str = r#"user_pref("marionette.port", 0);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.page", 0);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("startup.homepage_welcome_url", "about:blank");
user_pref("browser.aboutwelcome.enabled", false);
user_pref("browser.newtabpage.enabled", false);
user_pref("app.update.disabledForTesting", true);
user_pref("app.update.auto", false);
user_pref("app.normandy.enabled", false);
user_pref("app.shield.optoutstudies.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("datareporting.healthreport.uploadEnabled", false);
user_pref("toolkit.telemetry.enabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
user_pref("browser.safebrowsing.downloads.enabled", false);
user_pref("extensions.update.enabled", false);
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("network.proxy.type", 0);
user_pref("services.settings.server", "data:,#remote-settings-dummy/v1");
user_pref("browser.region.network.url", "");
user_pref("browser.region.update.enabled", false);
user_pref("extensions.getAddons.cache.enabled", false);
user_pref("extensions.blocklist.enabled", false);
user_pref("toolkit.legacyUserProfileCustomizations.stylesheets", true);
"#;

/// Firefox's window is at least 500 px wide (its toolbars' minimum): none, so that the page
/// can be seen at a phone's 390 px.
const USER_CHROME_CSS: &str = ":root { min-width: 0 !important; }\n";

/// One message as sent: `LEN:JSON`.
pub fn frame(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut framed = format!("{}:", body.len()).into_bytes();
    framed.extend_from_slice(body.as_bytes());
    framed
}

/// One message read: its length (ASCII digits, then `:`) — at most [`MAX_MESSAGE`] — then
/// that many bytes of JSON.
pub async fn read_message<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Value> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut length: usize = 0;
    let mut digits = 0;
    loop {
        let byte = reader.read_u8().await?;
        match byte {
            b':' if digits > 0 => break,
            b'0'..=b'9' if digits < 10 => {
                length = length * 10 + usize::from(byte - b'0');
                digits += 1;
            }
            _ => return Err(invalid(format!("a Marionette message's length: byte {byte:#04x}"))),
        }
    }
    if length > MAX_MESSAGE {
        return Err(invalid(format!(
            "a Marionette message of {length} bytes: longer than the bound, {MAX_MESSAGE}"
        )));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("a Marionette message that is not JSON: {e}")))
}

/// The Firefox process, in a process group of its own with the processes it starts: the group
/// is killed when dropped (a test that fails leaves no browser behind).
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Connection {
    stream: BufReader<TcpStream>,
    last_id: u64,
}

/// A headless Firefox with a Marionette session; killed when dropped, its profile removed.
pub struct Firefox {
    connection: Mutex<Connection>,
    process: Process,
    /// The profile (`profile/`) and Firefox's output (`firefox.log`).
    dir: tempfile::TempDir,
}

/// The end of Firefox's output, for a failure's message.
fn log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("firefox.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Firefox {
    /// A new headless Firefox (a fresh profile in a temporary directory) with a session, its
    /// window 1280 x 900.
    pub async fn start() -> Firefox {
        let dir = tempfile::tempdir().expect("a browser profile directory");
        let profile = dir.path().join("profile");
        std::fs::create_dir_all(profile.join("chrome")).expect("the profile directory");
        std::fs::write(profile.join("user.js"), USER_JS).expect("user.js");
        std::fs::write(profile.join("chrome/userChrome.css"), USER_CHROME_CSS)
            .expect("userChrome.css");
        let log = std::fs::File::create(dir.path().join("firefox.log")).expect("firefox.log");
        use std::os::unix::process::CommandExt as _;
        let child = Command::new("firefox-esr")
            .args(["--headless", "--marionette", "--no-remote", "--profile"])
            .arg(&profile)
            .env("MOZ_HEADLESS", "1")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("firefox.log"))
            .stderr(log)
            .spawn()
            .expect("firefox-esr starts");
        let mut process = Process(child);
        // The port Firefox picked, once it listens there.
        let port_file = profile.join("MarionetteActivePort");
        let deadline = Instant::now() + START_TIMEOUT;
        let stream = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Ok(port) = text.trim().parse::<u16>()
                && let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await
            {
                break stream;
            }
            if let Ok(Some(status)) = process.0.try_wait() {
                panic!(
                    "firefox-esr ended ({status}) before Marionette listened:\n{}",
                    log_tail(dir.path())
                );
            }
            assert!(
                Instant::now() < deadline,
                "firefox-esr's Marionette did not listen within {START_TIMEOUT:?}:\n{}",
                log_tail(dir.path())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut stream = BufReader::new(stream);
        let hello = tokio::time::timeout(CALL_TIMEOUT, read_message(&mut stream))
            .await
            .expect("Marionette's hello in time")
            .expect("Marionette's hello");
        assert_eq!(hello["applicationType"], json!("gecko"), "{hello}");
        assert_eq!(hello["marionetteProtocol"], json!(3), "{hello}");
        let firefox =
            Firefox { connection: Mutex::new(Connection { stream, last_id: 0 }), process, dir };
        // Marionette takes the capabilities as they are (geckodriver's job done here).
        let session = firefox
            .command(
                "WebDriver:NewSession",
                json!({ "unhandledPromptBehavior": "ignore", "pageLoadStrategy": "normal" }),
            )
            .await;
        assert!(session["sessionId"].is_string(), "a browser session: {session}");
        firefox.window(1280, 900).await;
        firefox
    }

    /// One command: its result, or the error Marionette answered (or why none came).
    async fn call(&self, name: &str, params: Value) -> Result<Value, Value> {
        let mut guard = self.connection.lock().await;
        let connection = &mut *guard;
        connection.last_id += 1;
        let id = connection.last_id;
        let exchange = async {
            connection.stream.get_mut().write_all(&frame(&json!([0, id, name, params]))).await?;
            loop {
                let reply = read_message(&mut connection.stream).await?;
                // An answer to this command (nothing else is asked meanwhile).
                if reply[0] == json!(1) && reply[1] == json!(id) {
                    return Ok::<Value, io::Error>(reply);
                }
            }
        };
        let reply = match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Err(_) => return Err(json!(format!("no answer within {CALL_TIMEOUT:?}"))),
            Ok(Err(e)) => return Err(json!(format!("the connection: {e}"))),
            Ok(Ok(reply)) => reply,
        };
        if reply[2].is_null() { Ok(reply[3].clone()) } else { Err(reply[2].clone()) }
    }

    /// One command; its result (panics on an error, with the end of Firefox's output).
    async fn command(&self, name: &str, params: Value) -> Value {
        match self.call(name, params).await {
            Ok(result) => result,
            Err(error) => {
                // The error and its message (not Firefox's own stack trace).
                let what = match (error["error"].as_str(), error["message"].as_str()) {
                    (Some(kind), Some(message)) => format!("{kind}: {message}"),
                    _ => error.to_string(),
                };
                panic!(
                    "Marionette {name}: {what}\nfirefox-esr's output, its end:\n{}",
                    log_tail(self.dir.path())
                )
            }
        }
    }

    pub async fn navigate(&self, url: &str) {
        self.command("WebDriver:Navigate", json!({ "url": url })).await;
    }

    /// The first element `css` selects: its WebDriver id.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .command("WebDriver:FindElement", json!({ "using": "css selector", "value": css }))
            .await;
        found["value"][ELEMENT].as_str().unwrap_or_else(|| panic!("{css}: {found}")).to_string()
    }

    pub async fn clear_and_type(&self, element: &str, text: &str) {
        self.command("WebDriver:ElementClear", json!({ "id": element })).await;
        self.command("WebDriver:ElementSendKeys", json!({ "id": element, "text": text })).await;
    }

    pub async fn click(&self, element: &str) {
        self.command("WebDriver:ElementClick", json!({ "id": element })).await;
    }

    /// Runs `script` (a function body) in the page; what it returns.
    pub async fn script(&self, script: &str) -> Value {
        self.command("WebDriver:ExecuteScript", json!({ "script": script, "args": [] })).await
            ["value"]
            .clone()
    }

    pub async fn window(&self, width: u64, height: u64) {
        self.command("WebDriver:SetWindowRect", json!({ "width": width, "height": height })).await;
    }

    /// A PNG of what the window shows (`full: false`: the viewport, not the whole document).
    pub async fn png(&self) -> Vec<u8> {
        let encoded = self.command("WebDriver:TakeScreenshot", json!({ "full": false })).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded["value"].as_str().expect("base64"))
            .expect("a PNG")
    }

    /// The text of the open user prompt (`alert`, `confirm`), if one is open.
    pub async fn alert_text(&self) -> Option<String> {
        match self.call("WebDriver:GetAlertText", json!({})).await {
            Ok(text) => Some(text["value"].as_str().expect("the prompt's text").to_string()),
            Err(error) if error["error"] == json!("no such alert") => None,
            Err(error) => panic!("Marionette WebDriver:GetAlertText: {error}"),
        }
    }

    pub async fn accept_alert(&self) {
        self.command("WebDriver:AcceptAlert", json!({})).await;
    }

    /// Ends the session and Firefox (whatever is left of it is killed when dropped).
    pub async fn quit(mut self) {
        let _ = self.call("Marionette:Quit", json!({})).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.process.0.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
