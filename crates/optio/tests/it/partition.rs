//! A network partition (issue 13), made with a network namespace: a server cut off while it
//! still runs. No acknowledged write is lost, the cut-off server refuses a write from a map it
//! knows is stale (epochs), serves no read while the map marks it down, and after the
//! partition heals it never answers an older version than the newest acknowledged.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use optio_cluster::monitor::{Graces, Monitor};
use optio_local::cluster::PLAIN_POOL;
use optio_placement::{DeviceId, MapChange};

use crate::{client, cluster, data, runtime, small};

/// A network namespace joined to the root one by a veth pair with private addresses; removed
/// on drop.
struct Namespace {
    name: String,
    root_link: String,
    inner_link: String,
    root_addr: String,
    inner_addr: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().is_ok_and(|s| s.success())
}

impl Namespace {
    fn create() -> Option<Namespace> {
        let id = std::process::id() % 200 + 20;
        let name = format!("optio-part-{}", std::process::id());
        let root_link = format!("opa{id}");
        let inner_link = format!("opb{id}");
        let (root_addr, inner_addr) = (format!("10.231.{id}.1"), format!("10.231.{id}.2"));
        let ok = ip(&["netns", "add", &name])
            && ip(&["link", "add", &root_link, "type", "veth", "peer", "name", &inner_link])
            && ip(&["link", "set", &inner_link, "netns", &name])
            && ip(&["addr", "add", &format!("{root_addr}/24"), "dev", &root_link])
            && ip(&["link", "set", &root_link, "up"])
            && ip(&[
                "netns",
                "exec",
                &name,
                "ip",
                "addr",
                "add",
                &format!("{inner_addr}/24"),
                "dev",
                &inner_link,
            ])
            && ip(&["netns", "exec", &name, "ip", "link", "set", &inner_link, "up"])
            && ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        let namespace = Namespace { name, root_link, inner_link, root_addr, inner_addr };
        ok.then_some(namespace)
    }

    /// Cuts the link (`false`) or restores it (`true`), on the namespace's side: the root
    /// side's address stays reachable from the root namespace.
    fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        assert!(ip(&["netns", "exec", &self.name, "ip", "link", "set", &self.inner_link, state]));
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        ip(&["link", "delete", &self.root_link]);
        ip(&["netns", "delete", &self.name]);
    }
}

fn namespaces_or_skip() -> Option<Namespace> {
    match Namespace::create() {
        Some(namespace) => Some(namespace),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("network namespaces are required when CI=true (root and iproute2)")
        }
        None => {
            eprintln!("skipping: cannot create a network namespace (needs root and iproute2)");
            None
        }
    }
}

/// What a device answers to a raw request from inside the namespace: the HTTP status.
fn from_inside(namespace: &Namespace, method: &str, url: &str, headers: &[(&str, String)]) -> u16 {
    let headers: Vec<String> = headers.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
    let script = format!(
        "import urllib.request, urllib.error\n\
         r = urllib.request.Request({url:?}, method={method:?}, data=(b'x' if {method:?} == 'PUT' else None), headers={{{}}})\n\
         try:\n    print(urllib.request.urlopen(r, timeout=5).status)\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n",
        headers.join(", ")
    );
    let output = Command::new("ip")
        .args(["netns", "exec", &namespace.name, "python3", "-c", &script])
        .output()
        .expect("python3 runs in the namespace");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no status: {}", String::from_utf8_lossy(&output.stderr)))
}

#[test]
fn a_server_cut_off_by_a_partition_loses_nothing_accepts_no_stale_write_and_serves_nothing_stale() {
    let Some(namespace) = namespaces_or_skip() else { return };
    // Every server listens on the root side of the veth pair, reachable from the namespace.
    let spec = optio_local::LocalClusterSpec {
        hosts_per_zone: 2,
        bind: namespace.root_addr.clone(),
        ..small()
    };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    // Device 0's server moves into the namespace: stop it, start it there on the same data.
    let device_dir = cluster.device_dir(0).unwrap();
    cluster.kill(0).unwrap();
    let mut server = Command::new("ip")
        .args(["netns", "exec", &namespace.name])
        .arg(crate::binary())
        .arg("server")
        .arg("--no-auth")
        .arg("--listen")
        .arg(format!("{}:0", namespace.inner_addr))
        .arg("--map")
        .arg(cluster.map_path())
        .arg("--device")
        .arg(format!("0:{}:{}", 1u64 << 30, device_dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("a server in the namespace");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix(optio_local::cluster::LISTENING_PREFIX)
        .expect("listening")
        .to_string();
    let change = MapChange::SetAttr {
        device: DeviceId(0),
        capacity_bytes: None,
        bandwidth_mb_per_s: None,
        class: None,
        addr: Some(addr.clone()),
    };
    cluster.change_map(&change).unwrap();
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id.0;
    let keys: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let graces = Graces { down: Duration::from_secs(1), out: Duration::from_secs(3600) };
    let mut monitor = Monitor::new(cluster.source().clone(), graces);
    rt.block_on(async {
        let writer = client(&cluster, None).await;
        for (i, key) in keys.iter().enumerate() {
            writer.put(PLAIN_POOL, key, data(i, 500)).await.expect("before the partition");
        }
        // Cut: the server runs, but nobody reaches it. Writes whose set includes it fail
        // (it may be running: it is never gone around) until the map marks it down.
        namespace.link(false);
        let cut = Instant::now();
        loop {
            let marked = monitor.round().await.expect("monitor");
            if marked.iter().any(|m| m.state == "down" && m.devices.contains(&0)) {
                break;
            }
            assert!(cut.elapsed() < Duration::from_secs(30), "device 0 was never marked down");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("cut to down: {:?}", cut.elapsed());
        // Marked down: the sets go around it, writes are acknowledged by the others.
        let writer = client(&cluster, None).await;
        for (i, key) in keys.iter().enumerate() {
            writer.put(PLAIN_POOL, key, data(1000 + i, 700)).await.expect("during the partition");
        }
        let epoch = cluster.load_map().unwrap().epoch().0;
        // Inside the partition the server still runs and reads the map (a shared file here):
        // a write from a client on the old map is refused (stale epoch), a read is refused
        // (the map marks it down).
        let url = format!("http://{addr}/v1/dev/0/objects/{pool}/p0");
        let deadline = Instant::now() + Duration::from_secs(10);
        let stale = loop {
            let status =
                from_inside(&namespace, "PUT", &url, &[("x-optio-epoch", (epoch - 1).to_string())]);
            if status == 409 || Instant::now() > deadline {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(stale, 409, "a write from the stale map is refused");
        assert_eq!(from_inside(&namespace, "GET", &url, &[]), 503, "no read while marked down");
        // Heal: marked up, it catches up before it serves; never an older version.
        namespace.link(true);
        let healed = Instant::now();
        loop {
            let marked = monitor.round().await.expect("monitor");
            if marked.iter().any(|m| m.state == "up" && m.devices.contains(&0)) {
                break;
            }
            assert!(healed.elapsed() < Duration::from_secs(30), "device 0 was never marked up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let reader = client(&cluster, None).await;
        let on_zero: Vec<(usize, &String)> = keys
            .iter()
            .enumerate()
            .filter(|(_, key)| {
                reader.candidates(PLAIN_POOL, key).unwrap()[0].devices.contains(&DeviceId(0))
            })
            .collect();
        assert!(!on_zero.is_empty());
        loop {
            let mut current = 0;
            for &(i, key) in &on_zero {
                let url = format!("http://{addr}/v1/dev/0/objects/{pool}/{key}");
                let response = http.get(&url).send().await.expect("it answers");
                match response.status().as_u16() {
                    503 => {}
                    200 => {
                        let body = response.bytes().await.unwrap();
                        assert_eq!(body, data(1000 + i, 700), "{key}: an older version served");
                        current += 1;
                    }
                    404 => {}
                    status => panic!("{key}: {status}"),
                }
            }
            if current == on_zero.len() {
                break;
            }
            assert!(Instant::now() < deadline, "device 0 did not catch up ({current} current)");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(reader.get(PLAIN_POOL, key).await.unwrap(), data(1000 + i, 700), "{key}");
        }
        eprintln!("{} keys on the cut-off device, all current after the partition", on_zero.len());
    });
    let _ = server.kill();
    let _ = server.wait();
}
