//! Choice records: an atomic create-if-absent at the object's home, whatever the number of
//! racing clients; only the writer may replace its own record; a deferred sync is waited on.

use futures_util::future::join_all;

use crate::{Options, TestServer, error_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_leave_exactly_one_record() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    for round in 0..20 {
        let key = format!("race{round}");
        let url = server.record(0, 1, &key);
        let attempts = (0..8u64).map(|writer| {
            let (http, url) = (server.http.clone(), url.clone());
            async move {
                let candidate = writer % 3;
                let response = http
                    .put(&url)
                    .header("x-optio-choice", format!("{candidate}/3/{writer:x}"))
                    .header("x-optio-defer-sync", "1")
                    .send()
                    .await
                    .unwrap();
                (
                    response.status().as_u16(),
                    response.headers()["x-optio-choice"].to_str().unwrap().to_string(),
                )
            }
        });
        let answers = join_all(attempts).await;
        let created = answers.iter().filter(|(status, _)| *status == 201).count();
        assert_eq!(created, 1, "{answers:?}");
        let winner = &answers.iter().find(|(s, _)| *s == 201).unwrap().1;
        assert!(answers.iter().all(|(_, record)| record == winner), "everyone sees the winner");
        let durable =
            server.http.get(&url).header("x-optio-wait-durable", "1").send().await.unwrap();
        assert_eq!(durable.headers()["x-optio-choice"].to_str().unwrap(), winner);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_restarts_and_only_their_writer_replaces_them() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let url = server.record(0, 1, "k");
    assert_eq!(
        server.http.put(&url).header("x-optio-choice", "1/2/aa").send().await.unwrap().status(),
        201
    );
    let other = server
        .http
        .put(&url)
        .header("x-optio-choice", "0/2/bb")
        .header("x-optio-replace-if-writer", "bb")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (other.status().as_u16(), other.headers()["x-optio-choice"].to_str().unwrap()),
        (200, "1/2/aa")
    );
    let own = server
        .http
        .put(&url)
        .header("x-optio-choice", "0/2/aa")
        .header("x-optio-replace-if-writer", "aa")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (own.status().as_u16(), own.headers()["x-optio-choice"].to_str().unwrap()),
        (201, "0/2/aa")
    );
    // A probe of the home carries the record when asked.
    let probe = server
        .http
        .head(server.object(0, 1, "k"))
        .header("x-optio-want-choice", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(probe.headers()["x-optio-choice"], "0/2/aa");
    server.stop().await;
    let server = TestServer::start(root.path(), Options::default()).await;
    let url = server.record(0, 1, "k");
    let record = server.http.get(&url).send().await.unwrap();
    assert_eq!(record.headers()["x-optio-choice"], "0/2/aa", "durable across a restart");
    assert_eq!(server.http.delete(&url).send().await.unwrap().status(), 204);
    let (status, kind, _) = error_of(server.http.get(&url).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (404, "not-found"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_new_records_wait_for_the_grace_period() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let url = server.record(0, 1, "kept");
    assert_eq!(
        server.http.put(&url).header("x-optio-choice", "1/2/aa").send().await.unwrap().status(),
        201
    );
    let dir = server.dirs[0].clone();
    server.stop().await;
    // A crash leaves no clean-shutdown marker.
    std::fs::remove_file(dir.join("choices.clean")).expect("a clean stop leaves the marker");
    let server = TestServer::start(root.path(), Options::default()).await;
    let kept = server.http.get(server.record(0, 1, "kept")).send().await.unwrap();
    assert_eq!(kept.headers()["x-optio-choice"], "1/2/aa", "committed records survive");
    let fresh = server.record(0, 1, "fresh");
    let (status, kind, reason) =
        error_of(server.http.put(&fresh).header("x-optio-choice", "0/2/bb").send().await.unwrap())
            .await;
    assert_eq!((status, kind.as_str()), (503, "unavailable"), "{reason}");
    let (http, fresh2) = (server.http.clone(), fresh.clone());
    let created = crate::wait_until(std::time::Duration::from_secs(10), async || {
        http.put(&fresh2).header("x-optio-choice", "0/2/bb").send().await.unwrap().status() == 201
    })
    .await;
    assert!(created, "records are created again after the grace period");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_naming_no_candidate_of_its_pool_is_refused() {
    let root = tempfile::tempdir().expect("temp dir");
    let map = root.path().join("map.toml");
    std::fs::write(
        &map,
        "format_version = 1\nepoch = 1\n\n[[devices]]\nid = 0\ncapacity = \"1GiB\"\naddr = \"127.0.0.1:1\"\nlocation = { zone = \"z1\", host = \"h1\" }\n\n\
         [[rules]]\nid = 0\nname = \"one\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type host\", \"emit\"]\n\n\
         [[pools]]\nid = 1\nname = \"data\"\nengine = \"crush\"\nrule = \"one\"\npg_num = 8\nsize = 1\nchoices = 2\npolicy = \"first\"\n",
    )
    .expect("write map");
    let server =
        TestServer::start(root.path(), Options { map: Some(map), ..Options::default() }).await;
    // Candidate 2 of a pool with k = 2, whatever the request says k is (issue 13, defect 3).
    let url = server.record(0, 1, "k");
    let refused = server.http.put(&url).header("x-optio-choice", "2/3/ab").send().await.unwrap();
    let (status, kind, reason) = error_of(refused).await;
    assert_eq!((status, kind.as_str()), (400, "bad-request"), "{reason}");
    assert!(reason.contains("pool 1, which has 2"), "{reason}");
    let missing = server.http.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 404, "nothing was recorded");
    let ok = server.http.put(&url).header("x-optio-choice", "1/2/ab").send().await.unwrap();
    assert_eq!(ok.status(), 201);
    server.stop().await;
}
