//! The live daemon's loop: the engine on real Linux ([`crate::linux`]), one round every
//! scanner period, until stopped (SIGINT or SIGTERM in `strata daemon`) or for a number of
//! rounds. Stopping leaves every program as it is: the daemon only ever moved pages and wrote
//! directives, so a program loses nothing when the daemon goes.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::linux::Linux;
use crate::{Config, Engine, Error, Stats};

/// Run `policy` with `cfg` until `stop` is set or `rounds` rounds have run; `each` sees the
/// statistics and the machine after every round. Returns the final statistics.
pub fn run(
    policy: &str,
    cfg: Config,
    stop: &AtomicBool,
    rounds: Option<u64>,
    mut each: impl FnMut(&Stats, &mut Linux),
) -> Result<Stats, Error> {
    let mut m = Linux::new();
    let mut engine = Engine::new(policy, cfg, &mut m)?;
    let period = Duration::from_nanos(engine.period_ns().max(1_000_000));
    let mut done = 0u64;
    while !stop.load(Ordering::Relaxed) && rounds.is_none_or(|r| done < r) {
        let start = Instant::now();
        m.discover();
        engine.tick(&mut m);
        done += 1;
        each(engine.stats(), &mut m);
        // sleep out the period in short steps, so a stop is seen within 50 ms
        while !stop.load(Ordering::Relaxed) && start.elapsed() < period {
            std::thread::sleep((period - start.elapsed()).min(Duration::from_millis(50)));
        }
    }
    Ok(engine.stats().clone())
}
