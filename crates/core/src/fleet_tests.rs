use super::*;
use chrono::TimeZone;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Canary `a`, then a quarter, then the rest: the three waves.
fn three_waves(soak: u64) -> Vec<WaveSpec> {
    vec![
        WaveSpec {
            name: "canary".into(),
            clusters: names(&["a"]),
            soak: Duration::from_secs(soak),
            ..WaveSpec::default()
        },
        WaveSpec {
            name: "quarter".into(),
            percent: Some(25),
            soak: Duration::from_secs(soak),
            on_failure: OnFailure::RollBack,
            ..WaveSpec::default()
        },
        WaveSpec {
            name: "rest".into(),
            ..WaveSpec::default()
        },
    ]
}

fn plan(revision: &str, phase: Phase, stable: &str, admitted: Option<&str>) -> MemberView {
    MemberView::Plan(MemberPlan {
        revision: revision.into(),
        phase,
        stable_revision: Some(stable.into()),
        admitted: admitted.map(str::to_string),
        failure: None,
    })
}

fn fleet(members: &[(&str, MemberView)]) -> BTreeMap<String, MemberView> {
    members
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

#[test]
fn waves_take_named_clusters_then_shares_then_the_rest() {
    let a = assign(
        &three_waves(0),
        &names(&["d", "c", "b", "a", "e", "f", "g", "h"]),
    );
    assert_eq!(a.waves[0], names(&["a"]));
    // 25% of 8 selected, rounded up, by name among those left.
    assert_eq!(a.waves[1], names(&["b", "c"]));
    assert_eq!(a.waves[2], names(&["d", "e", "f", "g", "h"]));
    assert!(a.unassigned.is_empty() && a.missing.is_empty());
}

#[test]
fn a_named_cluster_not_selected_is_missing_and_without_a_rest_wave_some_are_unassigned() {
    let mut waves = three_waves(0);
    waves.pop();
    waves[0].clusters = names(&["zz"]);
    let a = assign(&waves, &names(&["a", "b", "c", "d", "e"]));
    assert_eq!(a.missing, names(&["zz"]));
    assert_eq!(a.waves[1], names(&["a", "b"]));
    assert_eq!(a.unassigned, names(&["c", "d", "e"]));
}

#[test]
fn a_new_revision_admits_only_the_first_wave() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r1", None)),
        ("b", plan("r2", Phase::Stable, "r1", None)),
        ("c", plan("r2", Phase::Stable, "r1", None)),
        ("d", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let d = decide(&FleetObservation {
        now: t(0),
        waves: three_waves(60),
        members,
        state: FleetState::default(),
    });
    assert_eq!(d.phase, FleetPhase::Progressing);
    assert_eq!(d.active_wave, Some(0));
    assert_eq!(d.admit, vec![("a".to_string(), "r2".to_string())]);
    assert_eq!(d.state.target.as_deref(), Some("r2"));
    assert_eq!(d.state.previous.as_deref(), Some("r1"));
    let verdicts: Vec<Verdict> = d.clusters.iter().map(|c| c.verdict).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Admitted,
            Verdict::Waiting,
            Verdict::Waiting,
            Verdict::Waiting
        ]
    );
}

#[test]
fn the_next_wave_starts_only_after_the_soak() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("b", plan("r2", Phase::Stable, "r1", None)),
        ("c", plan("r2", Phase::Stable, "r1", None)),
        ("d", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let mut obs = FleetObservation {
        now: t(100),
        waves: three_waves(60),
        members,
        state: FleetState {
            target: Some("r2".into()),
            previous: Some("r1".into()),
            ..FleetState::default()
        },
    };
    let d = decide(&obs);
    assert!(d.admit.is_empty(), "soaking: {:?}", d.admit);
    assert_eq!(d.state.stable_since[0], Some(t(100)));
    assert!(d.requeue <= Duration::from_secs(61));
    obs.state = d.state;
    obs.now = t(161);
    let d = decide(&obs);
    // 25% of 4 is one cluster: b.
    assert_eq!(d.admit, vec![("b".to_string(), "r2".to_string())]);
    assert_eq!(d.active_wave, Some(1));
}

#[test]
fn every_wave_stable_and_soaked_is_success() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("b", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("c", plan("r2", Phase::Stable, "r2", Some("r2"))),
    ]);
    let d = decide(&FleetObservation {
        now: t(0),
        waves: three_waves(0),
        members,
        state: FleetState::default(),
    });
    assert_eq!(d.phase, FleetPhase::Succeeded);
    assert!(d.clusters.iter().all(|c| c.verdict == Verdict::Released));
}

#[test]
fn an_unreachable_member_holds_its_wave_and_is_never_a_success() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("b", MemberView::Unreachable("connection refused".into())),
        ("c", plan("r2", Phase::Stable, "r1", None)),
        ("d", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let d = decide(&FleetObservation {
        now: t(0),
        waves: three_waves(0),
        members,
        state: FleetState::default(),
    });
    assert_eq!(d.phase, FleetPhase::Progressing);
    assert_eq!(d.active_wave, Some(1));
    assert!(d.admit.is_empty());
    assert_eq!(d.held_by.len(), 1);
    assert!(
        d.held_by[0].contains("cluster b cannot be reached"),
        "{:?}",
        d.held_by
    );
    assert_eq!(d.clusters[1].verdict, Verdict::Unreachable);
}

#[test]
fn a_member_changed_outside_the_fleet_is_reported_not_admitted() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r1", None)),
        ("b", plan("r2", Phase::Stable, "r1", None)),
        ("c", plan("r9", Phase::Stable, "r1", None)),
    ]);
    let mut waves = three_waves(0);
    waves[0].clusters = names(&["c"]);
    let d = decide(&FleetObservation {
        now: t(0),
        waves,
        members,
        state: FleetState::default(),
    });
    assert_eq!(d.state.target.as_deref(), Some("r2"));
    assert!(d.admit.is_empty());
    let c = d.clusters.iter().find(|c| c.name == "c").unwrap();
    assert_eq!(c.verdict, Verdict::Diverged);
    assert!(
        d.held_by[0].contains("names revision r9"),
        "{:?}",
        d.held_by
    );
}

#[test]
fn failures_past_the_budget_take_the_admitted_clusters_back() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("b", plan("r2", Phase::RolledBack, "r1", Some("r2"))),
        ("c", plan("r2", Phase::Stable, "r1", None)),
        ("d", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let state = FleetState {
        target: Some("r2".into()),
        previous: Some("r1".into()),
        stable_since: vec![Some(t(0)), None, None],
        stopped: None,
    };
    let d = decide(&FleetObservation {
        now: t(10),
        waves: three_waves(0),
        members: members.clone(),
        state,
    });
    assert_eq!(d.phase, FleetPhase::RolledBack);
    assert_eq!(
        d.take_back,
        vec![
            ("a".to_string(), "r1".to_string()),
            ("b".to_string(), "r1".to_string())
        ]
    );
    assert!(d.admit.is_empty(), "wave 3 never starts");
    // Next look: taken back, sticky; nothing more to do.
    let mut after = members;
    for n in ["a", "b"] {
        after.insert(n.into(), plan("r2", Phase::RolledBack, "r1", Some("r1")));
    }
    let d2 = decide(&FleetObservation {
        now: t(20),
        waves: three_waves(0),
        members: after,
        state: d.state,
    });
    assert_eq!(d2.phase, FleetPhase::RolledBack);
    assert!(d2.take_back.is_empty() && d2.admit.is_empty());
    let verdicts: Vec<Verdict> = d2.clusters.iter().map(|c| c.verdict).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::TakenBack,
            Verdict::TakenBack,
            Verdict::Waiting,
            Verdict::Waiting
        ]
    );
}

#[test]
fn a_failure_within_the_budget_of_a_hold_wave_goes_on_and_past_it_holds() {
    let mut waves = three_waves(0);
    waves[0].failure_budget = 1;
    let members = fleet(&[
        ("a", plan("r2", Phase::RolledBack, "r1", Some("r2"))),
        ("b", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let d = decide(&FleetObservation {
        now: t(0),
        waves: waves.clone(),
        members: members.clone(),
        state: FleetState::default(),
    });
    // Within budget: the wave is done without it, the next one starts.
    assert_eq!(d.phase, FleetPhase::Progressing);
    assert_eq!(d.active_wave, Some(1));
    assert_eq!(d.admit, vec![("b".to_string(), "r2".to_string())]);
    waves[0].failure_budget = 0;
    let d = decide(&FleetObservation {
        now: t(0),
        waves,
        members,
        state: FleetState::default(),
    });
    assert_eq!(d.phase, FleetPhase::Held);
    assert!(d.admit.is_empty() && d.take_back.is_empty());
}

#[test]
fn a_hub_restarted_mid_wave_decides_the_same_from_the_members_and_its_status() {
    let members = fleet(&[
        ("a", plan("r2", Phase::Stable, "r2", Some("r2"))),
        ("b", plan("r2", Phase::RollingOut, "r1", Some("r2"))),
        ("c", plan("r2", Phase::Stable, "r1", None)),
        ("d", plan("r2", Phase::Stable, "r1", None)),
    ]);
    let state = FleetState {
        target: Some("r2".into()),
        previous: Some("r1".into()),
        stable_since: vec![Some(t(0)), None, None],
        stopped: None,
    };
    let obs = FleetObservation {
        now: t(30),
        waves: three_waves(10),
        members,
        state,
    };
    let d = decide(&obs);
    assert_eq!(d, decide(&obs), "the same look, the same decision");
    assert_eq!(d.active_wave, Some(1));
    assert!(d.admit.is_empty(), "b is admitted already");
    assert_eq!(d.clusters[1].verdict, Verdict::Admitted);
}

#[test]
fn no_member_plan_is_idle() {
    let d = decide(&FleetObservation {
        now: t(0),
        waves: three_waves(0),
        members: fleet(&[("a", MemberView::NoPlan)]),
        state: FleetState::default(),
    });
    assert_eq!(d.phase, FleetPhase::Idle);
    assert_eq!(d.clusters[0].verdict, Verdict::Missing);
}
