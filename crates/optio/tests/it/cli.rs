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
