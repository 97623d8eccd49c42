//! `optio console` (issue 42) on a real cluster: every endpoint answers what each capability
//! (admin, read, none) may ask and refuses the rest without changing anything; a map edit on
//! a stale epoch is refused; the what-if and dry run report the movement the CLI's `--dry-run`
//! reports and the applied change then makes; logins with a wrong key are refused and
//! counted; cookies carry their flags; a mutation without its CSRF token is refused.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use optio_local::cluster::{KEYRING_FILE, LocalCluster, ensure_entities};
use optio_placement::{ClusterMap, DeviceId, Placement, ReplicaSet};
use optio_proto::auth::{Cap, Credentials, Key};
use serde_json::{Value, json};

use crate::{binary, cluster, ok_at, runtime, small};

// The page in headless Chromium and Firefox: one scenario (browser), two protocols.
mod browser;
mod marionette;
mod webdriver;
// The storage section (volumes, S3) and a server failing under the console.
mod failures;
mod storage;

/// An `optio console` process, killed when dropped.
struct Console {
    child: Child,
    base: String,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `optio console` on a free loopback port (port 0: the line it prints names it).
fn start_console(dir: &Path, extra: &[&str]) -> Console {
    let mut child = Command::new(binary())
        .args(["console", "--listen", "127.0.0.1:0", "--cluster"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("optio console starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("its standard output"))
        .read_line(&mut line)
        .expect("optio console prints where it listens");
    let Some(rest) = line.strip_prefix("optio console listening on ") else {
        let _ = child.kill();
        panic!("optio console did not start: {line:?}");
    };
    let base = rest.split_whitespace().next().expect("an address").trim_end_matches('/');
    Console { child, base: base.to_string() }
}

/// A logged-in session: its cookie and CSRF token.
#[derive(Clone)]
struct Session {
    cookie: String,
    csrf: String,
}

fn key_of(cluster: &LocalCluster, id: &str) -> String {
    optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), id)
        .expect("the entity's key")
        .key
        .to_base64()
}

/// One request; its status, `Set-Cookie` and JSON body (`null` when not JSON).
async fn call(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    session: Option<&Session>,
    csrf: bool,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = http.request(method, format!("{base}{path}"));
    if let Some(session) = session {
        request = request.header("cookie", format!("optio_console={}", session.cookie));
        if csrf {
            request = request.header("x-csrf-token", &session.csrf);
        }
    }
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("the console answers");
    let status = response.status().as_u16();
    let cookie = response
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().expect("a text cookie").to_string());
    let text = response.text().await.expect("a body");
    (status, cookie, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn login(http: &reqwest::Client, base: &str, entity: &str, key: &str) -> Session {
    let body = json!({ "entity": entity, "key": key });
    let (status, cookie, answer) =
        call(http, base, "POST", "/api/v1/login", None, false, Some(body)).await;
    assert_eq!(status, 200, "{entity} logs in: {answer}");
    let cookie = cookie.expect("a session cookie");
    let token = cookie
        .strip_prefix("optio_console=")
        .and_then(|c| c.split(';').next())
        .expect("the cookie's value");
    Session {
        cookie: token.to_string(),
        csrf: answer["csrf_token"].as_str().expect("a CSRF token").to_string(),
    }
}

fn secured(hosts_per_zone: u32) -> (tempfile::TempDir, LocalCluster) {
    secured_with(hosts_per_zone, 1)
}

/// [`secured`] with `devices_per_host` devices per server.
fn secured_with(hosts_per_zone: u32, devices_per_host: u32) -> (tempfile::TempDir, LocalCluster) {
    let spec =
        optio_local::LocalClusterSpec { auth: true, hosts_per_zone, devices_per_host, ..small() };
    let (dir, cluster) = cluster(spec);
    ensure_entities(&cluster.dir().join(KEYRING_FILE), &[("client.reader", Cap::Read)])
        .expect("a read entity");
    (dir, cluster)
}

fn epoch(cluster: &LocalCluster) -> u64 {
    cluster.load_map().expect("the map").epoch().0
}

const GETS: [&str; 8] = [
    "/api/v1/session",
    "/api/v1/console",
    "/api/v1/health",
    "/api/v1/map",
    "/api/v1/devices",
    "/api/v1/servers",
    "/api/v1/pools",
    "/api/v1/pools/compare?pool=data",
];

#[test]
fn console_every_endpoint_answers_each_capability_what_it_may_and_refuses_the_rest() {
    let (_dir, cluster) = secured(1);
    let console = start_console(cluster.dir(), &[]);
    let base = console.base.as_str();
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        // The page and its assets: open to all, and holding no data.
        for (path, kind) in
            [("/", "text/html"), ("/console.js", "text/javascript"), ("/console.css", "text/css")]
        {
            let response = http.get(format!("{base}{path}")).send().await.expect("answers");
            assert_eq!(response.status(), 200, "{path}");
            let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
            assert!(content_type.starts_with(kind), "{path}: {content_type}");
        }
        let admin = login(&http, base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let reader = login(&http, base, "client.reader", &key_of(&cluster, "client.reader")).await;
        // API answers are never cached nor sniffed into something else.
        let response = http
            .get(format!("{base}/api/v1/map"))
            .header("cookie", format!("optio_console={}", reader.cookie))
            .send()
            .await
            .expect("answers");
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        let before = epoch(&cluster);
        for path in GETS {
            let (status, _, answer) = call(&http, base, "GET", path, None, false, None).await;
            assert_eq!(status, 401, "{path} without a session: {answer}");
            assert!(answer["error"].is_string(), "{path}: {answer}");
            for (who, session) in [("admin", &admin), ("read", &reader)] {
                let (status, _, answer) =
                    call(&http, base, "GET", path, Some(session), false, None).await;
                assert_eq!(status, 200, "{path} as {who}: {answer}");
            }
        }
        // What the answers hold: the cluster's three devices with the servers' own figures.
        let (_, _, devices) =
            call(&http, base, "GET", "/api/v1/devices", Some(&reader), false, None).await;
        let devices = devices["devices"].as_array().expect("devices");
        assert_eq!(devices.len(), 3, "{devices:?}");
        for device in devices {
            assert!(device["zone"].is_string() && device["host"].is_string(), "{device}");
            assert!(device["status"]["metrics"]["capacity_bytes"].as_u64() > Some(0), "{device}");
            assert!(device["pgs"].as_u64() > Some(0), "{device}");
        }
        let (_, _, health) =
            call(&http, base, "GET", "/api/v1/health", Some(&reader), false, None).await;
        assert_eq!(health["epoch"].as_u64(), Some(before), "{health}");
        assert!(health["health"]["level"].as_str().unwrap().starts_with("HEALTH_"), "{health}");
        let (_, _, pools) =
            call(&http, base, "GET", "/api/v1/pools", Some(&reader), false, None).await;
        for pool in pools["pools"].as_array().expect("pools") {
            assert!(pool["engine"].is_string() && pool["balance"].is_object(), "{pool}");
        }
        // A crush pool beside seed 002's and the incremental engine's placement of it: every
        // PG copy placed by each, on the pool's devices.
        let data = pools["pools"].as_array().unwrap().iter().find(|p| p["name"] == "data").cloned();
        let data = data.expect("the data pool");
        let copies = data["pg_num"].as_u64().unwrap() * data["size"].as_u64().unwrap();
        let (status, _, compare) = call(
            &http,
            base,
            "GET",
            "/api/v1/pools/compare?pool=data",
            Some(&reader),
            false,
            None,
        )
        .await;
        assert_eq!(status, 200, "{compare}");
        let engines: Vec<&str> = compare["engines"]
            .as_array()
            .expect("engines")
            .iter()
            .map(|e| e["engine"].as_str().unwrap())
            .collect();
        assert_eq!(engines, ["as_mapped", "seed002", "incremental"], "{compare}");
        for engine in compare["engines"].as_array().unwrap() {
            let counts = engine["placement"]["counts"].as_array().expect("counts");
            let total: u64 = counts.iter().map(|c| c.as_u64().unwrap()).sum();
            assert_eq!(total, copies, "{engine}");
            assert!(engine["stdev_from_ideal"].as_f64().is_some(), "{engine}");
        }
        let ring = pools["pools"].as_array().unwrap().iter().find(|p| p["engine"] == "ring");
        let ring = ring.expect("a ring pool")["name"].as_str().unwrap().to_string();
        for (path, expected) in [
            (format!("/api/v1/pools/compare?pool={ring}"), 422),
            ("/api/v1/pools/compare?pool=nothing".to_string(), 404),
            ("/api/v1/pools/compare".to_string(), 400),
        ] {
            let (status, _, answer) = call(&http, base, "GET", &path, Some(&reader), false, None).await;
            assert_eq!(status, expected, "{path}: {answer}");
            assert!(answer["error"].is_string(), "{path}: {answer}");
        }
        // Space: each pool's usage (`optio status --json`'s) and the map's raw and logical
        // totals, consistent with each other and with the devices' own per-pool figures.
        let file = cluster.dir().join("space-object");
        std::fs::write(&file, crate::data(1, 5000)).expect("an object's file");
        for i in 0..3 {
            let key = format!("space/{i}");
            crate::ok_at(cluster.dir(), &["put", &key, file.to_str().unwrap(), "--pool", "plain"]);
        }
        let mut answer: (Value, Value);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let consistent = loop {
            let get = |path: &'static str| call(&http, base, "GET", path, Some(&reader), false, None);
            let (map, pools, devices) =
                tokio::join!(get("/api/v1/map"), get("/api/v1/pools"), get("/api/v1/devices"));
            answer = (map.2, pools.2);
            let (map, pools) = &answer;
            let sum = |field: &str| {
                pools["pools"].as_array().map_or(0, |p| {
                    p.iter().filter_map(|p| p["usage"][field].as_u64()).sum::<u64>()
                })
            };
            let devices_raw: u64 = devices.2["devices"].as_array().map_or(0, |d| {
                d.iter()
                    .flat_map(|d| d["status"]["pools"].as_array().cloned().unwrap_or_default())
                    .filter_map(|p| p["bytes"].as_u64())
                    .sum()
            });
            let plain = pools["pools"]
                .as_array()
                .and_then(|p| p.iter().find(|p| p["name"] == "plain"))
                .map(|p| p["usage"].clone())
                .unwrap_or_default();
            let capacity = &map["capacity"];
            let done = plain["raw_objects"] == 9
                && plain["objects"] == 3
                && capacity["raw_used_bytes"].as_u64() == Some(sum("raw_bytes"))
                && capacity["logical_used_bytes"].as_u64() == Some(sum("logical_bytes"))
                && capacity["objects"].as_u64() == Some(sum("objects"))
                && capacity["raw_used_bytes"].as_u64() == Some(devices_raw)
                && capacity["devices_missing"] == 0;
            if done || std::time::Instant::now() > deadline {
                break done;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        };
        assert!(consistent, "{:#}\n{:#}", answer.0, answer.1);
        let plain = answer.1["pools"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "plain"))
            .expect("the plain pool")["usage"]
            .clone();
        let (raw, logical) = (plain["raw_bytes"].as_u64().unwrap(), plain["logical_bytes"].as_u64().unwrap());
        assert!(logical >= 15_000 && raw.abs_diff(3 * logical) <= 2, "{plain}");
        assert!(answer.0["capacity"]["estimate"].as_str().is_some_and(|e| e.contains("copy factor")));

        // What-if: any session, with its CSRF token; it stores nothing.
        let change = json!({ "kind": "set_state", "device": "osd.1", "in": false });
        let whatif = json!({ "change": change });
        let (status, _, _) =
            call(&http, base, "POST", "/api/v1/whatif", None, false, Some(whatif.clone())).await;
        assert_eq!(status, 401);
        let (status, _, _) =
            call(&http, base, "POST", "/api/v1/whatif", Some(&reader), false, Some(whatif.clone()))
                .await;
        assert_eq!(status, 403, "a what-if without the CSRF token");
        for session in [&reader, &admin] {
            let (status, _, answer) =
                call(&http, base, "POST", "/api/v1/whatif", Some(session), true, Some(whatif.clone()))
                    .await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["epoch_before"].as_u64(), Some(before));
        }

        // Edits: admin only, with the CSRF token; every refusal leaves the map as it was.
        let edit = |dry_run: bool| {
            json!({ "expected_epoch": before, "dry_run": dry_run, "change": change })
        };
        let refusals: [(Option<&Session>, bool, u16); 5] = [
            (None, false, 401),
            (Some(&reader), true, 403),
            (Some(&reader), false, 403),
            (Some(&admin), false, 403),
            (Some(&Session { csrf: "0".repeat(64), ..admin.clone() }), true, 403),
        ];
        for (session, csrf, expected) in refusals {
            for dry_run in [true, false] {
                let (status, _, answer) =
                    call(&http, base, "POST", "/api/v1/map/edit", session, csrf, Some(edit(dry_run)))
                        .await;
                assert_eq!(status, expected, "{answer}");
            }
        }
        assert_eq!(epoch(&cluster), before, "refused edits stored nothing");
        let (status, _, answer) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(edit(true))).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["stored"], json!(false));
        assert_eq!(epoch(&cluster), before, "a dry run stores nothing");
        let reweight = json!({
            "expected_epoch": before,
            "change": { "kind": "reweight", "device": 2, "weight": 0.5 },
        });
        let (status, _, answer) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(reweight)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["stored"], json!(true));
        assert_eq!(epoch(&cluster), before + 1);
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.device(DeviceId(2)).expect("osd.2").weight.as_f64(), 0.5);

        // Every refusal was counted; logging out ends the session (with its token only).
        let (_, _, stats) =
            call(&http, base, "GET", "/api/v1/console", Some(&admin), false, None).await;
        assert!(stats["requests_refused"].as_u64() >= Some(19), "{stats}");
        let (status, _, _) =
            call(&http, base, "POST", "/api/v1/logout", Some(&reader), false, None).await;
        assert_eq!(status, 403, "a logout without the CSRF token");
        let (status, cookie, _) =
            call(&http, base, "POST", "/api/v1/logout", Some(&reader), true, None).await;
        assert_eq!(status, 200);
        assert!(cookie.expect("the cookie is cleared").contains("Max-Age=0"));
        let (status, _, _) =
            call(&http, base, "GET", "/api/v1/session", Some(&reader), false, None).await;
        assert_eq!(status, 401, "the session is over");
    });
}

#[test]
fn console_an_edit_on_a_stale_epoch_is_refused_and_changes_nothing() {
    let (_dir, cluster) = secured(1);
    let console = start_console(cluster.dir(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let admin =
            login(&http, &console.base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let before = epoch(&cluster);
        // Someone else changes the map after the console's user looked at it.
        ok_at(cluster.dir(), &["map", "reweight", "0", "0.8"]);
        assert_eq!(epoch(&cluster), before + 1);
        for dry_run in [false, true] {
            let body = json!({
                "expected_epoch": before, "dry_run": dry_run,
                "change": { "kind": "set_state", "device": "osd.1", "in": false },
            });
            let (status, _, answer) = call(
                &http,
                &console.base,
                "POST",
                "/api/v1/map/edit",
                Some(&admin),
                true,
                Some(body),
            )
            .await;
            assert_eq!(status, 409, "{answer}");
            assert_eq!(answer["epoch"].as_u64(), Some(before + 1), "{answer}");
        }
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.epoch().0, before + 1, "nothing was stored");
        assert!(map.device(DeviceId(1)).expect("osd.1").is_in, "osd.1 is still in");
    });
}

/// Copies each device gains (negative: loses) in every PG pool from `old` to `new`, PG by
/// PG: the test's own count, not the console's.
fn pg_gains(old: &ClusterMap, new: &ClusterMap) -> Vec<(String, Vec<i64>)> {
    let (a, b) = (Placement::new(old).expect("placement"), Placement::new(new).expect("placement"));
    let (mut scratch_a, mut scratch_b) = (a.scratch(), b.scratch());
    let (mut before, mut after) = (ReplicaSet::new(), ReplicaSet::new());
    let n = old.max_devices().max(new.max_devices()) as usize;
    let mut gains = Vec::new();
    for pool in new.pools() {
        let (Some(pa), Some(pb)) = (a.pool(pool.id), b.pool(pool.id)) else { continue };
        if !pb.has_pgs() {
            continue;
        }
        let mut gained = vec![0i64; n];
        for seed in 0..pool.pg_num {
            pa.place(pa.pg_key(seed), &mut scratch_a, &mut before);
            pb.place(pb.pg_key(seed), &mut scratch_b, &mut after);
            for d in after.devices().filter(|d| !before.contains(*d)) {
                gained[d.0 as usize] += 1;
            }
            for d in before.devices().filter(|d| !after.contains(*d)) {
                gained[d.0 as usize] -= 1;
            }
        }
        gains.push((pool.name.clone(), gained));
    }
    gains
}

#[test]
fn console_the_dry_run_moves_what_the_cli_says_and_the_applied_change_then_moves() {
    let (_dir, cluster) = secured(2);
    let console = start_console(cluster.dir(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let admin =
            login(&http, &console.base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let old = cluster.load_map().expect("the map");
        let change = json!({ "kind": "set_state", "device": "osd.0", "in": false });
        let (status, _, whatif) = call(
            &http,
            &console.base,
            "POST",
            "/api/v1/whatif",
            Some(&admin),
            true,
            Some(json!({ "change": change })),
        )
        .await;
        assert_eq!(status, 200, "{whatif}");
        let body = |dry_run: bool| {
            json!({ "expected_epoch": old.epoch().0, "dry_run": dry_run, "change": change })
        };
        let (status, _, dry) =
            call(&http, &console.base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(body(true)))
                .await;
        assert_eq!(status, 200, "{dry}");
        let cli: Value = serde_json::from_str(&ok_at(
            cluster.dir(),
            &["map", "set-state", "osd.0", "--out", "--dry-run", "--json"],
        ))
        .expect("the CLI's JSON");
        assert_eq!(dry["moves"], cli["moves"], "the console's dry run is the CLI's");
        assert_eq!(whatif["moves"], cli["moves"], "and so is the what-if");
        assert_eq!(epoch(&cluster), old.epoch().0, "dry runs store nothing");
        let (status, _, applied) = call(
            &http,
            &console.base,
            "POST",
            "/api/v1/map/edit",
            Some(&admin),
            true,
            Some(body(false)),
        )
        .await;
        assert_eq!(status, 200, "{applied}");
        assert_eq!(applied["epoch"].as_u64(), Some(old.epoch().0 + 1));
        let new = cluster.load_map().expect("the map");
        assert_eq!(new.epoch().0, old.epoch().0 + 1);
        assert!(!new.device(DeviceId(0)).expect("osd.0").is_in, "osd.0 is out");
        // What the stored change moves, PG by PG, is what the dry run said, device by device.
        let gains = pg_gains(&old, &new);
        assert!(!gains.is_empty(), "the cluster has PG pools");
        let moves = dry["moves"].as_array().expect("moves per pool");
        for (pool, gained) in gains {
            let reported = moves.iter().find(|m| m["pool"] == json!(pool)).expect("the pool");
            let mut said = vec![0i64; gained.len()];
            for entry in reported["gained"].as_array().expect("gains") {
                said[entry["device"].as_u64().unwrap() as usize] = entry["copies"].as_i64().unwrap();
            }
            assert_eq!(said, gained, "pool {pool}");
            assert!(gained[0] < 0, "pool {pool}: osd.0 loses its copies");
            let moved: i64 = gained.iter().filter(|g| **g > 0).sum();
            assert_eq!(reported["moved"].as_i64(), Some(moved), "pool {pool}");
        }
    });
}

#[test]
fn console_a_wrong_key_is_refused_and_counted_and_cookies_carry_their_flags() {
    let (_dir, cluster) = secured(1);
    let console = start_console(cluster.dir(), &[]);
    let base = console.base.as_str();
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let wrong = Key::generate().expect("a key").to_base64();
        for (entity, key) in [("client.admin", wrong.as_str()), ("client.nobody", wrong.as_str())] {
            let body = json!({ "entity": entity, "key": key });
            let (status, cookie, answer) =
                call(&http, base, "POST", "/api/v1/login", None, false, Some(body)).await;
            assert_eq!(status, 401, "{entity}: {answer}");
            assert!(cookie.is_none(), "no cookie for a refused login");
        }
        // A signature made with the key logs in too, once.
        let credentials =
            optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), "client.reader")
                .expect("the key");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let signature = credentials.sign("POST", "/api/v1/login", &[], now);
        let body = json!({ "entity": "client.reader", "signature": signature });
        let (status, _, answer) =
            call(&http, base, "POST", "/api/v1/login", None, false, Some(body.clone())).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["cap"], json!("read"));
        let (status, _, _) = call(&http, base, "POST", "/api/v1/login", None, false, Some(body)).await;
        assert_eq!(status, 401, "a replayed signature");
        let forged = Credentials { id: "client.admin".into(), key: Key::generate().unwrap() };
        let body = json!({ "entity": "client.admin", "signature": forged.sign("POST", "/api/v1/login", &[], now) });
        let (status, _, _) = call(&http, base, "POST", "/api/v1/login", None, false, Some(body)).await;
        assert_eq!(status, 401, "a signature with another key");

        let body = json!({ "entity": "client.admin", "key": key_of(&cluster, "client.admin") });
        let (status, cookie, _) =
            call(&http, base, "POST", "/api/v1/login", None, false, Some(body)).await;
        assert_eq!(status, 200);
        let cookie = cookie.expect("a session cookie");
        for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
            assert!(cookie.contains(flag), "{flag} in {cookie}");
        }
        assert!(!cookie.contains("Secure"), "plain HTTP: no Secure flag: {cookie}");
        let token = cookie.strip_prefix("optio_console=").unwrap().split(';').next().unwrap();
        let admin = Session { cookie: token.to_string(), csrf: String::new() };
        let (_, _, stats) = call(&http, base, "GET", "/api/v1/console", Some(&admin), false, None).await;
        assert_eq!(stats["login_failures"].as_u64(), Some(4), "{stats}");
        assert_eq!(stats["logins"].as_u64(), Some(2), "{stats}");
    });
}

#[test]
fn console_over_https_sets_secure_cookies() {
    let (_dir, cluster) = secured(1);
    let tls_dir = tempfile::tempdir().expect("a temporary directory");
    let files = optio_local::cluster::ensure_tls(tls_dir.path(), "127.0.0.1").expect("TLS files");
    let console = start_console(
        cluster.dir(),
        &["--https-cert", files.cert.to_str().unwrap(), "--https-key", files.key.to_str().unwrap()],
    );
    assert!(console.base.starts_with("https://"), "{}", console.base);
    let rt = runtime();
    rt.block_on(async {
        let config = optio_tls::client_config(&files.ca, None).expect("a TLS client");
        let https = reqwest::Client::builder().use_preconfigured_tls(config).build().unwrap();
        let body = json!({ "entity": "client.admin", "key": key_of(&cluster, "client.admin") });
        let (status, cookie, answer) =
            call(&https, &console.base, "POST", "/api/v1/login", None, false, Some(body)).await;
        assert_eq!(status, 200, "{answer}");
        let cookie = cookie.expect("a session cookie");
        assert!(cookie.contains("; Secure"), "{cookie}");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        let plain = console.base.replace("https://", "http://");
        let plain_answer = reqwest::Client::new().get(format!("{plain}/")).send().await;
        assert!(
            !plain_answer.is_ok_and(|r| r.status().is_success()),
            "plain HTTP is not served on the HTTPS port"
        );
    });
}

#[test]
fn console_adds_and_removes_a_device_with_a_dry_run_first() {
    let (_dir, cluster) = secured(1);
    let console = start_console(cluster.dir(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let admin =
            login(&http, &console.base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let edit = |epoch: u64, dry_run: bool, change: Value| {
            json!({ "expected_epoch": epoch, "dry_run": dry_run, "change": change })
        };
        let before = epoch(&cluster);
        // A fourth device in zone z1, on a host of its own, that no server serves yet.
        let add = json!({
            "kind": "add_device", "id": 3, "at": "zone=z1,host=z1-h9",
            "capacity_bytes": 1u64 << 30, "weight": 1.0,
            "addr": "127.0.0.1:9", "allow_unreachable": true,
        });
        let base = console.base.as_str();
        let (status, _, dry) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(edit(before, true, add.clone())))
                .await;
        assert_eq!(status, 200, "{dry}");
        assert_eq!(epoch(&cluster), before, "a dry run stores nothing");
        let new_device = dry["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .find(|d| d["id"] == json!(3))
            .expect("the new device is in the report")
            .clone();
        assert_eq!(new_device["pgs_before"], json!(0));
        assert!(new_device["pgs_after"].as_u64() > Some(0), "{new_device}");
        assert!(new_device["gained"].as_i64() > Some(0), "{new_device}");
        // Without allow_unreachable, an address nothing serves is refused, and nothing stored.
        let mut unreachable = add.clone();
        unreachable["allow_unreachable"] = json!(false);
        let (status, _, answer) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(edit(before, false, unreachable)))
                .await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(epoch(&cluster), before);
        let (status, _, added) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(edit(before, false, add)))
                .await;
        assert_eq!(status, 200, "{added}");
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.epoch().0, before + 1);
        assert!(map.device(DeviceId(3)).is_some(), "the device was added");
        assert_eq!(added["moves"], dry["moves"], "what was stored is what the dry run showed");
        // And removed again (it holds nothing: no server ever served it).
        let remove = json!({ "kind": "remove_device", "device": "osd.3", "force": true });
        let (status, _, removed) =
            call(&http, base, "POST", "/api/v1/map/edit", Some(&admin), true, Some(edit(before + 1, false, remove)))
                .await;
        assert_eq!(status, 200, "{removed}");
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.epoch().0, before + 2);
        assert!(map.device(DeviceId(3)).is_none(), "the device was removed");
        // Attributes: a capacity doubled (the attributed pool places by capacity).
        let set_attr =
            json!({ "kind": "set_attr", "device": "osd.1", "capacity_bytes": 2u64 << 30 });
        let (status, _, answer) = call(
            &http,
            base,
            "POST",
            "/api/v1/map/edit",
            Some(&admin),
            true,
            Some(edit(before + 2, false, set_attr)),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let map = cluster.load_map().expect("the map");
        assert_eq!(map.epoch().0, before + 3);
        assert_eq!(map.device(DeviceId(1)).expect("osd.1").capacity_bytes, 2 << 30);
        // A change that does not apply is refused with what was wrong.
        let (status, _, answer) = call(
            &http,
            base,
            "POST",
            "/api/v1/whatif",
            Some(&admin),
            true,
            Some(json!({ "change": { "kind": "set_state", "device": "osd.42", "in": false } })),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains("osd.42"), "{answer}");
    });
}

/// What the page's script showed, run by Node against the console (`console/page_harness.js`):
/// `device`'s row asked out (and committed), the elastic membership resized to `active`
/// servers (asked only), `member` deactivated and activated again (each committed).
fn page_run(
    console: &Console,
    entity: &str,
    key: &str,
    device: &str,
    active: usize,
    member: &str,
) -> Value {
    let active = active.to_string();
    node_harness(
        "page_harness.js",
        "console.js",
        &[&console.base, entity, key, device, &active, member],
    )
}

/// Runs `tests/it/console/HARNESS` by Node on the page's script `SCRIPT` with `args`; what it
/// printed (JSON).
fn node_harness(harness: &str, script: &str, args: &[&str]) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("node")
        .arg(root.join("tests/it/console").join(harness))
        .arg(root.join("src/commands/console/assets").join(script))
        .args(args)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{harness} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("the harness prints JSON")
}

#[test]
fn console_the_page_logs_in_shows_the_cluster_and_commits_a_what_if() {
    if !crate::have_tool("node", "nodejs") {
        return;
    }
    let (_dir, cluster) = secured(2);
    let console = start_console(cluster.dir(), &[]);
    let before = epoch(&cluster);
    let map = cluster.load_map().expect("the map");
    let pools = map.pools().len();
    let membership = map.membership().expect("an elastic membership");
    let (ranked, version) = (membership.order.len(), membership.current().version);
    // A read session sees everything, is offered no commit, and a commit is refused.
    let shown = page_run(
        &console,
        "client.reader",
        &key_of(&cluster, "client.reader"),
        "0",
        ranked - 1,
        "osd.5",
    );
    assert_eq!(shown["login_shown_first"], json!(true), "{shown}");
    assert_eq!(shown["who"], json!("client.reader (read)"), "{shown}");
    assert_eq!(shown["devices"].as_array().map(Vec::len), Some(6), "{shown}");
    assert_eq!(shown["pools"].as_array().map(Vec::len), Some(pools), "{shown}");
    // A placement plot per pool, a bar per device; the page marked itself filled.
    assert_eq!(shown["plots"], json!(vec![6; pools]), "{shown}");
    assert_eq!(shown["filled"], json!("true"), "{shown}");
    assert!(shown["rebalancing"].as_str().unwrap().contains("servers done with epoch"), "{shown}");
    assert!(shown["health"].as_str().unwrap().starts_with("HEALTH_"), "{shown}");
    assert_eq!(shown["commit_hidden"], json!(true), "{shown}");
    assert!(shown["commit_result"].as_str().unwrap().starts_with("refused"), "{shown}");
    // Each kind of change shows its own fields only.
    let device = ["Change", "Device"];
    let members = ["Change", "Devices (ids or names, comma-separated)"];
    assert_eq!(
        shown["fields"],
        json!({
            "out": device, "in": device, "reweight": ["Change", "Device", "Weight"],
            "add": ["Change", "Weight", "Id", "Location", "Capacity (GiB)"], "remove": device,
            "attr": ["Change", "Device", "Capacity (GiB)", "Bandwidth (MB/s)", "Class"],
            "resize": ["Change", "Active servers (ranks 1 to N)"],
            "activate": members, "deactivate": members,
        }),
        "{shown}"
    );
    elastic_what_ifs(&shown, ranked);
    for kind in ["deactivate", "activate"] {
        assert_eq!(shown[kind]["commit_hidden"], json!(true), "{shown}");
        assert!(shown[kind]["commit_result"].as_str().unwrap().starts_with("refused"), "{shown}");
    }
    assert_eq!(shown["csrf_sent"], json!(true), "{shown}");
    assert_eq!(epoch(&cluster), before, "a read session changed nothing");
    // An admin: the what-if of osd.0 out shows it losing its copies, and the commit stores it.
    let shown = page_run(
        &console,
        "client.admin",
        &key_of(&cluster, "client.admin"),
        "0",
        ranked - 1,
        "osd.5",
    );
    assert_eq!(shown["epoch"], json!(before), "{shown}");
    let names: Vec<&str> =
        shown["devices"].as_array().unwrap().iter().map(|r| r[1].as_str().unwrap()).collect();
    assert_eq!(names, ["osd.0", "osd.1", "osd.2", "osd.3", "osd.4", "osd.5"]);
    assert!(shown["whatif_summary"].as_str().unwrap().contains("PG copies move"), "{shown}");
    let osd0 = shown["whatif_rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == json!("osd.0"))
        .unwrap_or_else(|| panic!("osd.0 in the what-if: {shown}"))
        .clone();
    assert!(osd0[3].as_str().unwrap().starts_with('-'), "osd.0 loses copies: {osd0}");
    assert_eq!(shown["commit_hidden"], json!(false), "{shown}");
    assert_eq!(
        shown["commit_result"],
        json!(format!("stored epoch {}; the servers rebalance now", before + 1)),
        "{shown}"
    );
    // The membership's changes through the form: osd.5 deactivated, then activated again.
    elastic_what_ifs(&shown, ranked);
    for (kind, stored) in [("deactivate", before + 2), ("activate", before + 3)] {
        assert_eq!(shown[kind]["commit_hidden"], json!(false), "{shown}");
        assert_eq!(
            shown[kind]["commit_result"],
            json!(format!("stored epoch {stored}; the servers rebalance now")),
            "{kind}: {shown}"
        );
    }
    assert_eq!(shown["csrf_sent"], json!(true), "{shown}");
    // (Once the servers moved to it, the versions before the one in force are pruned: an
    // epoch of the cluster's own may follow.)
    let map = cluster.load_map().expect("the map");
    assert!(map.epoch().0 >= before + 3, "{}", map.epoch().0);
    assert!(!map.device(DeviceId(0)).expect("osd.0").is_in, "osd.0 is out");
    let membership = map.membership().expect("an elastic membership");
    assert_eq!(membership.current().version, version + 2, "two membership versions stored");
    assert!(membership.is_full_power(membership.current()), "osd.5 active again");
}

/// The page's what-ifs of the elastic membership (`page_harness.js`): each sent as the API
/// documents it and shown as a membership change of `ranked` servers (nothing moves now); a
/// resize below the primaries refused with the API's reason.
fn elastic_what_ifs(shown: &Value, ranked: usize) {
    let fewer = format!("→ {} of {ranked} servers active", ranked - 1);
    let all = format!("→ {ranked} of {ranked} servers active");
    let sent = [
        ("resize", json!({ "kind": "resize", "active": ranked - 1 }), &fewer, "nothing moves"),
        (
            "deactivate",
            json!({ "kind": "deactivate", "devices": ["osd.5"] }),
            &fewer,
            "nothing moves",
        ),
        ("activate", json!({ "kind": "activate", "devices": [5] }), &all, "full power"),
    ];
    for (kind, change, active, next) in sent {
        let what_if = &shown[kind];
        assert_eq!(what_if["sent"], json!({ "change": change }), "{kind}: {shown}");
        assert_eq!(what_if["error"], json!(""), "{kind}: {shown}");
        let summary = what_if["summary"].as_str().unwrap();
        assert!(
            summary.starts_with("At epoch ") && summary.contains("membership version"),
            "{shown}"
        );
        assert!(summary.ends_with(active.as_str()), "{kind}: {shown}");
        assert!(what_if["moves"][0].as_str().unwrap().starts_with(next), "{kind}: {shown}");
    }
    let refused = &shown["resize_refused"];
    assert_eq!(refused["sent"], json!({ "change": { "kind": "resize", "active": 0 } }));
    assert!(refused["error"].as_str().unwrap().contains("primaries"), "{shown}");
}

/// A client of the cluster signing as `client.admin` (to hold a volume's lock in a test).
async fn admin_client(cluster: &LocalCluster) -> optio_client::Client {
    let dirty_spec = optio_cluster::dir::cluster_dirty_spec(cluster.dir()).expect("dirty spec");
    let dirty = optio_cluster::dirty::DirtyTable::open(dirty_spec.as_deref(), cluster.dir())
        .await
        .expect("the dirty table opens");
    let credentials =
        optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), "client.admin")
            .expect("the admin's key");
    let config = optio_client::ClientConfig {
        dirty: Some(std::sync::Arc::new(dirty)),
        credentials: Some(credentials),
        ..optio_client::ClientConfig::default()
    };
    optio_client::Client::connect_source(cluster.source().clone(), config)
        .await
        .expect("the client connects")
}

#[test]
fn console_throttles_logins_from_an_address_with_too_many_refused() {
    let (_dir, cluster) = secured(1);
    let console = start_console(
        cluster.dir(),
        &["--login-refusals-max", "3", "--login-refusal-window", "3s"],
    );
    let base = console.base.as_str();
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let wrong =
            json!({ "entity": "client.admin", "key": Key::generate().unwrap().to_base64() });
        let right = json!({ "entity": "client.admin", "key": key_of(&cluster, "client.admin") });
        // A burst of wrong keys at once: 3 are checked and refused, the others not checked.
        let mut burst =
            futures_util::future::join_all((0..8).map(|_| {
                let (http, wrong) = (http.clone(), wrong.clone());
                async move {
                    call(&http, base, "POST", "/api/v1/login", None, false, Some(wrong)).await.0
                }
            }))
            .await;
        burst.sort();
        assert_eq!(burst, [401, 401, 401, 429, 429, 429, 429, 429], "{burst:?}");
        let started = std::time::Instant::now();
        for body in [wrong.clone(), right.clone()] {
            let response = http
                .post(format!("{base}/api/v1/login"))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .expect("answers");
            assert_eq!(response.status(), 429);
            let retry: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((1..=3).contains(&retry), "Retry-After {retry}");
            let answer: Value = response.json().await.unwrap();
            assert!(answer["error"].as_str().unwrap().contains("try again"), "{answer}");
        }
        assert!(started.elapsed() < std::time::Duration::from_millis(200), "429 answers at once");
        // After the window, the right key logs in.
        tokio::time::sleep(std::time::Duration::from_millis(3200)).await;
        let admin = login(&http, base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let (_, _, stats) =
            call(&http, base, "GET", "/api/v1/console", Some(&admin), false, None).await;
        assert_eq!(stats["login_failures"].as_u64(), Some(3), "{stats}");
        assert_eq!(stats["logins_throttled"].as_u64(), Some(7), "{stats}");
        assert_eq!(stats["logins"].as_u64(), Some(1), "{stats}");
        // Many logins at once: each is answered (checked, or 429), none hangs.
        let answers =
            futures_util::future::join_all((0..16).map(|_| {
                let http = http.clone();
                let right = right.clone();
                async move {
                    call(&http, base, "POST", "/api/v1/login", None, false, Some(right)).await.0
                }
            }))
            .await;
        assert!(answers.iter().all(|s| *s == 200 || *s == 429), "{answers:?}");
    });
}

#[test]
fn console_the_what_if_of_the_elastic_membership_is_the_clis_dry_run() {
    let (_dir, cluster) = secured(2);
    let console = start_console(cluster.dir(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let admin =
            login(&http, &console.base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let map = cluster.load_map().expect("the map");
        let ranked = map.membership().expect("an elastic membership").order.len();
        let active = (ranked - 1).to_string();
        let last = "osd.5";
        // The membership in force, in the map's summary (what the form's resize starts from).
        let (status, _, summary) =
            call(&http, &console.base, "GET", "/api/v1/map", Some(&admin), false, None).await;
        assert_eq!(status, 200, "{summary}");
        let current = map.membership().expect("membership").current().version;
        assert_eq!(
            summary["membership"],
            json!({ "version": current, "active": ranked, "servers": ranked, "full_power": true }),
            "{summary}"
        );
        for (change, cli) in [
            (
                json!({ "kind": "resize", "active": ranked - 1 }),
                vec!["resize", "--active", active.as_str(), "--dry-run", "--json"],
            ),
            (
                json!({ "kind": "deactivate", "devices": [last] }),
                vec!["map", "deactivate", last, "--dry-run", "--json"],
            ),
        ] {
            let (status, _, whatif) = call(
                &http,
                &console.base,
                "POST",
                "/api/v1/whatif",
                Some(&admin),
                true,
                Some(json!({ "change": change })),
            )
            .await;
            assert_eq!(status, 200, "{change}: {whatif}");
            let cli: Value =
                serde_json::from_str(&ok_at(cluster.dir(), &cli)).expect("the CLI's JSON");
            assert_eq!(whatif["moves"], cli["moves"], "{change}: the what-if is the CLI's dry run");
        }
        // Stored through the edit, as a compare-and-swap; then activated again.
        let before = epoch(&cluster);
        for (i, change) in [
            json!({ "kind": "deactivate", "devices": [last] }),
            json!({ "kind": "activate", "devices": [5] }),
        ]
        .into_iter()
        .enumerate()
        {
            let body = json!({ "expected_epoch": before + i as u64, "change": change });
            let (status, _, answer) = call(
                &http,
                &console.base,
                "POST",
                "/api/v1/map/edit",
                Some(&admin),
                true,
                Some(body),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["stored"], json!(true));
        }
        assert_eq!(epoch(&cluster), before + 2);
        let (status, _, answer) = call(
            &http,
            &console.base,
            "POST",
            "/api/v1/whatif",
            Some(&admin),
            true,
            Some(json!({ "change": { "kind": "resize", "active": 0 } })),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains("primaries"), "{answer}");
    });
}
