//! Harness, not a test: runs Ceph's `crushtool` and `osdmaptool` (the oracle) in a temporary
//! directory, reads their output, and compares it with Optio's mappings of the same map.
//!
//! Each tool invocation runs once and maps a whole range of inputs; the comparison happens in
//! process. When the tools are missing the tests skip with a message, except under `CI=true`,
//! where a missing oracle is a failure: a CI run that silently checks nothing proves nothing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use optio_placement::crush::hash::hash32_2;
use optio_placement::crush::{CrushMap, CrushWork};
use optio_placement::{ClusterMap, ItemId, RuleId};

/// Inputs per crushtool comparison (the brief asks for at least 10,000).
pub const INPUTS: u32 = 10_000;

/// A scratch directory and the two Ceph tools.
pub struct Ceph {
    dir: tempfile::TempDir,
    files: AtomicUsize,
}

/// The oracle, or `None` (after printing why) when the tools are not installed. Panics under
/// `CI=true` instead of skipping.
pub fn ceph() -> Option<Ceph> {
    let missing: Vec<&str> = ["crushtool", "osdmaptool"]
        .into_iter()
        .filter(|tool| Command::new(tool).arg("--help").output().is_err())
        .collect();
    if !missing.is_empty() {
        let message = format!(
            "{} not found: install Debian's ceph-base to run the Ceph oracle tests",
            missing.join(" and ")
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and {message}");
        }
        // Written to the stream itself, not through eprintln!, which the test harness
        // captures and hides for passing tests: a skip must be visible. Once per run.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipping the Ceph oracle tests: {message}");
        });
        return None;
    }
    let dir = tempfile::Builder::new().prefix("optio-ceph-oracle").tempdir().expect("tempdir");
    Some(Ceph { dir, files: AtomicUsize::new(0) })
}

/// One `crushtool --test --show-mappings` run.
#[derive(Clone, Debug)]
pub struct Run {
    /// The rule.
    pub rule: u32,
    /// `--num-rep`.
    pub num_rep: usize,
    /// `--pool-id`.
    pub pool_id: Option<u32>,
    /// `--weight DEVICE WEIGHT` overrides of the reweight vector.
    pub reweights: Vec<(u32, f32)>,
    /// Inputs `0..inputs`.
    pub inputs: u32,
}

impl Run {
    /// `inputs` mappings of `rule` with `num_rep` replicas.
    pub fn new(rule: u32, num_rep: usize) -> Run {
        Run { rule, num_rep, pool_id: None, reweights: Vec::new(), inputs: INPUTS }
    }
    /// With `--pool-id`.
    pub fn pool(mut self, pool_id: u32) -> Run {
        self.pool_id = Some(pool_id);
        self
    }
    /// With `--weight` overrides.
    pub fn reweights(mut self, reweights: &[(u32, f32)]) -> Run {
        self.reweights = reweights.to_vec();
        self
    }
}

impl Ceph {
    /// A fresh path in the scratch directory.
    pub fn path(&self, stem: &str) -> PathBuf {
        let n = self.files.fetch_add(1, Ordering::Relaxed);
        self.dir.path().join(format!("{stem}-{n}"))
    }

    /// Runs a tool and returns its stdout; panics with its stderr when it fails. Stdout goes
    /// through a file: the tools flush every line, and a file takes that faster than a pipe.
    pub fn run(&self, tool: &str, args: &[&str]) -> String {
        let stdout_path = self.path("stdout");
        let stdout = std::fs::File::create(&stdout_path).expect("create stdout file");
        let output = Command::new(tool)
            .args(args)
            .stdout(stdout)
            .output()
            .expect("the tool was found before");
        let stdout = std::fs::read_to_string(&stdout_path).expect("tool output is UTF-8");
        std::fs::remove_file(&stdout_path).expect("remove stdout file");
        assert!(
            output.status.success(),
            "{tool} {} failed ({}):\n{stdout}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// `crushtool --build --num_osds N layers…`; returns the binary map.
    pub fn build(&self, num_osds: u32, layers: &str) -> PathBuf {
        let out = self.path("built");
        let num = num_osds.to_string();
        let mut args = vec!["--outfn", path_str(&out), "--build", "--num_osds", &num];
        args.extend(layers.split_whitespace());
        self.run("crushtool", &args);
        out
    }

    /// `crushtool -c`: compiles a text map; returns the binary map.
    pub fn compile(&self, text: &str) -> PathBuf {
        let source = self.path("map.txt");
        std::fs::write(&source, text).expect("write map text");
        let out = self.path("compiled");
        self.run("crushtool", &["-c", path_str(&source), "-o", path_str(&out)]);
        out
    }

    /// `crushtool -i map ARGS -o new`: a modified copy (tunables, rules, …).
    pub fn modify(&self, map: &Path, args: &[&str]) -> PathBuf {
        let out = self.path("modified");
        let mut all = vec!["-i", path_str(map)];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", path_str(&out)]);
        self.run("crushtool", &all);
        out
    }

    /// `crushtool -i map --dump`: the JSON text, with exact 16.16 weights.
    pub fn dump(&self, map: &Path) -> String {
        self.run("crushtool", &["-i", path_str(map), "--dump"])
    }

    /// The map as Optio reads it from `crushtool --dump`; checks on the way that it rebuilds
    /// unchanged through `to_builder()` (shadow trees, choose_args and all).
    pub fn load(&self, map: &Path) -> ClusterMap {
        let json = self.dump(map);
        let loaded = optio_mapfile::ceph_json::parse(&json)
            .unwrap_or_else(|e| panic!("Optio refuses crushtool's dump of {map:?}: {e:?}\n{json}"));
        let rebuilt = loaded.to_builder().build().expect("an imported map rebuilds");
        assert_eq!(rebuilt, loaded, "to_builder().build() of {map:?} changed the map");
        loaded
    }

    /// What `crushtool --test --show-mappings` answers for `run`, one entry per input.
    pub fn mappings(&self, map: &Path, run: &Run) -> Vec<Vec<i32>> {
        let rule = run.rule.to_string();
        let num_rep = run.num_rep.to_string();
        let max_x = (run.inputs - 1).to_string();
        let mut args: Vec<String> = [
            "-i",
            path_str(map),
            "--test",
            "--show-mappings",
            "--rule",
            &rule,
            "--num-rep",
            &num_rep,
            "--min-x",
            "0",
            "--max-x",
            &max_x,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(pool) = run.pool_id {
            args.extend(["--pool-id".to_string(), pool.to_string()]);
        }
        for (device, weight) in &run.reweights {
            args.extend(["--weight".to_string(), device.to_string(), weight.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout = self.run("crushtool", &args);
        let mut result = Vec::with_capacity(run.inputs as usize);
        for line in stdout.lines().filter(|l| l.starts_with("CRUSH rule ")) {
            // CRUSH rule 0 x 17 [3,12,25]
            let (head, list) = line.split_once(" [").expect("a mapping line has a list");
            let x: u32 = head.rsplit(' ').next().and_then(|x| x.parse().ok()).expect("x");
            assert_eq!(x as usize, result.len(), "crushtool prints inputs in order: {line}");
            let list = list.trim_end_matches(']');
            let items = if list.is_empty() {
                Vec::new()
            } else {
                list.split(',').map(|v| v.parse::<i32>().expect("an item id")).collect()
            };
            result.push(items);
        }
        assert_eq!(
            result.len(),
            run.inputs as usize,
            "crushtool printed {} mappings for {} inputs; args {args:?}",
            result.len(),
            run.inputs
        );
        result
    }

    /// Asserts that Optio maps every input of `run` exactly as crushtool does; returns how
    /// many inputs were compared.
    pub fn assert_same(&self, what: &str, path: &Path, map: &ClusterMap, run: &Run) -> usize {
        let expected = self.mappings(path, run);
        let actual = optio_mappings(map, run);
        let mismatches: Vec<usize> =
            (0..expected.len()).filter(|&x| expected[x] != actual[x]).collect();
        if !mismatches.is_empty() {
            let mut report = format!(
                "{what}: {} of {} mappings differ from crushtool ({run:?})\n",
                mismatches.len(),
                expected.len()
            );
            for &x in mismatches.iter().take(8) {
                writeln!(report, "  x {x}: crushtool {:?}, optio {:?}", expected[x], actual[x])
                    .expect("write to string");
            }
            panic!("{report}");
        }
        expected.len()
    }

    /// Compares every rule of `rules` × replica count × {no pool, `pool`}: the usual sweep.
    pub fn sweep(
        &self,
        what: &str,
        path: &Path,
        rules: &[u32],
        replicas: &[usize],
        pool: u32,
        reweights: &[(u32, f32)],
    ) -> usize {
        let map = self.load(path);
        let mut compared = 0;
        for &rule in rules {
            for &num_rep in replicas {
                let run = Run::new(rule, num_rep).reweights(reweights);
                let label = format!("{what} rule {rule} x{num_rep}");
                compared += self.assert_same(&label, path, &map, &run);
                compared += self.assert_same(&label, path, &map, &run.pool(pool));
            }
        }
        eprintln!("{what}: {compared} mappings identical to crushtool");
        compared
    }
}

/// crushtool's reweight vector: 1.0 for every device present in the hierarchy, 0 for the
/// rest, then the `--weight` overrides, converted as crushtool does (`(int)(f * 0x10000)`,
/// clamped to 0..=0x10000).
pub fn crushtool_reweights(map: &ClusterMap, overrides: &[(u32, f32)]) -> Vec<u32> {
    let mut weights = vec![0u32; map.max_devices() as usize];
    for device in map.devices() {
        if map.parent(ItemId(device.id.0 as i32)).is_some() {
            weights[device.id.0 as usize] = 0x10000;
        }
    }
    for &(device, weight) in overrides {
        if let Some(slot) = weights.get_mut(device as usize) {
            *slot = ((weight * 65536.0) as i32).clamp(0, 0x10000) as u32;
        }
    }
    weights
}

/// Optio's answer to `run`: `crush_do_rule` on `x` (or `hash32_2(x, pool)`), with choose_args
/// set 0, else the default set (-1), as `crushtool --test` does (`--pool-id` does not select a
/// set; `crushtool_text::choose_args_of_other_ids_are_not_used_by_crushtool_test` proves it).
pub fn optio_mappings(map: &ClusterMap, run: &Run) -> Vec<Vec<i32>> {
    let crush = CrushMap::new(map);
    let mut work = CrushWork::new(&crush);
    let weights = crushtool_reweights(map, &run.reweights);
    let choose_args = crush.choose_args_exact(0).or_else(|| crush.choose_args_exact(-1));
    let mut out = vec![0i32; run.num_rep];
    (0..run.inputs)
        .map(|x| {
            let input = match run.pool_id {
                Some(pool) => hash32_2(x, pool),
                None => x,
            };
            let n =
                crush.do_rule(RuleId(run.rule), input, &mut out, &weights, choose_args, &mut work);
            out[..n].to_vec()
        })
        .collect()
}

/// A path as `&str` (the scratch directory is always valid UTF-8 here).
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}
