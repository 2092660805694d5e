use super::*;
use paceline_plugin_sdk::harness::{Scenario, run_placement};

#[test]
fn scenarios() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
    let mut ran = 0;
    for entry in std::fs::read_dir(dir).expect("scenarios directory") {
        let path = entry.expect("entry").path();
        let scenario = Scenario::load(&path).expect("scenario loads");
        run_placement::<Binpack>(&scenario).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        ran += 1;
    }
    assert!(ran >= 4, "expected the scenario table, found {ran} files");
}

#[test]
fn best_fit_all_picks_tightest_and_breaks_ties_low() {
    let total = Resources::new(4000, 4096, 0, 0);
    let free = vec![Resources::new(4000, 4096, 0, 0), Resources::new(1000, 1024, 0, 0), Resources::new(1000, 1024, 0, 0)];
    let scales = vec![ScoreScale::for_total(&total); 3];
    assert_eq!(best_fit_all(&free, &scales, &Resources::new(500, 512, 0, 0)), Some(1));
    assert_eq!(best_fit_all(&free, &scales, &Resources::new(2000, 512, 0, 0)), Some(0));
    assert_eq!(best_fit_all(&free, &scales, &Resources::new(5000, 0, 0, 0)), None);
}
