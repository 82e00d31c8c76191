//! The sampler against exact probabilities, the workloads' mixes, and a full load + run.
use strata_kv::{Store, Variant};
use strata_ycsb::{load, run, scramble, KeySequence, Op, OpStream, Rng, Workload, Zipf};

/// Pearson's chi-square of samples against the exact distribution, over n ranks.
fn chi_square(n: u64, theta: f64, samples: u64, seed: u64) -> (f64, usize) {
    let z = Zipf::new(n, theta);
    let mut rng = Rng::new(seed);
    let mut counts = vec![0u64; n as usize + 1];
    for _ in 0..samples {
        let k = z.sample(&mut rng);
        assert!((1..=n).contains(&k));
        counts[k as usize] += 1;
    }
    // pool the tail so every cell expects at least 5
    let (mut chi, mut cells, mut exp_acc, mut obs_acc) = (0.0, 0usize, 0.0, 0.0);
    for k in 1..=n {
        exp_acc += z.probability(k) * samples as f64;
        obs_acc += counts[k as usize] as f64;
        if exp_acc >= 5.0 || k == n {
            chi += (obs_acc - exp_acc).powi(2) / exp_acc;
            cells += 1;
            exp_acc = 0.0;
            obs_acc = 0.0;
        }
    }
    (chi, cells - 1)
}

#[test]
fn zipf_matches_the_exact_probabilities_for_every_theta() {
    for theta in [0.25, 0.5, 0.99, 1.0, 1.2, 1.5, 2.0] {
        let (chi, df) = chi_square(200, theta, 400_000, 7);
        // chi-square with df degrees of freedom: mean df, sd sqrt(2 df); 6 sd is p < 1e-8,
        // so this fails only when the sampler is wrong, not by chance
        let bound = df as f64 + 6.0 * (2.0 * df as f64).sqrt();
        assert!(chi < bound, "theta {theta}: chi-square {chi:.1} with {df} df (bound {bound:.1})");
    }
}

#[test]
fn a_wrong_theta_is_detected() {
    // the test has power: samples at 0.99 judged against 1.2 fail
    let z = Zipf::new(200, 0.99);
    let exact = Zipf::new(200, 1.2);
    let mut rng = Rng::new(3);
    let mut counts = vec![0f64; 201];
    for _ in 0..400_000 {
        counts[z.sample(&mut rng) as usize] += 1.0;
    }
    let chi: f64 = (1..=200)
        .map(|k| (counts[k] - exact.probability(k as u64) * 4e5).powi(2) / (exact.probability(k as u64) * 4e5))
        .sum();
    assert!(chi > 1000.0, "chi-square {chi}");
}

#[test]
fn huge_n_and_extreme_thetas_stay_in_range() {
    for theta in [0.25, 1.0, 2.0] {
        let z = Zipf::new(1 << 40, theta);
        let mut rng = Rng::new(1);
        for _ in 0..10_000 {
            let k = z.sample(&mut rng);
            assert!((1..=1u64 << 40).contains(&k));
        }
    }
    let one = Zipf::new(1, 0.99);
    assert_eq!(one.sample(&mut Rng::new(5)), 1);
}

#[test]
fn scramble_is_a_permutation() {
    for n in [1u64, 2, 3, 10, 1000, 4096, 5000] {
        let mut seen: Vec<u64> = (0..n).map(|x| scramble(x, n)).collect();
        seen.sort();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
    }
}

#[test]
fn workloads_have_ycsbs_mixes() {
    for (w, read, update, insert, rmw) in [
        ("a", 0.5, 0.5, 0.0, 0.0),
        ("b", 0.95, 0.05, 0.0, 0.0),
        ("c", 1.0, 0.0, 0.0, 0.0),
        ("d", 0.95, 0.0, 0.05, 0.0),
        ("f", 0.5, 0.0, 0.0, 0.5),
    ] {
        let wl = Workload::core(w).unwrap();
        let mut s = OpStream::new(&wl, 9, KeySequence::new(wl.recordcount));
        let mut c = [0f64; 4];
        for _ in 0..100_000 {
            let (op, key) = s.next_op();
            c[Op::ALL.iter().position(|o| *o == op).unwrap()] += 1.0;
            if op != Op::Insert {
                assert!(key < wl.recordcount + 100_000);
            }
        }
        for (got, want) in c.iter().zip([read, update, insert, rmw]) {
            assert!((got / 1e5 - want).abs() < 0.01, "workload {w}: {got} vs {want}");
        }
    }
    assert!(Workload::core("e").is_err());
    let mut w = Workload::core("c").unwrap();
    assert!(w.set("zipfianconstant", "2.5").is_err());
    assert!(w.set("zipfianconstant", "0.25").is_ok());
    assert!(w.set("readproportion", "1.5").is_err());
    assert!(w.set("nosuch", "1").is_err());
    assert!(w.set("requestdistribution", "latest").is_ok());
}

#[test]
fn latest_prefers_recent_records() {
    let wl = Workload::core("d").unwrap();
    let keys = KeySequence::new(1000);
    let mut s = OpStream::new(&wl, 1, keys.clone());
    let mut recent = 0;
    let mut reads = 0;
    for _ in 0..20_000 {
        let (op, k) = s.next_op();
        if op == Op::Insert {
            keys.ack(k);
        }
        if op == Op::Read {
            reads += 1;
            recent += (k >= 990) as i32;
        }
    }
    assert!(recent as f64 > 0.5 * reads as f64, "{recent} of {reads} reads among the 10 newest");
}

#[test]
fn load_and_run_every_workload_without_errors() {
    for v in Variant::ALL {
        for w in ["a", "b", "c", "d", "f"] {
            let mut wl = Workload::core(w).unwrap();
            wl.set("recordcount", "2000").unwrap();
            wl.set("operationcount", "20000").unwrap();
            let store = Store::new(v, 512);
            let l = load(&store, &wl, 2, true);
            assert_eq!(store.len(), 2000);
            assert_eq!(l.operations, 2000);
            let r = run(&store, &wl, 2, 11, true);
            assert_eq!(r.errors, 0, "{} {w}", v.name());
            assert_eq!(r.latency.values().map(|l| l.count).sum::<u64>(), 20_000);
            if w == "d" {
                assert!(store.len() > 2000, "inserts happened");
            }
        }
    }
}
