//! Side-by-side latency of bridge + host-local ADD and DEL, rcni versus Debian's Go plugins.
//! A measurement, not a test: ignored by default, no timing assertions. Run it on a release
//! build, as root:
//!
//! ```text
//! cargo nextest run --release -p cni-plugins --test latency --run-ignored only --no-capture
//! ```

mod attach;

use std::time::{Duration, Instant};

use attach::*;
use serde_json::json;

const ROUNDS: usize = 40;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Median ADD and DEL wall time over [`ROUNDS`] back-to-back ADD/DEL pairs on one pod.
fn measure(main: Impl, ipam: Impl) -> Option<(Duration, Duration)> {
    let env = Env::with(main, Some(ipam))?;
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        "latnet",
        "br0",
        "198.19.0.0/16",
        json!({"isGateway": true}),
    );
    let (mut adds, mut dels) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let cid = format!("c{i}");
        let add = env.call("ADD", &pod, &cid, &conf.to_string());
        let t = Instant::now();
        env.run("bridge", &add).assert_success();
        adds.push(t.elapsed());
        let del = env.call("DEL", &pod, &cid, &conf.to_string());
        let t = Instant::now();
        env.run("bridge", &del).assert_success();
        dels.push(t.elapsed());
    }
    Some((median(adds), median(dels)))
}

/// The fixed cost every call above pays for `ip netns exec` and process start.
fn baseline() -> Duration {
    let env = Env::new();
    let mut v = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        env.sb.exec_host(["true"]).unwrap().assert_success();
        v.push(t.elapsed());
    }
    median(v)
}

#[test]
#[ignore = "measurement; run explicitly on a release build"]
fn bridge_host_local_add_del_latency() {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!("bridge + host-local, {ROUNDS} ADD/DEL pairs each, {profile} build of rcni");
    println!("baseline `ip netns exec <ns> true`: {}", ms(baseline()));
    let mut combos = vec![
        ("Go bridge   + Go host-local  ", Impl::Go, Impl::Go),
        ("rcni bridge + Go host-local  ", Impl::Rcni, Impl::Go),
    ];
    if rcni_has("host-local") {
        combos.push(("rcni bridge + rcni host-local", Impl::Rcni, Impl::Rcni));
        combos.push(("Go bridge   + rcni host-local", Impl::Go, Impl::Rcni));
    }
    for (label, main, ipam) in combos {
        match measure(main, ipam) {
            Some((add, del)) => println!("{label}: ADD median {}, DEL median {}", ms(add), ms(del)),
            None => println!("{label}: skipped"),
        }
    }
}
