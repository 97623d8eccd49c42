//! The console's volume and S3 endpoints and the page's storage section, for each capability.

use serde_json::{Value, json};

use super::{
    Console, Session, admin_client, call, key_of, login, node_harness, secured_with, start_console,
};
use optio_local::cluster::PLAIN_POOL;

use crate::{ok_at, runtime};

#[test]
fn console_volumes_s3_and_rates_answer_each_capability_what_it_may_and_refuse_the_rest() {
    // Two devices per server: the rates are per device.
    let (_dir, cluster) = secured_with(1, 2);
    let console = start_console(cluster.dir(), &[]);
    let base = console.base.as_str();
    let rt = runtime();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let admin = login(&http, base, "client.admin", &key_of(&cluster, "client.admin")).await;
        let reader = login(&http, base, "client.reader", &key_of(&cluster, "client.reader")).await;
        let volumes_cli = || -> Value {
            serde_json::from_str(&ok_at(cluster.dir(), &["volume", "ls", "--json"])).expect("JSON")
        };
        let post = |path: &'static str, who: Option<&Session>, csrf: bool, body: Value| {
            let http = http.clone();
            let who = who.cloned();
            async move { call(&http, base, "POST", path, who.as_ref(), csrf, Some(body)).await }
        };
        // Reading: any session; none gets 401.
        for path in ["/api/v1/volumes", "/api/v1/s3"] {
            let (status, _, _) = call(&http, base, "GET", path, None, false, None).await;
            assert_eq!(status, 401, "{path}");
            for session in [&reader, &admin] {
                let (status, _, answer) =
                    call(&http, base, "GET", path, Some(session), false, None).await;
                assert_eq!(status, 200, "{path}: {answer}");
            }
        }
        // Creating a volume: admin with its CSRF token only; the refused change nothing.
        let create = json!({ "name": "vol1", "size": "64MiB" });
        for (who, csrf, expected) in
            [(None, false, 401), (Some(&reader), true, 403), (Some(&admin), false, 403)]
        {
            let (status, _, answer) = post("/api/v1/volumes", who, csrf, create.clone()).await;
            assert_eq!(status, expected, "{answer}");
        }
        assert_eq!(volumes_cli(), json!([]), "refused creations stored nothing");
        let (status, _, created) =
            post("/api/v1/volumes", Some(&admin), true, create.clone()).await;
        assert_eq!(status, 200, "{created}");
        assert_eq!(created["size"], json!(64u64 << 20));
        let (status, _, again) = post("/api/v1/volumes", Some(&admin), true, create).await;
        assert_eq!(status, 409, "a second vol1: {again}");
        let (_, _, listed) =
            call(&http, base, "GET", "/api/v1/volumes", Some(&reader), false, None).await;
        assert_eq!(listed["volumes"], volumes_cli(), "the console lists what the CLI lists");
        assert_eq!(listed["volumes"][0], created, "and creation answers the CLI's shape");

        // Resizing: admin only.
        let resize = json!({ "name": "vol1", "size": 128u64 << 20 });
        for (who, csrf, expected) in [(None, false, 401), (Some(&reader), true, 403)] {
            let (status, _, _) = post("/api/v1/volumes/resize", who, csrf, resize.clone()).await;
            assert_eq!(status, expected);
        }
        assert_eq!(volumes_cli()[0]["size"], json!(64u64 << 20));
        let (status, _, resized) =
            post("/api/v1/volumes/resize", Some(&admin), true, resize.clone()).await;
        assert_eq!(status, 200, "{resized}");
        assert_eq!(
            resized,
            json!({ "volume": "vol1", "size_before": 64u64 << 20, "size": 128u64 << 20 })
        );
        assert_eq!(volumes_cli()[0]["size"], json!(128u64 << 20));
        // A smaller size without "allow_shrink": refused with a code a page can act on, and
        // nothing changed.
        let shrink = json!({ "name": "vol1", "size": "64MiB" });
        let (status, _, refused) =
            post("/api/v1/volumes/resize", Some(&admin), true, shrink.clone()).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["code"], json!("would_shrink"), "{refused}");
        assert_eq!(refused["size_before"], json!(128u64 << 20), "{refused}");
        assert_eq!(volumes_cli()[0]["size"], json!(128u64 << 20));

        // A volume in use (its lock held) is neither resized nor removed; nor one with a
        // protected snapshot.
        let client = admin_client(&cluster).await;
        let opened = optio_client::volume::Volume::open(
            &client,
            "vol1",
            optio_client::volume::OpenOptions::default(),
        )
        .await
        .expect("the volume opens read-write");
        let (status, _, answer) = post("/api/v1/volumes/resize", Some(&admin), true, resize).await;
        assert_eq!(status, 409, "{answer}");
        let rm = json!({ "name": "vol1" });
        let (status, _, answer) = post("/api/v1/volumes/rm", Some(&admin), true, rm.clone()).await;
        assert_eq!(status, 409, "a locked volume: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("lock"), "{answer}");
        opened.close().await.expect("closed");
        ok_at(cluster.dir(), &["volume", "snap", "create", "vol1@s1"]);
        ok_at(cluster.dir(), &["volume", "snap", "protect", "vol1@s1"]);
        let (status, _, answer) = post("/api/v1/volumes/rm", Some(&admin), true, rm.clone()).await;
        assert_eq!(status, 409, "a protected snapshot: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("protected"), "{answer}");
        let (_, _, listed) =
            call(&http, base, "GET", "/api/v1/volumes", Some(&reader), false, None).await;
        assert_eq!(listed["volumes"][0]["snapshots"][0]["name"], json!("s1"), "{listed}");
        ok_at(cluster.dir(), &["volume", "snap", "unprotect", "vol1@s1"]);
        for (who, csrf, expected) in [(None, false, 401), (Some(&reader), true, 403)] {
            let (status, _, _) = post("/api/v1/volumes/rm", who, csrf, rm.clone()).await;
            assert_eq!(status, expected);
        }
        assert_eq!(volumes_cli().as_array().map(Vec::len), Some(1), "still there");
        let (status, _, removed) = post("/api/v1/volumes/rm", Some(&admin), true, rm).await;
        assert_eq!(status, 200, "{removed}");
        assert_eq!(removed["removed"], json!("vol1"));
        assert_eq!(removed["in_background"], json!(true), "it had a snapshot: {removed}");

        // The CLI answers its resize and removal in the same shapes.
        ok_at(cluster.dir(), &["volume", "create", "cli-vol", "64MiB"]);
        let resized: Value = serde_json::from_str(&ok_at(
            cluster.dir(),
            &["volume", "resize", "cli-vol", "128MiB", "--json"],
        ))
        .expect("JSON");
        assert_eq!(
            resized,
            json!({ "volume": "cli-vol", "size_before": 64u64 << 20, "size": 128u64 << 20 })
        );
        let removed: Value =
            serde_json::from_str(&ok_at(cluster.dir(), &["volume", "rm", "cli-vol", "--json"]))
                .expect("JSON");
        assert_eq!(
            removed,
            json!({ "removed": "cli-vol", "data_objects_deleted": 0, "in_background": false })
        );

        // S3 users: admin only; a secret is answered once and never listed.
        let alice = json!({ "name": "alice" });
        for (who, csrf, expected) in
            [(None, false, 401), (Some(&reader), true, 403), (Some(&admin), false, 403)]
        {
            let (status, _, _) = post("/api/v1/s3/users", who, csrf, alice.clone()).await;
            assert_eq!(status, expected);
        }
        let users_cli = || -> Value {
            serde_json::from_str(&ok_at(cluster.dir(), &["s3", "user", "ls", "--json"]))
                .expect("JSON")
        };
        assert_eq!(users_cli(), json!([]));
        let (status, _, pair) = post("/api/v1/s3/users", Some(&admin), true, alice.clone()).await;
        assert_eq!(status, 200, "{pair}");
        let secret = pair["secret_key"].as_str().expect("the secret, once").to_string();
        let access = pair["access_key"].as_str().expect("the access key").to_string();
        ok_at(cluster.dir(), &["s3", "bucket", "create", "photos", "--owner", "alice"]);
        let (status, _, s3) =
            call(&http, base, "GET", "/api/v1/s3", Some(&reader), false, None).await;
        assert_eq!(status, 200, "{s3}");
        assert!(!s3.to_string().contains(&secret), "no secret is listed: {s3}");
        assert_eq!(s3["users"][0]["name"], json!("alice"));
        assert_eq!(s3["users"][0]["access_key"], json!(access));
        assert_eq!(s3["users"][0]["buckets"], json!(["photos"]));
        assert_eq!(s3["users"][0]["created_micros"], users_cli()[0]["created_micros"]);
        let buckets_cli: Value =
            serde_json::from_str(&ok_at(cluster.dir(), &["s3", "bucket", "ls", "--json"])).unwrap();
        assert_eq!(s3["buckets"], buckets_cli, "the buckets as the CLI lists them");
        for (path, who, csrf) in [
            ("/api/v1/s3/users/rotate", Some(&reader), true),
            ("/api/v1/s3/users/rm", Some(&reader), true),
            ("/api/v1/s3/users/rotate", None, false),
            ("/api/v1/s3/users/rm", Some(&admin), false),
        ] {
            let (status, _, _) = post(path, who, csrf, alice.clone()).await;
            assert!(status == 401 || status == 403, "{path}: {status}");
        }
        assert_eq!(users_cli()[0]["access_key"], json!(access), "nothing changed");
        let (status, _, rotated) =
            post("/api/v1/s3/users/rotate", Some(&admin), true, alice.clone()).await;
        assert_eq!(status, 200, "{rotated}");
        assert_ne!(rotated["access_key"], json!(access));
        assert!(rotated["secret_key"].is_string());
        assert_eq!(users_cli()[0]["access_key"], rotated["access_key"]);
        let (status, _, removed) =
            post("/api/v1/s3/users/rm", Some(&admin), true, alice.clone()).await;
        assert_eq!(status, 200, "{removed}");
        assert_eq!(removed, json!({ "removed": "alice" }));
        assert_eq!(users_cli(), json!([]));
        let (status, _, _) = post("/api/v1/s3/users/rm", Some(&admin), true, alice).await;
        assert_eq!(status, 404);

        // Rates: from the servers' /metrics, after a first scrape to compare with.
        let (_, _, first) =
            call(&http, base, "GET", "/api/v1/devices", Some(&reader), false, None).await;
        let first = first["devices"].as_array().expect("devices").clone();
        assert!(
            first.iter().all(|d| d["rates"].is_null()),
            "no rates at the first scrape: {first:?}"
        );
        // Twenty writes of one key of a pool without choices: to the three devices its
        // placement names (one per server), none to the server's other device.
        let placed = crate::support::optio_ok(&[
            "place",
            "--map",
            cluster.dir().to_str().expect("a UTF-8 path"),
            "--pool",
            PLAIN_POOL,
            "--object",
            "rate-key",
            "--json",
        ]);
        let placed: Value = serde_json::from_str(&placed).expect("optio place prints JSON");
        let written: Vec<u64> = placed[0]["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .map(|d| d.as_u64().expect("an id"))
            .collect();
        assert_eq!(written.len(), 3, "{placed}");
        let data = vec![7u8; 4096];
        for _ in 0..20 {
            client
                .put(PLAIN_POOL, "rate-key", bytes::Bytes::from(data.clone()))
                .await
                .expect("put");
        }
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
        let (_, _, second) =
            call(&http, base, "GET", "/api/v1/devices", Some(&reader), false, None).await;
        let second = second["devices"].as_array().expect("devices").clone();
        assert_eq!(second.len(), 6, "{second:?}");
        for device in &second {
            let (rates, server) = (&device["rates"], &device["server_rates"]);
            assert_eq!(rates["scope"], json!("device"), "{device}");
            assert_eq!(server["scope"], json!("server"), "{device}");
            assert!(rates["interval_s"].as_f64() > Some(0.5), "{rates}");
            // The server's totals: every server received writes (to one of its devices).
            assert!(server["requests_per_s"]["put"].as_f64() > Some(0.0), "{device}");
            let id = device["id"].as_u64().expect("an id");
            if written.contains(&id) {
                assert!(rates["requests_per_s"]["put"].as_f64() > Some(0.0), "{device}");
                assert!(rates["mean_latency_ms"].as_f64() > Some(0.0), "{device}");
                assert!(rates["received_bytes_per_s"].as_f64() > Some(0.0), "{device}");
                assert!(server["total_per_s"].as_f64() >= rates["total_per_s"].as_f64());
            } else {
                // The server's other device: nothing.
                assert_eq!(rates["total_per_s"], json!(0.0), "{device}");
                assert_eq!(rates["received_bytes_per_s"], json!(0.0), "{device}");
                assert_eq!(rates["mean_latency_ms"], Value::Null, "{device}");
            }
        }
    });

    // The page's storage section (storage.js, run by Node): a read session sees the tables, no
    // form and no control, and its creation is refused; an admin's creates the volume, resizes
    // and removes it, and creates an S3 user, gives it a new key and removes it.
    if !crate::have_tool("node", "nodejs") {
        return;
    }
    let shown = storage_run(
        &console,
        "client.reader",
        &key_of(&cluster, "client.reader"),
        "web-ro",
        "web-ro-user",
    );
    assert_eq!(shown["asked_logged_out"], json!(0), "nothing asked while logged out: {shown}");
    assert_eq!(shown["form_hidden"], json!(true), "{shown}");
    assert_eq!(shown["user_form_hidden"], json!(true), "{shown}");
    assert_eq!(shown["actions_hidden"], json!([true, true]), "{shown}");
    assert!(shown["create_result"].as_str().unwrap().starts_with("refused"), "{shown}");
    assert_eq!(shown["buckets"], json!([["photos", "data", "alice"]]), "{shown}");
    assert_eq!(shown["volumes_error"], json!(""), "{shown}");
    for row in shown["volumes"].as_array().unwrap() {
        assert_eq!(row.as_array().map(Vec::len), Some(6), "no controls: {shown}");
    }
    assert!(shown.get("resize").is_none(), "{shown}");
    let shown = storage_run(
        &console,
        "client.admin",
        &key_of(&cluster, "client.admin"),
        "web-vol",
        "web-user",
    );
    assert_eq!(shown["form_hidden"], json!(false), "{shown}");
    assert_eq!(shown["user_form_hidden"], json!(false), "{shown}");
    assert_eq!(shown["actions_hidden"], json!([false, false]), "{shown}");
    assert!(
        shown["create_result"].as_str().unwrap().starts_with("created volume web-vol"),
        "{shown}"
    );
    let names: Vec<&str> =
        shown["volumes"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
    assert!(names.contains(&"web-vol") && !names.contains(&"web-ro"), "{shown}");
    let sent = |step: &str| shown[step]["sent"].clone();
    // Volumes: resized; shrunk only once confirmed (declined: the API's refusal shown).
    let resize = |size: &str, shrink: bool| {
        let mut body = json!({ "name": "web-vol", "size": size });
        if shrink {
            body["allow_shrink"] = json!(true);
        }
        json!(["POST", "/api/v1/volumes/resize", body])
    };
    assert_eq!(sent("resize"), json!([resize("128MiB", false)]), "{shown}");
    assert_eq!(
        shown["resize"]["result"],
        json!("resized volume web-vol from 64.0 MiB to 128.0 MiB"),
        "{shown}"
    );
    assert_eq!(shown["resized_row"][1], json!("128.0 MiB"), "the list asked again: {shown}");
    assert_eq!(sent("shrink_declined"), json!([resize("64MiB", false)]), "{shown}");
    assert!(
        shown["shrink_declined"]["confirms"][0]
            .as_str()
            .unwrap()
            .starts_with("Shrink volume web-vol"),
        "{shown}"
    );
    let refusal = shown["shrink_declined"]["result"].as_str().unwrap();
    assert!(refusal.starts_with("refused: ") && refusal.contains("shrinking"), "{shown}");
    assert_eq!(sent("shrink"), json!([resize("64MiB", false), resize("64MiB", true)]), "{shown}");
    assert_eq!(shown["shrunk_row"][1], json!("64.0 MiB"), "{shown}");
    // S3: the user created, its key pair shown once, copied from the box.
    let user = json!({ "name": "web-user" });
    assert_eq!(sent("user_create"), json!([["POST", "/api/v1/s3/users", user]]), "{shown}");
    assert_eq!(shown["user_create"]["result"], json!("created S3 user web-user"), "{shown}");
    let created = &shown["created_secret"];
    assert_eq!(created["hidden"], json!(false), "{shown}");
    assert_eq!(created["user"], json!("web-user"), "{shown}");
    assert!(created["secret"].as_str().is_some_and(|s| s.len() >= 16), "{shown}");
    assert_eq!(shown["user_row"][1], created["access"], "the list asked again: {shown}");
    assert_eq!(shown["user_field_after"], json!(""), "{shown}");
    assert_eq!(shown["copied"], json!(true), "{shown}");
    // The next change (a second creation, refused with the API's reason) empties the box.
    let again = shown["user_create_again"]["result"].as_str().unwrap();
    assert!(again.starts_with("refused: "), "{shown}");
    let empty = json!({ "hidden": true, "user": "", "access": "", "secret": "" });
    assert_eq!(shown["secret_after_next_change"], empty, "{shown}");
    assert_eq!(shown["first_secret_left"], json!(false), "{shown}");
    // A new key pair: confirmed, shown once, the list's access key the new one; "Done" hides it.
    assert_eq!(sent("rotate"), json!([["POST", "/api/v1/s3/users/rotate", user]]), "{shown}");
    assert!(
        shown["rotate"]["confirms"][0].as_str().unwrap().contains("S3 user web-user"),
        "{shown}"
    );
    let rotated = &shown["rotated_secret"];
    assert_eq!(rotated["hidden"], json!(false), "{shown}");
    assert_ne!(rotated["secret"], created["secret"], "{shown}");
    assert_ne!(rotated["access"], created["access"], "{shown}");
    assert_eq!(shown["rotated_row"][1], rotated["access"], "{shown}");
    assert_eq!(shown["secret_after_done"], empty, "{shown}");
    assert_eq!(shown["rotated_secret_left"], json!(false), "{shown}");
    // Removals: a declined confirmation sends nothing; each names what it removes.
    assert_eq!(sent("user_rm_declined"), json!([]), "{shown}");
    assert_eq!(sent("user_rm"), json!([["POST", "/api/v1/s3/users/rm", user]]), "{shown}");
    assert_eq!(shown["user_rm"]["result"], json!("removed S3 user web-user"), "{shown}");
    let users: Vec<&Value> = shown["users_after"].as_array().unwrap().iter().collect();
    assert!(users.iter().all(|r| r[0] != json!("web-user")), "{shown}");
    assert_eq!(
        sent("volume_rm"),
        json!([["POST", "/api/v1/volumes/rm", { "name": "web-vol" }]]),
        "{shown}"
    );
    assert!(
        shown["volume_rm"]["confirms"][0].as_str().unwrap().starts_with("Remove volume web-vol?"),
        "{shown}"
    );
    assert_eq!(shown["volume_rm"]["result"], json!("removed volume web-vol"), "{shown}");
    let volumes: Vec<&Value> = shown["volumes_after"].as_array().unwrap().iter().collect();
    assert!(volumes.iter().all(|r| r[0] != json!("web-vol")), "{shown}");
    assert_eq!(shown["csrf_sent"], json!(true), "every change sent the CSRF token: {shown}");
    let listed: Value =
        serde_json::from_str(&ok_at(cluster.dir(), &["volume", "ls", "--json"])).unwrap();
    assert!(listed.as_array().unwrap().iter().all(|v| v["name"] != json!("web-vol")), "{listed}");
    assert_eq!(
        serde_json::from_str::<Value>(&ok_at(cluster.dir(), &["s3", "user", "ls", "--json"]))
            .unwrap(),
        json!([]),
        "the page removed its S3 user"
    );
}

/// What the page's storage script showed, run by Node (`console/storage_harness.js`).
fn storage_run(console: &Console, entity: &str, key: &str, volume: &str, user: &str) -> Value {
    node_harness("storage_harness.js", "storage.js", &[&console.base, entity, key, volume, user])
}
