//! Release freezes on the local control plane: a `ReleaseFreeze` holds a
//! plan's new revision (the stable one keeps serving), a `promote
//! --override-window` pushes one step through (audited in an Event), a
//! crash-loop rollback still happens while the freeze is in force, and
//! lifting the freeze lets the held rollout finish. A plan's own release
//! window holds a new revision the same way until the window includes now.

use crate::support;

use chrono::Utc;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use releaseplan::api::window::ReleaseFreeze;
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::json;
use support::fixtures::{faulty_template, template, web_with};
use support::plans::{
    by_image, condition, create_stable, get, plan_events, request, revisions, set_components,
    wait_phase,
};
use support::{Harness, WAIT, wait_until};

/// A freeze in force since a minute ago, without an end, that selects only
/// the plans of `ns` (the freeze is cluster-scoped; tests run side by side).
async fn freeze(client: &Client, ns: &str) -> String {
    let name = format!("{ns}-freeze");
    let start = (Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    let obj = json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleaseFreeze",
        "metadata": {"name": name},
        "spec": {"start": start, "reason": "integration test",
                 "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}});
    Api::<ReleaseFreeze>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("freeze-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the ReleaseFreeze");
    name
}

async fn lift(client: &Client, name: &str) {
    Api::<ReleaseFreeze>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the ReleaseFreeze");
}

/// Waits until the plan's `Progressing` condition says `ReleaseFrozen` and
/// `pred` holds of the plan.
async fn wait_frozen(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&ReleasePlan) -> bool,
) -> ReleasePlan {
    wait_until(WAIT, what, || async {
        let p = get(client, ns, name).await.ok_or("no plan")?;
        let (status, reason, message) =
            condition(&p, "Progressing").ok_or_else(|| format!("no condition: {:?}", p.status))?;
        if status != "True" || reason != "ReleaseFrozen" {
            return Err(format!("Progressing {status} {reason}: {message}"));
        }
        if !pred(&p) {
            return Err(format!("{:?}", p.status));
        }
        Ok(p)
    })
    .await
}

async fn wait_event(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    wait_until(WAIT, &format!("a {reason} Event on {name}"), || async {
        plan_events(client, ns, name)
            .await
            .into_iter()
            .find(|e| e.0 == reason)
            .map(|e| format!("{} {}", e.1, e.2))
    })
    .await
}

#[tokio::test]
async fn a_freeze_holds_a_rollout_until_lifted_while_a_crash_loop_still_rolls_back() {
    let (Harness { client, ns }, _op) = Harness::with_operator("freeze").await;
    let steps = json!([{"setWeight": 34}, {"pause": {}}]);
    let spec = |image: &str| json!({"components": [web_with(template(image), 3)], "strategy": {"steps": steps}});
    create_stable(&client, &ns, "shop", spec("shop:1")).await;
    create_stable(&client, &ns, "crashy", spec("shop:1")).await;
    // crashy is rolling out, at its `pause: {}` step, when the freeze begins.
    set_components(
        &client,
        &ns,
        "crashy",
        json!([web_with(template("shop:2"), 3)]),
    )
    .await;
    wait_until(WAIT, "crashy at its pause step", || async {
        let p = get(&client, &ns, "crashy").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::RollingOut && s.current_step == 1).then_some(())
    })
    .await;
    let name = freeze(&client, &ns).await;

    // A new revision of shop waits: the stable one serves, nothing new runs.
    set_components(
        &client,
        &ns,
        "shop",
        json!([web_with(template("shop:2"), 3)]),
    )
    .await;
    let held = wait_frozen(&client, &ns, "shop", "shop held by the freeze", |p| {
        p.status.as_ref().is_some_and(|s| s.phase == Phase::Stable)
    })
    .await;
    let message = condition(&held, "Progressing").unwrap().2;
    assert!(
        message.contains("waits to start")
            && message.contains(&name)
            && message.contains("until it is lifted"),
        "{message}"
    );
    assert_eq!(condition(&held, "Ready").unwrap().0, "False");
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:1"), Some((3, 3)), "{revs:?}");
    assert_eq!(
        by_image(&revs, "shop:2"),
        None,
        "no pod of the held revision: {revs:?}"
    );
    wait_event(&client, &ns, "shop", "RolloutHeld").await;

    // The rollout under way is held at its next step too; a newer revision
    // that crash-loops still starts (it replaces the rollout) and rolls
    // back while the freeze is in force.
    wait_frozen(&client, &ns, "crashy", "crashy's next step held", |_| true).await;
    set_components(
        &client,
        &ns,
        "crashy",
        json!([web_with(faulty_template("shop:3", "crash-loop"), 3)]),
    )
    .await;
    let rolled = wait_phase(&client, &ns, "crashy", Phase::RolledBack, WAIT).await;
    let f = rolled.status.clone().unwrap().failure.unwrap();
    assert_eq!(f.gate, "podHealth", "{f:?}");
    let revs = revisions(&client, &ns, "crashy").await;
    assert_eq!(by_image(&revs, "shop:1"), Some((3, 3)), "{revs:?}");
    assert!(
        Api::<ReleaseFreeze>::all(client.clone())
            .get_opt(&name)
            .await
            .unwrap()
            .is_some(),
        "the freeze was in force throughout"
    );

    // The override starts shop's rollout, audited, and its next step is held
    // again: asked as a user would, through the plugin, which waits for the
    // operator to acknowledge it.
    let args = ["promote", "shop", "--override-window", "-n", ns.as_str()].map(String::from);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(&args)
            .output()
            .expect("cannot run kubectl-releaseplan")
    })
    .await
    .expect("plugin thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("requested override-window"),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let overridden = wait_event(&client, &ns, "shop", "WindowOverridden").await;
    assert!(overridden.starts_with("Warning"), "{overridden}");
    let at_step = wait_frozen(&client, &ns, "shop", "shop's first step done, held", |p| {
        // At step 0 with its pods ready, as the operator observed them.
        p.status.as_ref().is_some_and(|s| {
            s.phase == Phase::RollingOut
                && s.current_step == 0
                && s.components.iter().all(|c| c.current_ready >= 2)
        })
    })
    .await;
    let message = condition(&at_step, "Progressing").unwrap().2;
    assert!(message.contains("the next step waits"), "{message}");

    // Lifted: shop goes on by itself (its `pause: {}` still needs a promote).
    lift(&client, &name).await;
    wait_until(WAIT, "shop at its pause step after the lift", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::RollingOut && s.current_step == 1).then_some(())
    })
    .await;
    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((3, 3)), "{revs:?}");
}

#[tokio::test]
async fn the_api_server_refuses_a_freeze_that_ends_before_it_starts() {
    let Harness { client, ns } = Harness::new("freeze-cel").await;
    let obj = json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleaseFreeze",
        "metadata": {"name": format!("{ns}-bad")},
        "spec": {"start": "2026-12-27T00:00:00Z", "end": "2026-12-24T00:00:00Z"}});
    let e = Api::<ReleaseFreeze>::all(client.clone())
        .patch(
            &format!("{ns}-bad"),
            &PatchParams::apply("freeze-test"),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("spec.end") && text.contains("end must be after start"),
        "{text}"
    );
    // A window with an unknown day or a bad time is refused too, naming the field.
    let bad = json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
        "metadata": {"name": "shop"},
        "spec": {"components": [web_with(template("shop:1"), 1)],
            "strategy": {"windows": [{"days": ["Monday"], "start": "9:00", "end": "17:00"}]}}});
    let e = Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .patch(
            "shop",
            &PatchParams::apply("freeze-test"),
            &Patch::Apply(bad),
        )
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("spec.strategy.windows[0].days[0]")
            && text.contains("spec.strategy.windows[0].start"),
        "{text}"
    );
}

/// A daily window in UTC from `from` to `to` minutes from now (`HH:MM`; past
/// midnight it wraps, as windows do).
fn window_from_now(from: i64, to: i64) -> serde_json::Value {
    let at = |m: i64| {
        (Utc::now() + chrono::Duration::minutes(m))
            .format("%H:%M")
            .to_string()
    };
    json!({"start": at(from), "end": at(to), "timeZone": "UTC"})
}

/// A plan's own release window on the real control plane: a new revision
/// asked for outside it waits (stable serving, no pod of it, the reason and
/// the opening time in `Progressing`), and starts when the window is moved
/// to include now.
#[tokio::test]
async fn a_new_revision_waits_for_the_plans_window_and_starts_inside_it() {
    let (Harness { client, ns }, _op) = Harness::with_operator("window").await;
    let spec = |image: &str, window: serde_json::Value| {
        json!({"components": [web_with(template(image), 2)],
               "strategy": {"steps": [{"setWeight": 50}], "windows": [window]}})
    };
    create_stable(
        &client,
        &ns,
        "shop",
        spec("shop:1", window_from_now(120, 180)),
    )
    .await;
    let api = Api::<ReleasePlan>::namespaced(client.clone(), &ns);
    let set = |s: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(
                "shop",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": s})),
            )
            .await
            .expect("patch the plan");
        }
    };
    set(spec("shop:2", window_from_now(120, 180))).await;
    let held = wait_until(WAIT, "shop held outside its window", || async {
        let p = get(&client, &ns, "shop").await.ok_or("no plan")?;
        let (status, reason, message) =
            condition(&p, "Progressing").ok_or_else(|| format!("no condition: {:?}", p.status))?;
        if status != "True" || reason != "OutsideReleaseWindow" {
            return Err(format!("Progressing {status} {reason}: {message}"));
        }
        Ok(p)
    })
    .await;
    assert_eq!(held.status.as_ref().unwrap().phase, Phase::Stable);
    let message = condition(&held, "Progressing").unwrap().2;
    assert!(message.contains("waits to start"), "{message}");
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:1"), Some((2, 2)), "{revs:?}");
    assert_eq!(by_image(&revs, "shop:2"), None, "held: {revs:?}");

    // The window moved to now: the rollout starts and finishes by itself.
    set(spec("shop:2", window_from_now(-30, 30))).await;
    wait_until(WAIT, "shop rolled out to shop:2", || async {
        let revs = revisions(&client, &ns, "shop").await;
        let p = get(&client, &ns, "shop").await?;
        (p.status?.phase == Phase::Stable && by_image(&revs, "shop:2") == Some((2, 2)))
            .then_some(())
    })
    .await;
}
