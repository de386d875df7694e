//! A bad network between the operator and the API server: the real operator
//! talks to the test cluster through a TCP proxy that injects faults
//! (`support::faults`): latency with jitter, a bandwidth limit, outages
//! (connections reset), black holes (connections open, nothing moves).
//!
//! - `healthz_recovers_within_seconds_after_an_outage_with_no_plans`: the
//!   liveness rule. A watch of a kind that never changes must count as
//!   healthy again once the API server accepts it, or one blip leaves
//!   `/healthz` at 503 for good; and an idle operator behind a black hole
//!   (no error anywhere) fails `/healthz` by its heartbeat, then heals.
//! - `plans_end_right_under_random_network_faults`: several plans rolled out
//!   and rolled back through minutes of seeded random faults (the seed is
//!   printed; `RP_FAULT_SEED=<seed>` replays it, `RP_FAULT_SECONDS` sets the
//!   window, 120 by default), then the invariants: final phases, current
//!   `observedGeneration`, capacity never below `replicas`, each
//!   transition's Event exactly once, no request storm, `/healthz` 503
//!   during a black hole longer than the bound and 200 after.
//!
//! - `the_operator_talks_to_the_api_server_over_two_connections`: every
//!   watch and request shares one HTTP/2 connection, and leader election
//!   and the heartbeat another (`ops::api_client`), counted at the proxy
//!   while plans roll out; over HTTP/1.1 each watch held one of its own.
//!
//! - `memory_of_a_plan_deleted_behind_a_black_hole_is_swept`: a plan that
//!   goes while the operator cannot see it (deleted and its finalizer removed
//!   by hand behind a black hole) never gets a last reconcile; what the
//!   operator kept about it is swept within seconds, and the size gauges
//!   (`releaseplan_plan_memory_entries`, `releaseplan_cached_objects`) say so.
//!
//! - `a_leader_rides_out_short_outages`: a leader behind two outages of
//!   2.5 s, timed to meet its renewals, keeps its Lease and runs on:
//!   a failed renewal is tried again while it can still land before the
//!   expiry (it used to exit at the first failure).
//!
//! The test's own client talks to the API server directly: only the
//! operator's network misbehaves.

use crate::support;

use releaseplan::api::Phase;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::faults::{Fault, FaultProxy, Rng, api_server_addr};
use support::fixtures::{faulty_template, template, web_with};
use support::operator::{Operator, healthz, sum_metric};
use support::plans::{create_stable, get, plan_events, revisions, set_components};
use support::{Harness, wait_until};

/// A proxy to the test cluster's API server and an operator (watching the
/// harness's namespace) that reaches the API server only through it.
async fn proxied_operator(h: &Harness, stuck_after: u64) -> (FaultProxy, Operator) {
    let kubeconfig = PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG"));
    let proxy = FaultProxy::start(api_server_addr(&kubeconfig)).await;
    let dir = std::env::temp_dir().join("releaseplan-tests");
    let cfg = proxy.kubeconfig(&kubeconfig, &dir);
    let op = h
        .operator()
        .env("KUBECONFIG", cfg.to_str().unwrap())
        .args(["--stuck-after-seconds", &stuck_after.to_string()])
        .start()
        .await;
    (proxy, op)
}

/// How soon `/healthz` must be 200 again after the network comes back: the
/// watch backoff (at most 2 s) plus a new connection and its TLS handshake,
/// with room for a busy machine.
const HEAL_BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn healthz_recovers_within_seconds_after_an_outage_with_no_plans() {
    let h = Harness::new("blip").await;
    let (proxy, op) = proxied_operator(&h, 2).await;
    // Every watch is up (the caches fill): healthy.
    wait_until(
        Duration::from_secs(30),
        "/healthz 200 before the outage",
        || async { (healthz(op.port).await == Some(200)).then_some(()) },
    )
    .await;
    // Healthy for a while with nothing happening: idle watches are not
    // failures (a negative check: a bounded observation window of 3 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(healthz(op.port).await, Some(200), "{}", op.log_text());

    // An outage of 4 s, twice the bound: every watch fails, /healthz says so.
    proxy.set(Fault::Down);
    let down = Instant::now();
    let mut unhealthy = false;
    while down.elapsed() < Duration::from_secs(4) {
        unhealthy |= healthz(op.port).await == Some(503);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.set(Fault::Pass);
    let back = Instant::now();
    assert!(
        unhealthy,
        "/healthz never failed while every watch failed for 4 s (bound 2 s):\n{}",
        op.log_text()
    );

    // Then healthy again within the bound, with no plan and no event at all.
    loop {
        if healthz(op.port).await == Some(200) {
            break;
        }
        assert!(
            back.elapsed() < HEAL_BOUND,
            "/healthz still fails {:?} after the outage ended: {:?}\n{}",
            back.elapsed(),
            reqwest::get(format!("http://127.0.0.1:{}/healthz", op.port))
                .await
                .unwrap()
                .text()
                .await,
            op.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let healed = back.elapsed();
    println!("/healthz 200 again {healed:?} after the outage ended (bound {HEAL_BOUND:?})");
    // And it stays so.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(healthz(op.port).await, Some(200), "{}", op.log_text());
    }

    // A black hole of 5 s: connections stay open and nothing moves, so no
    // watch fails; the heartbeat's request waits past the bound instead.
    proxy.set(Fault::BlackHole);
    let hole = Instant::now();
    let mut unhealthy = false;
    while hole.elapsed() < Duration::from_secs(5) {
        unhealthy |= healthz(op.port).await == Some(503);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.set(Fault::Pass);
    let back = Instant::now();
    assert!(
        unhealthy,
        "/healthz never failed in a 5 s black hole of an idle operator (bound 2 s):\n{}",
        op.log_text()
    );
    wait_until(HEAL_BOUND, "/healthz 200 after the black hole", || async {
        (healthz(op.port).await == Some(200)).then_some(())
    })
    .await;
    println!(
        "/healthz 200 again {:?} after the black hole ended",
        back.elapsed()
    );
}

#[tokio::test]
async fn the_operator_talks_to_the_api_server_over_two_connections() {
    let h = Harness::new("conns").await;
    let (proxy, op) = proxied_operator(&h, 60).await;
    let proxy = Arc::new(proxy);
    let (client, ns) = (h.client.clone(), h.ns.clone());
    wait_until(Duration::from_secs(30), "/healthz 200", || async {
        (healthz(op.port).await == Some(200)).then_some(())
    })
    .await;
    // From here on, the most connections open at once, every 50 ms.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (proxy, stop) = (Arc::clone(&proxy), Arc::clone(&stop));
        async move {
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(proxy.open());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        }
    });
    // Three plans released and rolled out at once: watches of every kind,
    // and writes in flight together.
    let names = ["c0", "c1", "c2"];
    futures::future::join_all(names.iter().map(|name| {
        create_stable(
            &client,
            &ns,
            name,
            json!({"components": [good("shop:1")], "strategy": {"steps": long_steps()}}),
        )
    }))
    .await;
    for name in names {
        set_components(&client, &ns, name, json!([good("shop:2")])).await;
    }
    for name in names {
        support::plans::wait_phase(&client, &ns, name, Phase::Stable, Duration::from_secs(120))
            .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.await.unwrap();
    let requests = op.counter("releaseplan_kube_requests_total").await;
    println!(
        "at most {most} connections open at once; {} accepted in all; {requests} requests",
        proxy.connections()
    );
    assert!(
        most <= 2,
        "{most} connections to the API server open at once (one for the work, one for the lease)\n{}",
        op.log_text()
    );
}

/// When `/healthz` was read, and its status code (None: no answer).
type HealthSample = (Instant, Option<u16>);

/// Replicas of every plan's one component.
const REPLICAS: i32 = 3;
/// The bound of `/healthz` in the random-faults test.
const STUCK_AFTER: u64 = 5;

/// Steps of a rollout that goes all the way: 6 steps, so 6 StepAdvanced Events
/// ("step k/6", then "final step").
fn long_steps() -> Value {
    json!([
        {"setWeight": 20}, {"pause": {"duration": "2s"}},
        {"setWeight": 50}, {"pause": {"duration": "2s"}},
        {"setWeight": 80}, {"pause": {"duration": "2s"}},
    ])
}

/// Steps of a rollout of a crashing version: it can never reach its final
/// step (an indefinite pause), so its StepAdvanced Events ("step k/2") never
/// share a message with a long rollout's.
fn short_steps() -> Value {
    json!([{"setWeight": 34}, {"pause": {}}])
}

fn good(image: &str) -> Value {
    web_with(template(image), REPLICAS)
}

fn crashing(image: &str) -> Value {
    web_with(faulty_template(image, "crash-loop"), REPLICAS)
}

/// What one plan does in the two waves.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// Promoted in wave 1, rolled back in wave 2: ends RolledBack.
    PromoteThenRollBack,
    /// Rolled back in wave 1, promoted in wave 2: ends Stable.
    RollBackThenPromote,
}

/// The seeded random faults, until `stop` is set; each one is logged.
async fn random_faults(
    proxy: Arc<FaultProxy>,
    seed: u64,
    window: Duration,
    log: Arc<Mutex<Vec<String>>>,
) {
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    while start.elapsed() < window {
        let (fault, lasts) = match rng.range(0, 9) {
            0..=2 => (
                Fault::Pass,
                rng.duration(Duration::from_secs(2), Duration::from_secs(8)),
            ),
            3 | 4 => (
                Fault::Latency {
                    base: rng.duration(Duration::from_millis(20), Duration::from_millis(400)),
                    jitter: rng.duration(Duration::ZERO, Duration::from_millis(600)),
                },
                rng.duration(Duration::from_secs(3), Duration::from_secs(10)),
            ),
            5 => (
                Fault::Bandwidth(rng.range(16, 256) * 1024),
                rng.duration(Duration::from_secs(3), Duration::from_secs(10)),
            ),
            6 | 7 => (
                Fault::Down,
                rng.duration(Duration::from_millis(500), Duration::from_secs(5)),
            ),
            _ => (
                Fault::BlackHole,
                rng.duration(Duration::from_secs(1), Duration::from_secs(STUCK_AFTER + 4)),
            ),
        };
        log.lock().unwrap().push(format!(
            "{:>6.1}s {fault:?} for {lasts:?}",
            start.elapsed().as_secs_f64()
        ));
        proxy.set(fault);
        tokio::time::sleep(lasts).await;
    }
    proxy.set(Fault::Pass);
    log.lock().unwrap().push(format!(
        "{:>6.1}s Pass: the window is over",
        start.elapsed().as_secs_f64()
    ));
}

/// Waits until every plan in `names` has observed its generation and is in
/// the phase `want` gives it.
async fn settle(
    client: &kube::Client,
    ns: &str,
    names: &[(String, Role)],
    want: impl Fn(Role) -> Phase,
    timeout: Duration,
    what: &str,
) {
    wait_until(timeout, what, || async {
        let mut pending = Vec::new();
        for (name, role) in names {
            let p = get(client, ns, name).await.unwrap();
            let s = p.status.clone().unwrap_or_default();
            if s.phase != want(*role) || s.observed_generation != p.metadata.generation {
                pending.push(format!(
                    "{name}: {} step {} observed {:?} of {:?}",
                    s.phase, s.current_step, s.observed_generation, p.metadata.generation
                ));
            }
        }
        if pending.is_empty() {
            Ok(())
        } else {
            Err(pending.join("; "))
        }
    })
    .await;
}

/// The StepAdvanced Events of a [`long_steps`] rollout ("step k/6", then
/// "final step"), among a plan's Events as `plan_events` reads them.
fn long_steps_advanced(events: &[(String, String, String, i32)]) -> usize {
    events
        .iter()
        .filter(|e| e.0 == "StepAdvanced" && (e.2.contains("/6") || e.2.starts_with("final")))
        .count()
}

/// [`settle`] within 300 s, in a task of its own so that a timeout is an
/// answer (false) rather than this test's panic: the caller adds the fault
/// log and the operator's log to the failure.
async fn settles(
    client: &kube::Client,
    ns: &str,
    names: &[(String, Role)],
    want: fn(Role) -> Phase,
    what: &'static str,
) -> bool {
    let (client, ns, names) = (client.clone(), ns.to_string(), names.to_vec());
    tokio::spawn(async move {
        settle(&client, &ns, &names, want, Duration::from_secs(300), what).await;
    })
    .await
    .is_ok()
}

/// The faults' seed (`RP_FAULT_SEED`, else the clock) and window
/// (`RP_FAULT_SECONDS`, else `default`).
fn seed_and_window(default: Duration) -> (u64, Duration) {
    let seed = std::env::var("RP_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let window = std::env::var("RP_FAULT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(default, Duration::from_secs);
    (seed, window)
}

#[tokio::test]
async fn plans_end_right_under_random_network_faults() {
    let (seed, window) = seed_and_window(Duration::from_secs(120));
    println!("fault seed {seed} (replay: RP_FAULT_SEED={seed}), window {window:?}");

    let h = Harness::new("faults").await;
    let (proxy, op) = proxied_operator(&h, STUCK_AFTER).await;
    let proxy = Arc::new(proxy);
    let (client, ns) = (h.client.clone(), h.ns.clone());

    // Six plans, first released on a good network.
    let names: Vec<(String, Role)> = (0..6)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::PromoteThenRollBack
            } else {
                Role::RollBackThenPromote
            };
            (format!("p{i}"), role)
        })
        .collect();
    let creating = names.iter().map(|(name, role)| {
        let client = client.clone();
        let ns = ns.clone();
        let steps = match role {
            Role::PromoteThenRollBack => long_steps(),
            Role::RollBackThenPromote => short_steps(),
        };
        async move {
            create_stable(
                &client,
                &ns,
                name,
                json!({"components": [good("shop:1")], "strategy": {"steps": steps}}),
            )
            .await
        }
    });
    futures::future::join_all(creating).await;

    // Samplers from now on: capacity (ready pods of each plan, read directly)
    // and /healthz, every 250 ms.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let low_capacity: Arc<Mutex<Vec<String>>> = Arc::default();
    let health: Arc<Mutex<Vec<HealthSample>>> = Arc::default();
    let capacity = tokio::spawn({
        let (client, ns, stop, low) = (
            client.clone(),
            ns.clone(),
            Arc::clone(&stop),
            Arc::clone(&low_capacity),
        );
        let plans: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
        async move {
            let mut samples = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for p in &plans {
                    let ready: i32 = revisions(&client, &ns, p).await.values().map(|r| r.1).sum();
                    samples += 1;
                    if ready < REPLICAS {
                        low.lock().unwrap().push(format!("{p}: {ready} ready"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            samples
        }
    });
    let health_sampler = tokio::spawn({
        let (stop, health, port) = (Arc::clone(&stop), Arc::clone(&health), op.port);
        async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let code = healthz(port).await;
                health.lock().unwrap().push((Instant::now(), code));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    let requests_before = op.counter("releaseplan_kube_requests_total").await;
    let connections_before = proxy.connections();
    let started = Instant::now();

    // Wave 1: half promote (long steps), half roll back.
    for (name, role) in &names {
        let c = match role {
            Role::PromoteThenRollBack => good("shop:2"),
            Role::RollBackThenPromote => crashing("shop:2"),
        };
        set_components(&client, &ns, name, json!([c])).await;
    }

    // A scripted black hole longer than the bound while plans wait on timed
    // pauses: the reconcile at a pause's end writes, its write hangs, and
    // /healthz must fail; once the bytes move again it must heal.
    wait_until(
        Duration::from_secs(60),
        "a plan in a timed pause",
        || async {
            for (name, role) in &names {
                if *role != Role::PromoteThenRollBack {
                    continue;
                }
                let s = get(&client, &ns, name).await?.status?;
                if s.phase == Phase::RollingOut && (1..=3).contains(&s.current_step) {
                    return Some(());
                }
            }
            None
        },
    )
    .await;
    let hole = Duration::from_secs(STUCK_AFTER + 8);
    proxy.set(Fault::BlackHole);
    let hole_start = Instant::now();
    tokio::time::sleep(hole).await;
    proxy.set(Fault::Pass);
    let hole_end = Instant::now();
    // The network stays good until /healthz is 200 again (or the bound the
    // check below allows has passed): random faults started at once could
    // go on with another black hole, and the heal measured would be theirs,
    // not the operator's.
    let heal_by = hole_end + HEAL_BOUND + Duration::from_secs(STUCK_AFTER);
    while Instant::now() < heal_by && healthz(op.port).await != Some(200) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Then random faults for the window, while the waves go on.
    let fault_log: Arc<Mutex<Vec<String>>> = Arc::default();
    let faults = tokio::spawn(random_faults(
        Arc::clone(&proxy),
        seed,
        window,
        Arc::clone(&fault_log),
    ));
    let dump = |what: &str| {
        format!(
            "{what}\nseed {seed}\nfaults:\n{}\noperator log (tail):\n{}",
            fault_log.lock().unwrap().join("\n"),
            op.log_text()
                .lines()
                .rev()
                .take(80)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let wave1 = |r: Role| match r {
        Role::PromoteThenRollBack => Phase::Stable,
        Role::RollBackThenPromote => Phase::RolledBack,
    };
    let ok = settles(&client, &ns, &names, wave1, "wave 1 to settle").await;
    assert!(ok, "{}", dump("wave 1 did not settle"));

    // Wave 2: the other way round.
    for (name, role) in &names {
        let (c, steps) = match role {
            Role::PromoteThenRollBack => (crashing("shop:3"), short_steps()),
            Role::RollBackThenPromote => (good("shop:3"), long_steps()),
        };
        support::plans::patch_spec(
            &client,
            &ns,
            name,
            json!({"components": [c], "strategy": {"steps": steps}}),
        )
        .await;
    }
    let wave2 = |r: Role| match r {
        Role::PromoteThenRollBack => Phase::RolledBack,
        Role::RollBackThenPromote => Phase::Stable,
    };
    let ok = settles(&client, &ns, &names, wave2, "wave 2 to settle").await;
    assert!(ok, "{}", dump("wave 2 did not settle"));
    faults.await.unwrap();
    let elapsed = started.elapsed();
    // The network is good again: the end state holds, and Events catch up.
    settle(
        &client,
        &ns,
        &names,
        wave2,
        Duration::from_secs(60),
        "the end state",
    )
    .await;
    // The samplers watch the end state for 3 s more: capacity must hold there
    // too (a negative check, so a bounded observation window), and the last
    // /healthz sample is judged below.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = capacity.await.unwrap();
    health_sampler.await.unwrap();
    let requests = op.counter("releaseplan_kube_requests_total").await - requests_before;
    let connections = proxy.connections() - connections_before;
    println!("{}", fault_log.lock().unwrap().join("\n"));
    println!(
        "{:.0}s of rollouts under faults: {requests} requests ({:.1}/s), {connections} connections, {samples} capacity samples",
        elapsed.as_secs_f64(),
        requests / elapsed.as_secs_f64()
    );

    let mut problems = Vec::new();

    // Capacity never below replicas.
    let low = low_capacity.lock().unwrap().clone();
    if !low.is_empty() {
        problems.push(format!(
            "capacity below {REPLICAS} at {} of {samples} samples: {:?}",
            low.len(),
            &low[..low.len().min(10)]
        ));
    }

    // /healthz failed during the scripted black hole (longer than the bound)
    // and was 200 again soon after it, and at the end.
    let h = health.lock().unwrap().clone();
    let during = h
        .iter()
        .any(|(t, c)| *t > hole_start && *t <= hole_end && *c == Some(503));
    if !during {
        problems.push(format!(
            "/healthz never 503 during a {hole:?} black hole (bound {STUCK_AFTER}s)"
        ));
    }
    let healed = h
        .iter()
        .find(|(t, c)| *t > hole_end && *c == Some(200))
        .map(|(t, _)| t.duration_since(hole_end));
    println!("/healthz 200 again {healed:?} after the black hole");
    if healed.is_none_or(|d| d > HEAL_BOUND + Duration::from_secs(STUCK_AFTER)) {
        problems.push(format!(
            "/healthz not 200 soon after the black hole: {healed:?}"
        ));
    }
    if h.last().map(|(_, c)| *c) != Some(Some(200)) {
        problems.push(format!("/healthz at the end: {:?}", h.last()));
    }

    // No request storm: a hot loop would run at the --qps limit (hundreds a
    // second); six plans need a few.
    let rate = requests / elapsed.as_secs_f64();
    if rate > 25.0 {
        problems.push(format!("{rate:.1} requests a second to the API server"));
    }

    // Each transition's Event exactly once: every (reason, message) once,
    // and the counts each plan's story gives.
    for (name, role) in &names {
        let want: BTreeMap<&str, usize> = BTreeMap::from([
            ("RolloutStarted", 3),
            ("Promoted", 2),
            ("RollbackStarted", 1),
            ("RolledBack", 1),
        ]);
        // Events are published beside the reconciles (and retried through
        // the last faults): give them time to land, then judge what is there.
        let deadline = Instant::now() + Duration::from_secs(30);
        let events = loop {
            let events = plan_events(&client, &ns, name).await;
            let count = |r: &str| events.iter().filter(|e| e.0 == r).count();
            if (want.iter().all(|(r, n)| count(r) >= *n) && long_steps_advanced(&events) >= 6)
                || Instant::now() > deadline
            {
                break events;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
        for e in &events {
            *seen.entry((e.0.clone(), e.2.clone())).or_default() += e.3.max(1) as usize;
        }
        let transitions = [
            "RolloutStarted",
            "StepAdvanced",
            "Promoted",
            "RollbackStarted",
            "RolledBack",
            "RolloutSuperseded",
        ];
        for ((reason, message), n) in &seen {
            if transitions.contains(&reason.as_str()) && *n > 1 {
                problems.push(format!(
                    "{name} ({role:?}): {reason} \"{message}\" {n} times"
                ));
            }
        }
        // A blip is not a refusal: nothing was wrong with any object.
        for e in &events {
            if e.0 == "DeploymentRefused" || e.0 == "TrafficRefused" {
                problems.push(format!("{name}: {} \"{}\" for a network fault", e.0, e.2));
            }
        }
        for (reason, n) in &want {
            let got = events.iter().filter(|e| e.0 == *reason).count();
            if got != *n {
                problems.push(format!("{name}: {got} {reason} Events, want {n}"));
            }
        }
        let long = long_steps_advanced(&events);
        if long != 6 {
            problems.push(format!(
                "{name}: {long} StepAdvanced Events of the promoted rollout, want 6"
            ));
        }
        let p = get(&client, &ns, name).await.unwrap();
        let s = p.status.unwrap();
        if s.observed_generation != p.metadata.generation {
            problems.push(format!(
                "{name}: observedGeneration {:?} of {:?}",
                s.observed_generation, p.metadata.generation
            ));
        }
    }
    let text = op.metrics().await;
    println!(
        "failures by kind: transport {}, unavailable {}, conflict {}, refused {}",
        sum_metric(
            &text,
            "releaseplan_reconcile_failures_total{error=\"transport\"}"
        ),
        sum_metric(
            &text,
            "releaseplan_reconcile_failures_total{error=\"unavailable\"}"
        ),
        sum_metric(
            &text,
            "releaseplan_reconcile_failures_total{error=\"conflict\"}"
        ),
        sum_metric(
            &text,
            "releaseplan_reconcile_failures_total{error=\"refused\"}"
        ),
    );
    assert!(problems.is_empty(), "{}", dump(&problems.join("\n")));
}

#[tokio::test]
async fn memory_of_a_plan_deleted_behind_a_black_hole_is_swept() {
    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    use releaseplan::api::ReleasePlan;
    use support::fixtures::{plan, refused_template};
    let h = Harness::new("sweep").await;
    let (proxy, op) = proxied_operator(&h, 60).await;
    let plans: Api<ReleasePlan> = Api::namespaced(h.client.clone(), &h.ns);
    // A plan whose Deployment is refused: its reconciles fail and back off,
    // so the operator keeps a refusal and a backoff for it.
    support::plans::create(
        &h.client,
        &h.ns,
        &plan(
            "vanish",
            json!({"components": [web_with(refused_template(), 2)]}),
        ),
    )
    .await;
    let gauges = || async {
        let text = op.metrics().await;
        (
            sum_metric(&text, "releaseplan_plan_memory_entries"),
            sum_metric(
                &text,
                "releaseplan_cached_objects{resource=\"releaseplans\"}",
            ),
        )
    };
    wait_until(Duration::from_secs(60), "the plan's memory", || async {
        let (memory, cached) = gauges().await;
        (memory >= 1.0 && cached == 1.0)
            .then_some(())
            .ok_or(format!("memory entries {memory}, cached plans {cached}"))
    })
    .await;
    // Behind a black hole: deleted, and its finalizer removed by hand, which
    // deletes it in the same write.
    proxy.set(Fault::BlackHole);
    plans
        .delete("vanish", &DeleteParams::default())
        .await
        .unwrap();
    plans
        .patch(
            "vanish",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "the plan to be gone", || async {
        plans
            .get_opt("vanish")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    proxy.set(Fault::Pass);
    // The sweep runs every 5 s.
    wait_until(
        Duration::from_secs(20),
        "the plan's memory swept and the plan cache empty",
        || async {
            let (memory, cached) = gauges().await;
            (memory == 0.0 && cached == 0.0)
                .then_some(())
                .ok_or(format!("memory entries {memory}, cached plans {cached}"))
        },
    )
    .await;
}

/// A leader whose network to the API server goes down twice, timed from a
/// renewal it just made (at `r`; the test reads the Lease directly): from
/// r+4 s to r+6.5 s, over its next renewal (every 5 s: two thirds of the 15 s
/// lease before the expiry), then from r+9 s to r+11.5 s. It tries the
/// failed renewal again each second, lands one at about r+7, and keeps its
/// Lease (the same holder, no transition) and runs on. It used to exit at
/// the first failed renewal, and renewed only every 10 s: at r+10, in the
/// second outage.
#[tokio::test]
async fn a_leader_rides_out_short_outages() {
    use k8s_openapi::api::coordination::v1::Lease;
    let h = Harness::new("leaseblip").await;
    let kubeconfig = PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG"));
    let proxy = FaultProxy::start(api_server_addr(&kubeconfig)).await;
    let dir = std::env::temp_dir().join("releaseplan-tests");
    let cfg = proxy.kubeconfig(&kubeconfig, &dir);
    let mut op = h
        .operator()
        .env("KUBECONFIG", cfg.to_str().unwrap())
        .leader_election(&h.ns)
        .args(["--identity", "blip-leader"])
        .start()
        .await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(h.client.clone(), &h.ns);
    // (holder, transitions, renew time in ms since the epoch)
    let lease = || async {
        let l = leases.get_opt("releaseplan-leader").await.ok()??;
        let spec = l.spec?;
        Some((
            spec.holder_identity?,
            spec.lease_transitions.unwrap_or(0),
            spec.renew_time?.0.as_millisecond(),
        ))
    };
    let (holder, transitions, first) =
        wait_until(Duration::from_secs(30), "the Lease held", || async {
            lease()
                .await
                .filter(|(holder, _, _)| holder == "blip-leader")
        })
        .await;
    // A renewal just made: the outages are timed from it.
    let r = wait_until(Duration::from_secs(20), "a renewal", || async {
        lease()
            .await
            .map(|(_, _, renewed)| renewed)
            .filter(|renewed| *renewed > first)
    })
    .await;
    let until = |offset_ms: i64| async move {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let wait = u64::try_from(r + offset_ms - now).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    };
    for (down, up) in [(4000, 6500), (9000, 11_500)] {
        until(down).await;
        proxy.set(Fault::Down);
        until(up).await;
        proxy.set(Fault::Pass);
        if let Some(exit) = op.exit_status() {
            panic!("the leader exited ({exit}):\n{}", op.log_text());
        }
    }
    until(20_000).await;
    assert!(op.exit_status().is_none(), "{}", op.log_text());
    let (now_holder, now_transitions, renewed) = lease().await.expect("the Lease");
    assert_eq!(
        (now_holder, now_transitions),
        (holder, transitions),
        "{}",
        op.log_text()
    );
    assert!(renewed > r + 11_500, "not renewed since the outages");
    let log = op.log_text();
    assert!(
        log.contains("cannot renew the lease; trying again"),
        "the renewal at r+5 s met no outage:\n{log}"
    );
    assert!(
        !log.contains("cannot renew the lease before it expires"),
        "{log}"
    );
}

/// The request deadline and the reconcile deadline of the lost-answer
/// tests (as environment variables, which an operator without them ignores:
/// so the same test runs against an older build, `RP_OPERATOR_BIN`), and
/// their `/healthz` bound, above both.
const LOST_REQUEST_DEADLINE: u64 = 3;
const LOST_RECONCILE_DEADLINE: u64 = 6;
const LOST_STUCK_AFTER: u64 = 8;

/// Lost answers and resets, each at the moment the operator sends a write
/// (a Deployment apply, a status write: [`FaultProxy::on_next_write`]), over
/// HTTP/2 or HTTP/1.1, while four plans release one version after another
/// for `RP_FAULT_SECONDS` (60 by default; seeded: `RP_FAULT_SEED` replays a
/// run). Then every plan ends Stable on its last version within a bound of
/// the last fault, `/healthz` is 200, and no reconcile ran past 10 s (the
/// 10 s bucket of `releaseplan_reconcile_duration_seconds` holds them all).
/// Without deadlines, a write whose answer was lost on a connection that
/// stayed up left its reconcile, and so its plan, waiting for good.
async fn lost_answers_never_stall_a_plan(http2: bool) {
    let (seed, window) = seed_and_window(Duration::from_secs(60));
    println!("fault seed {seed} (replay: RP_FAULT_SEED={seed}), window {window:?}, http2 {http2}");

    let h = Harness::new(if http2 { "lost2" } else { "lost1" }).await;
    let kubeconfig = PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG"));
    let proxy = Arc::new(FaultProxy::start(api_server_addr(&kubeconfig)).await);
    let cfg = proxy.kubeconfig(&kubeconfig, &std::env::temp_dir().join("releaseplan-tests"));
    let mut launcher = h
        .operator()
        .env("KUBECONFIG", cfg.to_str().unwrap())
        .env(
            "RELEASEPLAN_API_REQUEST_TIMEOUT_SECONDS",
            &LOST_REQUEST_DEADLINE.to_string(),
        )
        .env(
            "RELEASEPLAN_RECONCILE_TIMEOUT_SECONDS",
            &LOST_RECONCILE_DEADLINE.to_string(),
        )
        .env("RELEASEPLAN_API_HTTP2", &http2.to_string())
        .args(["--stuck-after-seconds", &LOST_STUCK_AFTER.to_string()]);
    if let Ok(binary) = std::env::var("RP_OPERATOR_BIN") {
        launcher = launcher.binary(binary);
    }
    let op = launcher.start().await;
    let (client, ns) = (h.client.clone(), h.ns.clone());

    let names: Vec<String> = (0..4).map(|i| format!("w{i}")).collect();
    futures::future::join_all(names.iter().map(|name| {
        create_stable(
            &client,
            &ns,
            name,
            json!({"components": [good("shop:1")], "strategy": {"steps": long_steps()}}),
        )
    }))
    .await;

    // Faults at writes, in the background, for the window.
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let faults = tokio::spawn({
        let (proxy, log) = (Arc::clone(&proxy), Arc::clone(&log));
        async move {
            let mut rng = Rng::new(seed);
            let start = Instant::now();
            let mut fired = 0;
            // The window, and longer while fewer than five faults met a write
            // (over HTTP/1.1 a watch whose events were lost stays quiet until
            // its next bookmark, about a minute, and nothing is written
            // meanwhile), up to three windows.
            while start.elapsed() < window || (fired < 5 && start.elapsed() < 3 * window) {
                let (fault, lasts) = if rng.range(0, 2) < 2 {
                    (
                        Fault::LoseAnswers,
                        rng.duration(Duration::from_millis(300), Duration::from_secs(6)),
                    )
                } else {
                    (
                        Fault::Down,
                        rng.duration(Duration::from_millis(50), Duration::from_millis(500)),
                    )
                };
                if proxy.on_next_write(fault, Duration::from_secs(10)).await {
                    fired += 1;
                    log.lock().unwrap().push(format!(
                        "{:>6.1}s {fault:?} at a write, for {lasts:?}",
                        start.elapsed().as_secs_f64()
                    ));
                    tokio::time::sleep(lasts).await;
                    proxy.set(Fault::Pass);
                }
                tokio::time::sleep(
                    rng.duration(Duration::from_millis(200), Duration::from_secs(2)),
                )
                .await;
            }
            proxy.set(Fault::Pass);
            fired
        }
    });

    // Releases, one version after another, for as long as faults come: a
    // plan that is Stable on its version gets the next.
    let mut version: BTreeMap<String, u32> = names.iter().map(|n| (n.clone(), 1)).collect();
    while !faults.is_finished() {
        for name in &names {
            let Some(p) = get(&client, &ns, name).await else {
                continue;
            };
            let s = p.status.clone().unwrap_or_default();
            if s.phase == Phase::Stable && s.observed_generation == p.metadata.generation {
                let v = version.get_mut(name).unwrap();
                *v += 1;
                set_components(&client, &ns, name, json!([good(&format!("shop:{v}"))])).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let fired = faults.await.unwrap();
    let last_fault = Instant::now();
    let faults_text = log.lock().unwrap().join("\n");
    println!("{fired} faults at writes:\n{faults_text}");
    assert!(
        fired >= 5,
        "only {fired} faults met a write:\n{faults_text}"
    );

    // Every plan ends Stable on its last version, within a bound of the last
    // fault: the request deadline, the reconcile deadline, the backoff after
    // failures (at most 30 s...) and a rollout of 6 s of pauses.
    let bound = Duration::from_secs(90);
    let ended = {
        let (client, ns, names) = (client.clone(), ns.clone(), names.clone());
        tokio::spawn(async move {
            wait_until(bound, "every plan Stable on its last version", || async {
                let mut pending = Vec::new();
                for name in &names {
                    let p = get(&client, &ns, name)
                        .await
                        .ok_or_else(|| format!("{name} is gone"))?;
                    let s = p.status.clone().unwrap_or_default();
                    if s.phase != Phase::Stable || s.observed_generation != p.metadata.generation {
                        pending.push(format!(
                            "{name}: {} step {} observed {:?} of {:?}",
                            s.phase, s.current_step, s.observed_generation, p.metadata.generation
                        ));
                    }
                }
                if pending.is_empty() {
                    Ok(())
                } else {
                    Err(pending.join("; "))
                }
            })
            .await;
        })
        .await
        .is_ok()
    };
    assert!(
        ended,
        "a plan did not end Stable within {bound:?} of the last fault (seed {seed}):\n{faults_text}\n{}",
        op.log_text()
    );
    println!(
        "every plan Stable {:?} after the last fault",
        last_fault.elapsed()
    );
    // /healthz 200 again, HEAL_BOUND after every plan ended at the latest.
    let healed = Instant::now();
    while healthz(op.port).await != Some(200) {
        if healed.elapsed() > HEAL_BOUND {
            let said = reqwest::get(format!("http://127.0.0.1:{}/healthz", op.port))
                .await
                .unwrap()
                .text()
                .await;
            panic!(
                "/healthz still fails {:?} after the last fault: {said:?} (seed {seed})\n{faults_text}\n{}",
                last_fault.elapsed(),
                op.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "/healthz 200 {:?} after the last fault",
        last_fault.elapsed()
    );
    // Each rollout's start and promotion announced exactly once: a write
    // whose answer was lost (or whose reconcile was given up) has its Events
    // published once its landing is read, never twice, never lost.
    let mut problems = Vec::new();
    for name in &names {
        // The first release and each version after it.
        let rollouts = version[name] as i32;
        let deadline = Instant::now() + Duration::from_secs(30);
        let count = |events: &[(String, String, String, i32)], reason: &str| -> i32 {
            events
                .iter()
                .filter(|e| e.0 == reason)
                .map(|e| e.3.max(1))
                .sum()
        };
        let events = loop {
            let events = plan_events(&client, &ns, name).await;
            let done = ["RolloutStarted", "Promoted"]
                .iter()
                .all(|r| count(&events, r) >= rollouts);
            if done || Instant::now() > deadline {
                break events;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        for reason in ["RolloutStarted", "Promoted"] {
            let got = count(&events, reason);
            if got != rollouts {
                problems.push(format!(
                    "{name}: {got} {reason} Events for {rollouts} rollouts: {:?}",
                    events.iter().filter(|e| e.0 == reason).collect::<Vec<_>>()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n(seed {seed})\n{faults_text}\n{}",
        problems.join("\n"),
        op.log_text()
    );
    let metrics = op.metrics().await;
    let within = |bucket: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "releaseplan_reconcile_duration_seconds_bucket{{le=\"{bucket}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    let (ten, all) = (within("10.0"), within("+Inf"));
    let given_up = op
        .log_text()
        .matches("reconcile given up at its deadline")
        .count();
    println!("{all} reconciles, {ten} within 10 s; {given_up} given up at the reconcile deadline");
    assert!(all > 0.0, "no reconcile counted:\n{metrics}");
    assert_eq!(
        ten,
        all,
        "a reconcile ran past 10 s (request deadline {LOST_REQUEST_DEADLINE} s, reconcile deadline {LOST_RECONCILE_DEADLINE} s)\n{}",
        op.log_text()
    );
}

#[tokio::test]
async fn a_lost_answer_never_stalls_a_plan_over_http2() {
    lost_answers_never_stall_a_plan(true).await;
}

#[tokio::test]
async fn a_lost_answer_never_stalls_a_plan_over_http1() {
    lost_answers_never_stall_a_plan(false).await;
}
