//! Throwaway: crushtool --test --show-mappings clone.
use optio_placement::{
    RuleId,
    crush::hash::hash32_2,
    crush::{CrushMap, CrushWork},
};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).unwrap();
    let map = optio_mapfile::parse(&text).unwrap();
    let rule: u32 = args[2].parse().unwrap();
    let numrep: usize = args[3].parse().unwrap();
    let max_x: u32 = args[4].parse().unwrap();
    let pool: Option<u32> = args.get(5).map(|p| p.parse().unwrap());
    let crush = CrushMap::new(&map);
    let mut work = CrushWork::new(&crush);
    // crushtool: weight 0x10000 for devices present in the hierarchy, 0 otherwise.
    let mut weights = vec![0u32; map.max_devices() as usize];
    for d in map.devices() {
        if map.parent(optio_placement::ItemId(d.id.0 as i32)).is_some() {
            weights[d.id.0 as usize] = 0x10000;
        }
    }
    let ca = crush.choose_args_exact(0);
    let mut out = vec![0i32; numrep];
    for x in 0..=max_x {
        let real = match pool {
            Some(p) => hash32_2(x, p),
            None => x,
        };
        let n = crush.do_rule(RuleId(rule), real, &mut out, &weights, ca, &mut work);
        let s: Vec<String> = out[..n].iter().map(|v| v.to_string()).collect();
        println!("CRUSH rule {} x {} [{}]", rule, x, s.join(","));
    }
}
