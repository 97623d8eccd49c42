//! Prometheus on real server processes: requests and their latencies per operation and
//! result, device, rebalancing and process gauges, and an exposition that Prometheus' own
//! `promtool check metrics` accepts (parsed and linted).

use std::time::Duration;

use optio_local::cluster::PLAIN_POOL;

use crate::{client, cluster, data, runtime, small, wait_settled};

#[test]
fn servers_expose_metrics_that_promtool_accepts() {
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    let texts = rt.block_on(async {
        let client = client(&cluster, None).await;
        for i in 0..20 {
            client.put(PLAIN_POOL, &format!("m{i}"), data(i, 5000)).await.expect("put");
        }
        for i in 0..20 {
            client.get(PLAIN_POOL, &format!("m{i}")).await.expect("get");
        }
        assert!(client.get(PLAIN_POOL, "never-written").await.is_err());
        client.delete(PLAIN_POOL, "m0").await.expect("delete");
        wait_settled(&cluster, Duration::from_secs(30)).await;
        let mut texts = Vec::new();
        for server in cluster.servers() {
            let devices: Vec<String> =
                server.devices.iter().map(|(id, _)| id.to_string()).collect();
            let url = format!("http://{}/metrics", server.addr);
            let response = reqwest::get(&url).await.expect("metrics answer");
            assert_eq!(
                response.headers()["content-type"],
                optio_net::exposition::CONTENT_TYPE,
                "{url}"
            );
            texts.push((devices, response.text().await.unwrap()));
        }
        texts
    });
    let all = texts.iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("\n");
    for (devices, text) in &texts {
        if let Err(complaints) = optio_testkit::promtool::check_metrics(text) {
            panic!("promtool check metrics refuses the exposition:\n{complaints}\n---\n{text}");
        }
        for needed in [
            "# TYPE optio_requests_total counter",
            "# TYPE optio_request_duration_seconds histogram",
            &format!(
                "optio_request_duration_seconds_bucket{{device=\"{}\",op=\"put\",le=\"0.001\"}}",
                devices[0]
            ),
            &format!(
                "optio_request_duration_seconds_count{{device=\"{}\",op=\"put\"}}",
                devices[0]
            ),
            "# TYPE optio_device_used_bytes gauge",
            "# TYPE optio_device_corrupt_found_total counter",
            "optio_migration_phase{phase=\"done\"} 1",
            "optio_map_epoch ",
            "optio_cpu_ratio ",
            "optio_build_info{version=\"",
        ] {
            assert!(text.contains(needed), "no {needed}:\n{text}");
        }
        // Ratios are 0 to 1 (no per-mille).
        for line in text.lines().filter(|l| l.starts_with("optio_cpu_ratio ")) {
            let value: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert!((0.0..=1.0).contains(&value), "{line}");
        }
        assert!(!text.contains("permille") && !text.contains("op=\"error\""), "{text}");
        // The request series are per device: one of the server's own, or none (a request to
        // a device not served here).
        for line in text.lines().filter(|l| l.starts_with("optio_request")) {
            let device = line.split("device=\"").nth(1).and_then(|rest| rest.split('"').next());
            assert!(
                device.is_some_and(|d| d == "none" || devices.iter().any(|own| own == d)),
                "{line}"
            );
        }
    }
    // Successes and failures are told apart by result, per operation, somewhere among the
    // three servers (which one served what depends on placement), summed over the devices.
    let count = |needle: &str| -> f64 {
        all.lines()
            .filter(|l| without_device(l).starts_with(needle))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert!(count("optio_requests_total{op=\"put\",result=\"ok\"}") >= 60.0, "{all}");
    assert!(count("optio_requests_total{op=\"get\",result=\"ok\"}") >= 20.0, "{all}");
    assert!(count("optio_requests_total{op=\"get\",result=\"not-found\"}") >= 1.0, "{all}");
    assert!(count("optio_requests_total{op=\"delete\",result=\"ok\"}") >= 3.0, "{all}");
    assert!(count("optio_request_duration_seconds_count{op=\"get\"}") >= 21.0, "{all}");
    // Every acknowledged PUT was made durable on each of its three replicas.
    assert!(count("optio_disk_syncs_total") >= 60.0, "{all}");
}

/// `optio bench` says what each operation cost: the client's CPU, the servers' CPU and the
/// servers' syncs, per phase — a write syncs on every replica, a read never; with
/// `--metadata`, a stat never either, and a delete leaves nothing behind.
#[test]
fn bench_reports_the_cpu_and_syncs_each_operation_costs() {
    let (_dir, cluster) = cluster(small());
    let dir = cluster.dir().to_str().unwrap().to_string();
    let out = crate::support::optio_ok(&[
        "bench",
        "--cluster",
        &dir,
        "--pool",
        PLAIN_POOL,
        "--objects",
        "40",
        "--size",
        "4KiB",
        "--concurrency",
        "4",
        "--json",
        "--metadata",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).expect("bench prints JSON");
    let cost = |phase: &str, what: &str| {
        report["cost"][phase][what].as_f64().unwrap_or_else(|| panic!("no {phase}.{what}: {out}"))
    };
    // Three replicas, each durable through its device's journal: at most one sync each
    // (concurrent writes share them), never the two of a file and its directory.
    let syncs = cost("write", "syncs_per_op");
    assert!(syncs > 0.0 && syncs <= 3.5, "{syncs} syncs per write: {out}");
    assert!(cost("read", "syncs_per_op") < 0.5, "reads do not sync: {out}");
    assert!(cost("stat", "syncs_per_op") < 0.5, "stats do not sync: {out}");
    // A tombstone on each replica, through the journal.
    let syncs = cost("delete", "syncs_per_op");
    assert!(syncs > 0.0 && syncs <= 3.5, "{syncs} syncs per delete: {out}");
    for phase in ["write", "read", "stat", "delete"] {
        assert!(cost(phase, "servers_cpu_us_per_op") > 0.0, "{out}");
        assert!(cost(phase, "client_cpu_us_per_op") > 0.0, "{out}");
        assert_eq!(report[phase]["operations"], 40, "{phase}: {out}");
    }
    // Every object was removed: the listing of the bench's prefix is empty.
    let listed = crate::support::optio_ok(&[
        "ls",
        "--cluster",
        &dir,
        "--pool",
        PLAIN_POOL,
        "--json",
        "bench/",
    ]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("ls prints JSON");
    assert_eq!(listed["objects"], serde_json::json!([]), "left after the delete phase: {listed}");
}

/// A sample's line without its `device` label (the first label: `{device="3",op=…` becomes
/// `{op=…`).
fn without_device(line: &str) -> String {
    match line.split_once("{device=\"") {
        Some((name, rest)) => match rest.split_once("\",") {
            Some((_, labels)) => format!("{name}{{{labels}"),
            None => line.to_string(),
        },
        None => line.to_string(),
    }
}
