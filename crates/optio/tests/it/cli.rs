//! The `optio` binary: `up` prints how to use the cluster and leaves no server behind, even
//! when killed with SIGKILL; `put`, `get`, `probe`, `stat`, `ls`, `rm` work against it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{binary, wait_until};

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status.lines().any(|l| l.starts_with("State:") && l.contains("Z")),
        Err(_) => false,
    }
}

#[test]
fn up_serves_the_cli_and_leaves_no_orphans_when_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster_dir = dir.path().join("c");
    let mut up = Command::new(binary())
        .args(["up", "--dir"])
        .arg(&cluster_dir)
        .args(["--zones", "3", "--hosts", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("optio up starts");
    let mut lines = BufReader::new(up.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("output");
        if line.starts_with("z") && line.contains("127.0.0.1:") {
            pids.push(line.split_whitespace().last().unwrap().parse::<u32>().expect("a pid"));
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    assert_eq!(pids.len(), 3, "one server per host");
    assert!(pids.iter().all(|&p| alive(p)));
    // Prometheus' file-based discovery: one target per server, labelled with its host.
    let targets = std::fs::read_to_string(cluster_dir.join("prometheus-targets.json")).unwrap();
    let targets: serde_json::Value = serde_json::from_str(&targets).expect("JSON");
    let hosts: Vec<&str> =
        targets.as_array().unwrap().iter().filter_map(|t| t["labels"]["host"].as_str()).collect();
    assert_eq!(hosts, ["z1-h1", "z2-h1", "z3-h1"], "{targets}");
    assert!(targets[0]["targets"][0].as_str().unwrap().starts_with("127.0.0.1:"));

    let run = |args: &[&str], input: Option<&[u8]>| {
        let mut child = Command::new(binary())
            .args(args)
            .env("OPTIO_CLUSTER", &cluster_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        let mut stdin = child.stdin.take().unwrap();
        if let Some(input) = input {
            stdin.write_all(input).unwrap();
        }
        drop(stdin);
        let output = child.wait_with_output().expect("finishes");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    let (ok, _, err) = run(&["put", "greeting", "-"], Some(b"hello, optio\n"));
    assert!(ok, "{err}");
    assert!(err.contains("stored 'greeting'"), "{err}");
    let (ok, out, err) = run(&["get", "greeting"], None);
    assert!(ok, "{err}");
    assert_eq!(out, "hello, optio\n");
    let (ok, out, err) = run(&["probe", "greeting"], None);
    assert!(ok, "{err}");
    assert!(out.contains("choice record at the home: candidate"), "{out}");
    let (ok, out, _) = run(&["stat", "greeting", "--verify"], None);
    assert!(ok && out.contains("size:      13 B") && out.matches("intact").count() == 3, "{out}");
    let (ok, out, _) = run(&["ls"], None);
    assert!(ok && out.contains("greeting"), "{out}");
    // The same as JSON, for scripts.
    let json = |args: &[&str], input: Option<&[u8]>| -> serde_json::Value {
        let (ok, out, err) = run(args, input);
        assert!(ok, "{args:?}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let put = json(&["put", "j", "-", "--json"], Some(b"json!"));
    assert_eq!((put["key"].as_str(), put["size"].as_u64()), (Some("j"), Some(5)));
    assert_eq!(put["devices"].as_array().map(Vec::len), Some(3), "{put}");
    let stat = json(&["stat", "j", "--verify", "--json"], None);
    assert_eq!(stat["version"], put["version"], "{stat}");
    assert_eq!(stat["replicas"].as_array().map(|r| r.len()), Some(3), "{stat}");
    assert!(stat["replicas"].as_array().unwrap().iter().all(|r| r["state"] == "intact"));
    let probe = json(&["probe", "j", "--json"], None);
    assert!(probe["candidates"].as_array().is_some_and(|c| !c.is_empty()), "{probe}");
    let listing = json(&["ls", "--json"], None);
    let keys: Vec<&str> =
        listing["objects"].as_array().unwrap().iter().filter_map(|o| o["key"].as_str()).collect();
    assert!(keys.contains(&"j") && keys.contains(&"greeting"), "{listing}");
    let removed = json(&["rm", "j", "--json"], None);
    assert_eq!(removed["removed"], true);
    let (ok, _, _) = run(&["rm", "greeting"], None);
    assert!(ok);
    let (ok, _, err) = run(&["get", "greeting"], None);
    assert!(!ok && err.contains("no object 'greeting'"), "{err}");
    let (ok, _, err) = run(&["put", "", "-"], Some(b"x"));
    assert!(!ok && err.contains("empty"), "{err}");

    up.kill().expect("SIGKILL");
    up.wait().expect("reaped");
    assert!(
        wait_until(Duration::from_secs(20), || pids.iter().all(|&p| !alive(p))),
        "servers outlived a killed `optio up`"
    );
}

/// Starts `optio up --dir DIR` and returns it once it says it is ready, with its servers' pids.
fn start_up(cluster_dir: &std::path::Path) -> (std::process::Child, Vec<u32>) {
    let (up, servers) = start_up_with(cluster_dir, &[]);
    (up, servers.into_iter().map(|(_, pid)| pid).collect())
}

/// `optio up --zones 3 --hosts 1` and `extra` on `cluster_dir`, read until it says how to
/// stop it: the process and each server's address and pid.
fn start_up_with(
    cluster_dir: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, Vec<(String, u32)>) {
    let mut up = Command::new(binary())
        .args(["up", "--dir"])
        .arg(cluster_dir)
        .args(["--zones", "3", "--hosts", "1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("optio up starts");
    let mut servers = Vec::new();
    for line in BufReader::new(up.stdout.take().unwrap()).lines() {
        let line = line.expect("output");
        if line.starts_with("z") && line.contains("127.0.0.1:") {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let pid = fields.last().unwrap().parse::<u32>().expect("a pid");
            servers.push((fields[1].to_string(), pid));
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    (up, servers)
}

#[test]
fn a_second_up_on_the_same_directory_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster_dir = dir.path().join("c");
    let (mut first, pids) = start_up(&cluster_dir);
    assert_eq!(pids.len(), 3, "the first cluster runs");

    let mut second = Command::new(binary())
        .args(["up", "--dir"])
        .arg(&cluster_dir)
        .args(["--zones", "3", "--hosts", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let exited = wait_until(Duration::from_secs(20), || matches!(second.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = second.kill();
        let _ = second.wait();
        let _ = first.kill();
        panic!("a second `optio up` on the same directory kept running on top of the first");
    }
    let second = second.wait_with_output().expect("finishes");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second `optio up` on the same directory must fail");
    assert!(err.contains("is in use by another `optio up`"), "{err}");
    assert!(err.contains(&format!("(pid {})", first.id())), "names the holder: {err}");
    assert!(pids.iter().all(|&p| alive(p)), "the first cluster's servers are untouched");
    let ls = Command::new(binary())
        .args(["ls"])
        .env("OPTIO_CLUSTER", &cluster_dir)
        .output()
        .expect("runs");
    assert!(ls.status.success(), "the first cluster still serves");

    // SIGKILL leaves no lock behind: the kernel drops it with the process.
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    assert!(wait_until(Duration::from_secs(20), || pids.iter().all(|&p| !alive(p))));
    let (mut again, pids) = start_up(&cluster_dir);
    assert_eq!(pids.len(), 3, "a new `optio up` takes the directory over");
    again.kill().expect("SIGKILL");
    again.wait().expect("reaped");
}

#[test]
fn a_second_server_on_a_device_directory_in_use_is_refused() {
    let (_dir, cluster) = crate::cluster(crate::small());
    let device_dir = cluster.device_dir(0).expect("device 0");
    let holder = cluster.servers().iter().find(|s| s.devices.iter().any(|(id, _)| *id == 0));
    let first_pid = holder.and_then(|s| s.pid()).expect("device 0's server runs");
    let mut second = Command::new(binary())
        .args(["server", "--no-auth", "--device"])
        .arg(format!("0:1GiB:{}", device_dir.display()))
        .arg("--map")
        .arg(cluster.map_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    if !wait_until(Duration::from_secs(20), || matches!(second.try_wait(), Ok(Some(_)))) {
        let _ = second.kill();
        let _ = second.wait();
        panic!("a second server on a device directory in use kept running");
    }
    let output = second.wait_with_output().expect("finishes");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a second server on the same device directory must fail");
    assert!(err.contains("is in use by another optio server"), "{err}");
    assert!(err.contains(&format!("(pid {first_pid})")), "names the holder: {err}");
    assert!(alive(first_pid), "the first server is untouched");
}

#[test]
fn probe_marks_candidates_whose_shared_primary_cannot_tell_them_apart() {
    let (_dir, cluster) = crate::cluster(crate::small());
    let runtime = crate::runtime();
    let key = runtime.block_on(async {
        let client = crate::client(&cluster, None).await;
        let key = (0..1000)
            .map(|i| format!("shared-{i}"))
            .find(|key| {
                let candidates = client.candidates(optio_local::cluster::CRUSH_POOL, key).unwrap();
                candidates.len() == 2 && candidates[0].primary() == candidates[1].primary()
            })
            .expect("a key whose two candidates share a primary");
        client
            .put(optio_local::cluster::CRUSH_POOL, &key, bytes::Bytes::from_static(b"x"))
            .await
            .expect("stored");
        key
    });
    let output = Command::new(binary())
        .args(["probe", &key, "--pool", optio_local::cluster::CRUSH_POOL])
        .env("OPTIO_CLUSTER", cluster.dir())
        .output()
        .expect("runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert_eq!(out.matches("yes*,").count(), 2, "both rows are marked: {out}");
    assert!(out.contains("share their primary device"), "{out}");
}

/// Issue 13, defect 5: `optio server`'s timeout flags reach the server (a half-sent request
/// is cut off after `--header-timeout`), and zero or malformed values are refused.
#[test]
fn server_flags_time_out_slow_clients_and_refuse_bad_values() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("temp dir");
    let device = format!("0:1GiB:{}", dir.path().join("dev0").display());
    for (flag, value, expected) in [
        ("--idle-timeout", "0s", "--idle-timeout is zero"),
        ("--body-timeout", "soon", "--body-timeout: 'soon' is not a duration"),
        ("--max-connections", "0", "--max-connections 0 is out of range"),
        ("--workers", "0", "0 is not in 1..=1024"),
        ("--workers", "1025", "1025 is not in 1..=1024"),
    ] {
        let output = Command::new(binary())
            .args(["server", "--no-auth", "--device", &device, flag, value])
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value} is refused");
        assert!(err.contains(expected), "{flag} {value}: {err}");
    }

    let mut server = Command::new(binary())
        .args(["server", "--no-auth", "--device", &device, "--header-timeout", "300ms"])
        .args(["--max-connections", "4", "--workers", "1", "--exit-with-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("optio server starts");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = lines
        .find_map(|line| {
            line.ok()?.strip_prefix(optio_local::cluster::LISTENING_PREFIX).map(str::to_string)
        })
        .expect("the server prints its address");
    let mut half = std::net::TcpStream::connect(&addr).expect("connects");
    half.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    half.write_all(b"GET /health HTTP/1.1\r\nhost: optio\r\nx-half").unwrap();
    let started = std::time::Instant::now();
    let mut sink = Vec::new();
    let read = half.read_to_end(&mut sink);
    let after = started.elapsed();
    drop(server.stdin.take()); // the server exits with its standard input
    let _ = server.wait();
    assert!(read.is_ok(), "closed by the server, not by the read timeout: {read:?}");
    assert!(sink.is_empty(), "nothing answered: {}", String::from_utf8_lossy(&sink));
    assert!(after < Duration::from_secs(5), "cut off after about 300 ms, not {after:?}");
}

/// Shell completions and manual pages come from the same definitions as `--help`.
#[test]
fn completions_and_manual_pages() {
    for (shell, marker) in
        [("bash", "_optio()"), ("zsh", "#compdef optio"), ("fish", "complete -c optio")]
    {
        let script = crate::support::optio_ok(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: {}", &script[..script.len().min(200)]);
        assert!(script.contains("set-state"), "{shell} completes subcommands");
    }
    let refused = crate::support::optio(&["completions", "tcsh"]);
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains("invalid value 'tcsh'"), "{error}");
    let page = crate::support::optio_ok(&["man"]);
    assert!(page.contains(".TH optio 1") && page.contains("distributed object store"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let output = crate::support::optio(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(output.status.success());
    let put = std::fs::read_to_string(dir.path().join("optio-put.1")).expect("optio-put.1");
    assert!(put.contains("optio put") && put.contains("tls\\-cert"), "{put}");
    assert!(dir.path().join("optio-map-set-state.1").exists());
    // Each command offers only the flags it uses.
    let cases: [&[&str]; 4] = [
        &["get", "k", "--policy", "space"],
        &["ls", "p", "--write-quorum", "2"],
        &["rm", "k", "--verify", "--pool", "data"],
        &["probe", "k", "--write-quorum", "2"],
    ];
    for args in cases {
        let output = crate::support::optio(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("unexpected argument"), "{args:?}: {stderr}");
    }
}

/// The scheduling policy of each thread of process `pid` (`/proc/PID/task/TID/stat`'s 41st
/// field: 0 SCHED_OTHER, 3 SCHED_BATCH).
fn thread_policies(pid: u32) -> Vec<u32> {
    let mut policies = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else {
            continue; // a thread that ended meanwhile
        };
        // The fields after the command name, which may hold spaces, start at the 3rd.
        let rest = &stat[stat.rfind(") ").unwrap() + 2..];
        policies.push(rest.split(' ').nth(41 - 3).unwrap().parse().unwrap());
    }
    policies
}

/// `optio server --config FILE` runs a server from a TOML file of its flags (what the systemd
/// unit in contrib/ does); the command line overrides the file; bad files are refused clearly.
/// Its threads are SCHED_BATCH with `scheduling = "batch"`.
#[test]
fn a_server_runs_from_a_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("map.toml");
    crate::support::optio_ok(&[
        "map",
        "init",
        "--map",
        map.to_str().unwrap(),
        "--zones",
        "1",
        "--hosts",
        "1",
        "--replicas",
        "1",
        "--choices",
        "1",
    ]);
    let config = dir.path().join("server.toml");
    let devices_and_map = format!(
        "device = [\"0:1GiB:{}\"]\nmap = \"{}\"\nno-auth = true\n",
        dir.path().join("dev0").display(),
        map.display()
    );
    // A server from the file with `settings` added, and the address it listens on.
    let serve = |settings: &str, flags: &[&str]| {
        std::fs::write(&config, format!("{devices_and_map}{settings}")).unwrap();
        let mut server = Command::new(binary())
            .args(["server", "--config", config.to_str().unwrap(), "--exit-with-stdin"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix(optio_local::cluster::LISTENING_PREFIX)
            .unwrap_or_else(|| panic!("{line}"))
            .to_string();
        (server, addr)
    };
    // --listen on the command line overrides the file's (port 1 could not be bound).
    let (mut server, addr) = serve(
        "listen = \"127.0.0.1:1\"\nmigration-rate = \"10MiB\"\n",
        &["--listen", "127.0.0.1:0"],
    );
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /health HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Without --scheduling, every thread is as the server was started: SCHED_OTHER (0).
    let policies = thread_policies(server.id());
    assert!(policies.len() > 1 && policies.iter().all(|&p| p == 0), "{policies:?}");
    drop(server.stdin.take());
    assert!(server.wait().unwrap().success());

    // `scheduling = "batch"` in the file: SCHED_BATCH (3) everywhere.
    let (mut server, _) = serve("scheduling = \"batch\"\n", &[]);
    let policies = thread_policies(server.id());
    assert!(policies.len() > 1 && policies.iter().all(|&p| p == 3), "{policies:?}");
    drop(server.stdin.take());
    assert!(server.wait().unwrap().success());
    let output = crate::support::optio(&["server", "--scheduling", "fifo"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "a usage error: {stderr}");
    assert!(stderr.contains("invalid value 'fifo'") && stderr.contains("batch"), "{stderr}");

    for (text, says) in [
        ("bogus = 1\n", "unknown setting `bogus`"),
        ("no-auth = \"yes\"\n", "is a switch"),
        ("listen = [1,\n", "not valid TOML"),
        ("device = [{ a = 1 }]\n", "not a string or number"),
    ] {
        std::fs::write(&config, text).unwrap();
        let error = crate::support::optio_err(&["server", "--config", config.to_str().unwrap()]);
        assert!(error.contains(says), "{text}: {error}");
    }
    let error = crate::support::optio_err(&["server", "--config", "/nonexistent/optio.toml"]);
    assert!(error.contains("cannot read the configuration"), "{error}");
}

/// `optio up --base-port P`: servers on P, P+1, … in host order, and the Prometheus target
/// file says so; a range that does not fit is refused.
#[test]
fn up_listens_on_fixed_ports_when_asked() {
    // Three consecutive free ports (another process could take one meanwhile: try a few).
    let base = (0..20)
        .find_map(|_| {
            let first = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let port = first.local_addr().ok()?.port();
            let rest: Vec<_> = (1..3)
                .map(|i| std::net::TcpListener::bind(("127.0.0.1", port.checked_add(i)?)).ok())
                .collect::<Option<_>>()?;
            drop((first, rest));
            Some(port)
        })
        .expect("three consecutive free ports");
    let dir = tempfile::tempdir().unwrap();
    let cluster_dir = dir.path().join("c");
    let (mut up, servers) = start_up_with(&cluster_dir, &["--base-port", &base.to_string()]);
    let addrs: Vec<String> = servers.into_iter().map(|(addr, _)| addr).collect();
    let expected: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", base + i)).collect();
    let targets = std::fs::read_to_string(cluster_dir.join("prometheus-targets.json")).unwrap();
    let _ = up.kill();
    let _ = up.wait();
    assert_eq!(addrs, expected);
    for addr in &expected {
        assert!(targets.contains(addr.as_str()), "{targets}");
    }
    let error = crate::support::optio_err(&[
        "up",
        "--dir",
        dir.path().join("d").to_str().unwrap(),
        "--base-port",
        "65534",
    ]);
    assert!(error.contains("do not fit below port 65536"), "{error}");
}
