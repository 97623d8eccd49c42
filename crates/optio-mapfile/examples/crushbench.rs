//! Throwaway: time do_rule.
use optio_placement::{
    RuleId,
    crush::{CrushMap, CrushWork},
};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).unwrap();
    let map = optio_mapfile::parse(&text).unwrap();
    let n: u32 = args[2].parse().unwrap();
    let mut crush = CrushMap::new(&map);
    match std::env::var("SIMD").as_deref() {
        Ok("0") => crush.set_simd(optio_placement::crush::Simd::Baseline),
        Ok("1") => crush.set_simd(optio_placement::crush::Simd::Avx2),
        _ => {}
    }
    eprintln!("{:?}", crush.simd());
    let mut work = CrushWork::new(&crush);
    let weights = map.reweight_vector();
    let mut out = vec![0i32; 3];
    let start = std::time::Instant::now();
    let mut acc = 0i64;
    for x in 0..n {
        crush.do_rule(RuleId(0), x, &mut out, &weights, None, &mut work);
        acc += out[0] as i64;
    }
    let el = start.elapsed();
    println!(
        "{} mappings in {:?}: {:.0}/s ({} ns each) acc {}",
        n,
        el,
        n as f64 / el.as_secs_f64(),
        el.as_nanos() / n as u128,
        acc
    );
}
