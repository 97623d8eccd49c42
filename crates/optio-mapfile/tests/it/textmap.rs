//! Harness, not a test: writes Ceph text maps (`crushtool -c` input) with generated
//! hierarchies, weights, classes, rules, tunables and choose_args, from a fixed seed.

use std::fmt::Write as _;

/// A small deterministic generator (splitmix64), so every run compiles the same maps.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// How device weights are drawn.
#[derive(Clone, Copy, Debug)]
pub enum Weights {
    /// Every device 1.0.
    Equal,
    /// Each device 0.001–8.000 (three decimals), `zero_percent` of them 0.
    Random {
        /// Share of zero-weight devices, in percent.
        zero_percent: u64,
    },
    /// Each device one of 0, 0.5, 1, 1, 2 or 3: many ties (straw v1's equal-weight branch).
    Few,
    /// Each device 50–100 (crushtool's limit): large 16.16 values.
    Large,
}

/// One level of the hierarchy, top-down: each bucket of this level has `fanout` children.
#[derive(Clone, Copy, Debug)]
pub struct Level {
    /// Type name (`root`, `rack`, `host`, …).
    pub type_name: &'static str,
    /// Bucket algorithm.
    pub alg: &'static str,
    /// Children per bucket.
    pub fanout: usize,
}

/// Shorthand for a [`Level`].
pub fn level(type_name: &'static str, alg: &'static str, fanout: usize) -> Level {
    Level { type_name, alg, fanout }
}

/// A generated bucket, for writing choose_args and rules against it.
#[derive(Clone, Debug)]
pub struct GenBucket {
    /// Id.
    pub id: i32,
    /// Algorithm.
    pub alg: &'static str,
    /// Number of items.
    pub size: usize,
}

/// A text map under construction.
pub struct TextMap {
    /// `tunable NAME VALUE` lines (none: Ceph's legacy values).
    pub tunables: Vec<(&'static str, u32)>,
    /// Devices, types and buckets.
    pub body: String,
    /// Rules, appended by the caller.
    pub rules: String,
    /// choose_args sections, appended by the caller.
    pub choose_args: String,
    /// Every bucket, in definition order (children first).
    pub buckets: Vec<GenBucket>,
    /// Every per-class shadow bucket (their ids are written as `id N class C`).
    pub shadow_buckets: Vec<GenBucket>,
    /// Number of devices (ids `0..devices`).
    pub devices: u32,
}

/// Where the ids of shadow buckets start (far below the ordinary ones).
const SHADOW_IDS_START: i32 = -500;

/// The tunables `crushtool --build` writes (jewel, "optimal").
pub const OPTIMAL: [(&str, u32); 8] = [
    ("choose_local_tries", 0),
    ("choose_local_fallback_tries", 0),
    ("choose_total_tries", 50),
    ("chooseleaf_descend_once", 1),
    ("chooseleaf_vary_r", 1),
    ("chooseleaf_stable", 1),
    ("straw_calc_version", 1),
    ("allowed_bucket_algs", 54),
];

/// Writes `weight` (16.16 thousandths) as the three-decimal text crushtool reads.
fn decimal(thousandths: u64) -> String {
    format!("{}.{:03}", thousandths / 1000, thousandths % 1000)
}

impl TextMap {
    /// A hierarchy of `levels` (top-down, the first is the single root named `default`) with
    /// devices under the last level, optimal tunables, and device classes drawn from
    /// `classes` (none when empty).
    pub fn hierarchy(levels: &[Level], weights: Weights, classes: &[&str], seed: u64) -> TextMap {
        let mut rng = Rng::new(seed);
        let leaves: usize = levels.iter().map(|l| l.fanout).product();
        let devices = leaves as u32;
        let mut body = String::new();
        let mut device_class: Vec<Option<usize>> = Vec::with_capacity(leaves);
        for id in 0..devices {
            if classes.is_empty() {
                device_class.push(None);
                writeln!(body, "device {id} osd.{id}").expect("write");
            } else {
                let class = rng.below(classes.len() as u64) as usize;
                device_class.push(Some(class));
                writeln!(body, "device {id} osd.{id} class {}", classes[class]).expect("write");
            }
        }
        writeln!(body, "type 0 osd").expect("write");
        for (i, level) in levels.iter().rev().enumerate() {
            writeln!(body, "type {} {}", i + 1, level.type_name).expect("write");
        }
        // Device weights in thousandths; uniform leaf buckets need equal weights inside.
        let bottom = levels.last().expect("at least one level");
        let mut device_weights = vec![0u64; leaves];
        for group in device_weights.chunks_mut(bottom.fanout) {
            let draw = |rng: &mut Rng| match weights {
                Weights::Equal => 1000,
                Weights::Random { zero_percent } => {
                    if rng.below(100) < zero_percent {
                        0
                    } else {
                        1 + rng.below(8000)
                    }
                }
                Weights::Few => [0, 500, 1000, 1000, 2000, 3000][rng.below(6) as usize],
                Weights::Large => 50_000 + rng.below(50_001),
            };
            if bottom.alg == "uniform" {
                let w = draw(&mut rng).max(1);
                group.fill(w);
            } else {
                for w in group.iter_mut() {
                    *w = draw(&mut rng);
                }
            }
        }
        let mut map = TextMap {
            tunables: OPTIMAL.to_vec(),
            body,
            rules: String::new(),
            choose_args: String::new(),
            buckets: Vec::new(),
            shadow_buckets: Vec::new(),
            devices,
        };
        // Children level by level, bottom-up: (name, weight in thousandths).
        let mut children: Vec<(String, u64)> =
            (0..leaves).map(|i| (format!("osd.{i}"), device_weights[i])).collect();
        let mut next_id = -1i32;
        // Shadow (per-class) bucket ids, named explicitly so that choose_args can use them.
        let mut next_shadow_id = SHADOW_IDS_START;
        for (depth, level) in levels.iter().enumerate().rev() {
            let mut parents = Vec::new();
            for (index, group) in children.chunks(level.fanout).enumerate() {
                let name = if depth == 0 {
                    "default".to_string()
                } else {
                    format!("{}{index}", level.type_name)
                };
                let id = next_id;
                next_id -= 1;
                // Uniform buckets hold items of one weight: use the first child's.
                let uniform_weight = group[0].1.max(1);
                let mut text = format!("{} {name} {{\n\tid {id}\n", level.type_name);
                let mut shadows = Vec::new();
                for (class_index, class) in classes.iter().enumerate() {
                    // A shadow bucket keeps the devices of its class and every child bucket.
                    let size = if depth + 1 == levels.len() {
                        let first = index * level.fanout;
                        (first..first + group.len())
                            .filter(|&d| device_class[d] == Some(class_index))
                            .count()
                    } else {
                        group.len()
                    };
                    writeln!(text, "\tid {next_shadow_id} class {class}").expect("write");
                    shadows.push(GenBucket { id: next_shadow_id, alg: level.alg, size });
                    next_shadow_id -= 1;
                }
                writeln!(text, "\talg {}\n\thash 0", level.alg).expect("write");
                let mut total = 0;
                for (child, weight) in group {
                    let weight = if level.alg == "uniform" { uniform_weight } else { *weight };
                    total += weight;
                    writeln!(text, "\titem {child} weight {}", decimal(weight)).expect("write");
                }
                text.push_str("}\n");
                map.body.push_str(&text);
                map.buckets.push(GenBucket { id, alg: level.alg, size: group.len() });
                map.shadow_buckets.extend(shadows);
                parents.push((name, total));
            }
            children = parents;
        }
        map
    }

    /// Replaces the tunables (an empty list means Ceph's legacy values).
    pub fn tunables(mut self, tunables: &[(&'static str, u32)]) -> TextMap {
        self.tunables = tunables.to_vec();
        self
    }

    /// Adds a rule (`min_size 1`, `max_size 10`, as Pacific's compiler requires).
    pub fn rule(mut self, id: u32, kind: &str, steps: &[&str]) -> TextMap {
        let mut text =
            format!("rule rule{id} {{\n\tid {id}\n\ttype {kind}\n\tmin_size 1\n\tmax_size 10\n");
        for step in steps {
            writeln!(text, "\tstep {step}").expect("write");
        }
        text.push_str("}\n");
        self.rules.push_str(&text);
        self
    }

    /// Adds a choose_args set `id` for every straw2 bucket, shadow buckets included:
    /// `positions` random weight sets (some weights 0) and, when `with_ids`, replacement ids.
    pub fn with_choose_args(
        mut self,
        id: i64,
        positions: usize,
        with_ids: bool,
        seed: u64,
    ) -> TextMap {
        let mut rng = Rng::new(seed);
        let mut text = format!("choose_args {id} {{\n");
        let buckets = self.buckets.iter().chain(&self.shadow_buckets);
        for bucket in buckets.filter(|b| b.alg == "straw2" && b.size > 0) {
            writeln!(text, "  {{\n    bucket_id {}", bucket.id).expect("write");
            if positions > 0 {
                text.push_str("    weight_set [\n");
                for _ in 0..positions {
                    let weights: Vec<String> = (0..bucket.size)
                        .map(|_| {
                            if rng.below(10) == 0 {
                                "0".to_string()
                            } else {
                                decimal(1 + rng.below(5000))
                            }
                        })
                        .collect();
                    writeln!(text, "      [ {} ]", weights.join(" ")).expect("write");
                }
                text.push_str("    ]\n");
            }
            if with_ids {
                let ids: Vec<String> =
                    (0..bucket.size).map(|_| (rng.below(2000) as i64 - 1000).to_string()).collect();
                writeln!(text, "    ids [ {} ]", ids.join(" ")).expect("write");
            }
            text.push_str("  }\n");
        }
        text.push_str("}\n");
        self.choose_args.push_str(&text);
        self
    }

    /// The complete text.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for (name, value) in &self.tunables {
            writeln!(text, "tunable {name} {value}").expect("write");
        }
        text.push_str(&self.body);
        text.push_str(&self.rules);
        text.push_str(&self.choose_args);
        text
    }
}
