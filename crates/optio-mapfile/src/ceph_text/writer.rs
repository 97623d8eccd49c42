//! Writes a map in the layout of `crushtool -d` (`CrushCompiler::decompile`).

use std::collections::HashMap;
use std::fmt::Write as _;

use optio_placement::{Bucket, BucketAlg, BucketId, ClusterMap, RuleKind, Tunables};

use crate::fixed::weight_to_text;
use crate::steps::{format_step, item_name};

/// Ceph's `CRUSH_LEGACY_ALLOWED_BUCKET_ALGS`: uniform, list and straw.
const LEGACY_ALLOWED_BUCKET_ALGS: u32 = (1 << 1) | (1 << 2) | (1 << 4);

/// The text of `map` as `crushtool -d` writes it.
pub(crate) fn write(map: &ClusterMap) -> String {
    let mut out = String::with_capacity(256 + 64 * map.devices().len());
    out.push_str("# begin crush map\n");
    write_tunables(&mut out, map.tunables());

    out.push_str("\n# devices\n");
    for device in map.devices() {
        let _ = write!(out, "device {} {}", device.id, device.name);
        if let Some(class) = &device.class {
            let _ = write!(out, " class {class}");
        }
        out.push('\n');
    }

    out.push_str("\n# types\n");
    for t in map.types() {
        let _ = writeln!(out, "type {} {}", t.id, t.name);
    }

    out.push_str("\n# buckets\n");
    let shadows = shadow_ids(map);
    for bucket in decompile_order(map) {
        write_bucket(&mut out, map, bucket, shadows.get(&bucket.id).map_or(&[][..], Vec::as_slice));
    }

    out.push_str("\n# rules\n");
    for rule in map.rules() {
        let _ = writeln!(out, "rule {} {{", rule.name);
        let _ = writeln!(out, "\tid {}", rule.id);
        match rule.kind {
            RuleKind::Replicated => out.push_str("\ttype replicated\n"),
            RuleKind::Erasure => out.push_str("\ttype erasure\n"),
            RuleKind::Other(code) => {
                let _ = writeln!(out, "\ttype {code}");
            }
        }
        let _ = writeln!(out, "\tmin_size {}", rule.min_size);
        let _ = writeln!(out, "\tmax_size {}", rule.max_size);
        for step in &rule.steps {
            let _ = writeln!(out, "\tstep {}", format_step(map, step));
        }
        out.push_str("}\n");
    }

    if !map.choose_args().is_empty() {
        out.push_str("\n# choose_args\n");
        for set in map.choose_args() {
            // Ceph prints the id as unsigned 64-bit: the default set -1 is 18446744073709551615.
            let _ = writeln!(out, "choose_args {} {{", set.id as u64);
            for arg in &set.args {
                let ids = arg.ids.as_deref().unwrap_or_default();
                if arg.weight_set.is_empty() && ids.is_empty() {
                    continue;
                }
                out.push_str("  {\n");
                let _ = writeln!(out, "    bucket_id {}", arg.bucket);
                if !arg.weight_set.is_empty() {
                    out.push_str("    weight_set [\n");
                    for weights in &arg.weight_set {
                        out.push_str("      [ ");
                        for weight in weights {
                            out.push_str(&weight_to_text(*weight));
                            out.push(' ');
                        }
                        out.push_str("]\n");
                    }
                    out.push_str("    ]\n");
                }
                if !ids.is_empty() {
                    out.push_str("    ids [ ");
                    for id in ids {
                        let _ = write!(out, "{id} ");
                    }
                    out.push_str("]\n");
                }
                out.push_str("  }\n");
            }
            out.push_str("}\n");
        }
    }
    out.push_str("\n# end crush map\n");
    out
}

fn write_tunables(out: &mut String, t: &Tunables) {
    let legacy = Tunables::legacy();
    let lines: [(&str, u32, u32); 8] = [
        ("choose_local_tries", t.choose_local_tries, legacy.choose_local_tries),
        (
            "choose_local_fallback_tries",
            t.choose_local_fallback_tries,
            legacy.choose_local_fallback_tries,
        ),
        ("choose_total_tries", t.choose_total_tries, legacy.choose_total_tries),
        ("chooseleaf_descend_once", t.chooseleaf_descend_once, legacy.chooseleaf_descend_once),
        ("chooseleaf_vary_r", t.chooseleaf_vary_r.into(), legacy.chooseleaf_vary_r.into()),
        ("chooseleaf_stable", t.chooseleaf_stable.into(), legacy.chooseleaf_stable.into()),
        ("straw_calc_version", t.straw_calc_version.into(), legacy.straw_calc_version.into()),
        ("allowed_bucket_algs", t.allowed_bucket_algs, LEGACY_ALLOWED_BUCKET_ALGS),
    ];
    for (name, value, default) in lines {
        if value != default {
            let _ = writeln!(out, "tunable {name} {value}");
        }
    }
}

/// Each bucket's shadow ids, in class-id order.
pub(crate) fn shadow_ids(map: &ClusterMap) -> HashMap<BucketId, Vec<(usize, BucketId, String)>> {
    let mut shadows: HashMap<BucketId, Vec<(usize, BucketId, String)>> = HashMap::new();
    for bucket in map.buckets() {
        if let Some((original, class)) = &bucket.shadow_of {
            let rank = map.classes().iter().position(|c| c == class).unwrap_or(usize::MAX);
            shadows.entry(*original).or_default().push((rank, bucket.id, class.clone()));
        }
    }
    for list in shadows.values_mut() {
        list.sort();
    }
    shadows
}

/// crushtool's order: for ids -1, -2, …, each bucket after its child buckets (depth first, in
/// item order), each once; shadow buckets are not written.
pub(crate) fn decompile_order(map: &ClusterMap) -> Vec<&Bucket> {
    let mut done: std::collections::HashSet<BucketId> = std::collections::HashSet::new();
    let mut order = Vec::new();
    for root in map.buckets().filter(|b| b.shadow_of.is_none()) {
        if done.contains(&root.id) {
            continue;
        }
        done.insert(root.id);
        let mut stack: Vec<(&Bucket, usize)> = vec![(root, 0)];
        while let Some((bucket, next)) = stack.pop() {
            let child = bucket.items[next..].iter().enumerate().find_map(|(offset, item)| {
                let child = map.bucket(item.bucket()?)?;
                (!done.contains(&child.id)).then_some((next + offset, child))
            });
            match child {
                Some((at, child)) => {
                    stack.push((bucket, at + 1));
                    done.insert(child.id);
                    stack.push((child, 0));
                }
                None => order.push(bucket),
            }
        }
    }
    order
}

fn write_bucket(
    out: &mut String,
    map: &ClusterMap,
    bucket: &Bucket,
    shadows: &[(usize, BucketId, String)],
) {
    let type_name = match map.type_name(bucket.type_id) {
        Some(name) => name.to_string(),
        None if bucket.type_id.0 == 0 => "device".to_string(),
        None => format!("type{}", bucket.type_id.0),
    };
    let _ = writeln!(out, "{type_name} {} {{", bucket.name);
    let _ = writeln!(out, "\tid {}\t\t# do not change unnecessarily", bucket.id);
    for (_, id, class) in shadows {
        let _ = writeln!(out, "\tid {id} class {class}\t\t# do not change unnecessarily");
    }
    let _ = writeln!(out, "\t# weight {}", weight_to_text(bucket.weight()));
    let _ = write!(out, "\talg {}", bucket.alg.name());
    let with_positions = match bucket.alg {
        BucketAlg::Uniform => {
            let _ =
                write!(out, "\t# do not change bucket size ({}) unnecessarily", bucket.items.len());
            true
        }
        BucketAlg::List => {
            out.push_str("\t# add new items at the end; do not change order unnecessarily");
            false
        }
        BucketAlg::Tree => {
            out.push_str("\t# do not change pos for existing items unnecessarily");
            true
        }
        // Linear buckets never get here: `write` refuses them first.
        BucketAlg::Straw | BucketAlg::Straw2 | BucketAlg::Linear => false,
    };
    out.push('\n');
    let hash_name = if bucket.hash == 0 { "rjenkins1" } else { "unknown" };
    let _ = writeln!(out, "\thash {}\t# {hash_name}", bucket.hash);
    for (position, (item, weight)) in bucket.items.iter().zip(&bucket.weights).enumerate() {
        let _ = write!(out, "\titem {} weight {}", item_name(map, item.0), weight_to_text(*weight));
        if with_positions {
            let _ = write!(out, " pos {position}");
        }
        out.push('\n');
    }
    out.push_str("}\n");
}
