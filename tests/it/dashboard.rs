//! `kubectl releaseplan dashboard` as a person uses it: the real plugin
//! serving the page, headless Chromium pressing its buttons, the real
//! operator rolling plans out on the local control plane. Screenshots go to
//! `$CARGO_TARGET_DIR/dashboard-screenshots/` (printed with `--nocapture`).

use crate::support;

use fantoccini::Locator;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use kube::Client;
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::io::{Read, Write};
use support::browser::{Browser, Dashboard};
use support::fixtures::{faulty_template, plan, web};
use support::plans::{create, get, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

fn status_of(p: &ReleasePlan) -> releaseplan::api::ReleasePlanStatus {
    p.status.clone().unwrap_or_default()
}

/// The overview row of `ns/name`, as a CSS selector.
fn row(ns: &str, name: &str) -> String {
    format!("tr[data-key=\"{ns}/{name}\"]")
}

/// The progress bar of a row: the state of each segment (`done`, `cur`, `todo`).
async fn segments(b: &Browser, ns: &str, name: &str) -> Vec<String> {
    let v = b
        .js(
            "return [...document.querySelectorAll(arguments[0] + ' .seg')].map(s =>
               s.classList.contains('done') ? 'done' : s.classList.contains('cur') ? 'cur' : 'todo');",
            vec![json!(row(ns, name))],
        )
        .await;
    serde_json::from_value(v).unwrap()
}

async fn wait_segments(b: &Browser, ns: &str, name: &str, want: &[&str]) {
    wait_until(
        WAIT,
        &format!("the step bar of {name} to be {want:?}"),
        || async { (segments(b, ns, name).await == want).then_some(()) },
    )
    .await;
}

/// The WCAG contrast ratio of the text of `css` (its first match) against
/// the page's background: 4.5 or more is readable body text.
async fn contrast(b: &Browser, css: &str) -> f64 {
    b.js(
        "const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
         const lum = (c) => { const [r, g, b] = rgb(c).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
           return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
         const fg = lum(getComputedStyle(document.querySelector(arguments[0])).color);
         const bg = lum(getComputedStyle(document.body).backgroundColor);
         return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);",
        vec![json!(css)],
    )
    .await
    .as_f64()
    .unwrap_or_else(|| panic!("no colour for {css}"))
}

/// Switches the page's `prefers-color-scheme` (Chrome DevTools Protocol).
async fn color_scheme(b: &Browser, scheme: &str) {
    b.cdp(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
    )
    .await;
}

/// Presses an action button of the plan page, then Confirm in the dialog.
/// The page is drawn again on every change of the plan (its whole HTML): a
/// click that lands while it is redrawn can hit nothing. That is the likely
/// cause of one run under heavy load (a release build beside it) where no
/// dialog opened in 120 s after a click WebDriver reported done. Like a
/// user, the test presses again when no dialog opened within 5 s.
async fn press(b: &Browser, action: &str) {
    let button = format!("#act-{action}:not([disabled])");
    let open = || async {
        b.js("return document.getElementById('confirm').open;", vec![])
            .await
            .as_bool()
            == Some(true)
    };
    wait_until(WAIT, "the confirmation dialog", || async {
        if !open().await {
            b.click(&button).await;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if open().await {
                return Some(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        None
    })
    .await;
    b.click("#confirm-yes").await;
}

/// A plan with four steps (two indefinite pauses) released once at `shop:1`.
async fn stable_plan(client: &Client, ns: &str, name: &str) {
    let steps = json!([{"setWeight": 25}, {"pause": {}}, {"setWeight": 50}, {"pause": {}}]);
    create(
        client,
        ns,
        &plan(
            name,
            json!({"components": [web("shop:1", 4)], "strategy": {"steps": steps}}),
        ),
    )
    .await;
    wait_phase(client, ns, name, Phase::Stable, WAIT).await;
}

/// A raw HTTP/1.1 request to the dashboard on 127.0.0.1 (to check what a
/// browser would not let a page send): the whole answer.
fn raw(port: u16, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The status code of an answer from [`raw`].
fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

fn raw_status(port: u16, request: &str) -> u16 {
    status(&raw(port, request))
}

/// A GET of `path` on 127.0.0.1:`port` with `extra` header lines.
fn get_request(port: u16, path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: close\r\n\r\n")
}

/// Issue 50, part 5: the pages, the data and the page's token go only to a
/// request that shows the token; other local processes get a 401 and
/// nothing else. The URL's token sets an HttpOnly SameSite=Strict cookie
/// that the page's own requests carry.
fn check_every_request_needs_the_token(port: u16, token: &str, plan: &str) {
    for path in ["/", "/app.js", "/api/plans", "/api/stream", "/nothing-here"] {
        for extra in [
            String::new(),
            format!("Cookie: rp_token_{port}=wrong\r\n"),
            format!("Cookie: rp_token_{}={token}\r\n", port + 1),
        ] {
            let answer = raw(port, &get_request(port, path, &extra));
            assert_eq!(status(&answer), 401, "GET {path} {extra:?}: {answer}");
            assert!(!answer.contains(token), "the token in {answer}");
            assert!(!answer.contains(plan), "the plan in {answer}");
        }
    }
    let answer = raw(port, &get_request(port, &format!("/?token={token}"), ""));
    assert_eq!(status(&answer), 200, "{answer}");
    let cookie = format!("rp_token_{port}={token}; Path=/; HttpOnly; SameSite=Strict");
    assert!(
        answer.lines().any(|l| l
            .split_once(':')
            .is_some_and(|(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.trim() == cookie)),
        "{answer}"
    );
    let with_cookie = format!("Cookie: rp_token_{port}={token}\r\n");
    let answer = raw(port, &get_request(port, "/api/plans", &with_cookie));
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains(plan), "{answer}");
}

#[tokio::test]
async fn the_bar_advances_and_promote_moves_the_plan_on() {
    let (Harness { client, ns }, op) = Harness::with_operator("dash-promote").await;
    stable_plan(&client, &ns, "shop").await;
    create(
        &client,
        &ns,
        &plan("cart", json!({"components": [web("cart:1", 1)]})),
    )
    .await;
    let dash = Dashboard::start(&["-n", &ns]).await;
    let b = Browser::start().await;
    b.client.goto(&dash.url).await.unwrap();

    // The overview lists both plans; shop is released: every segment done.
    b.wait_text(WAIT, &row(&ns, "shop"), "Stable").await;
    b.wait_text(WAIT, &row(&ns, "cart"), "cart").await;
    wait_segments(&b, &ns, "shop", &["done"; 4]).await;

    // The overview's rows are grids (for speed) yet still a table to a
    // screen reader: the roles the browser computes.
    assert_eq!(b.role("#plans").await, "table");
    assert_eq!(b.role("#plans th").await, "columnheader");
    assert_eq!(b.role(&row(&ns, "shop")).await, "row");
    assert_eq!(b.role(&format!("{} td", row(&ns, "shop"))).await, "cell");
    // The weight column: the replica split, and the traffic split next to it
    // when status has one (the page's own formatting; the CRD of this build
    // has no trafficWeight to write).
    let weights = b
        .js(
            "return [weightText({weight: 25}), weightText({weight: 25, trafficWeight: 10}),
                     weightText({weight: 50}, 'weight '), weightText({weight: 50, trafficWeight: 0}, 'weight ')];",
            vec![],
        )
        .await;
    assert_eq!(
        weights,
        json!([
            "25%",
            "traffic 10% · pods 25%",
            "weight 50%",
            "traffic 0% · pods 50%"
        ])
    );

    // A new image: the bar shows the first pause as the current step, live.
    set_components(&client, &ns, "shop", json!([web("shop:2", 4)])).await;
    wait_segments(&b, &ns, "shop", &["done", "cur", "todo", "todo"]).await;
    let text = b.wait_text(WAIT, &row(&ns, "shop"), "RollingOut").await;
    assert!(text.contains("step 2/4"), "{text}");
    assert!(text.contains("25%"), "{text}");
    assert!(text.contains("waiting for promotion"), "{text}");
    b.screenshot("overview").await;

    // The plan page, by keyboard: filter to shop, Tab to its link, Enter.
    let filter = b.client.find(Locator::Css("#filter")).await.unwrap();
    filter.send_keys("shop").await.unwrap();
    wait_until(WAIT, "the filter to hide cart", || async {
        b.js(
            "return document.querySelector(arguments[0]).hidden;",
            vec![json!(row(&ns, "cart"))],
        )
        .await
        .as_bool()
        .filter(|hidden| *hidden)
    })
    .await;
    filter.send_keys(&Key::Tab).await.unwrap();
    let focused = b.client.active_element().await.unwrap();
    let link = format!("#/plan/{ns}/shop");
    assert_eq!(
        focused.attr("href").await.unwrap().as_deref(),
        Some(link.as_str())
    );
    // A live update of the focused row (its cells are drawn again) keeps the
    // keyboard on its link: without that, focus fell back to the page when
    // the plan's status changed between Tab and Enter (seen in CI).
    let after = b
        .js(
            "const e = rows.get(arguments[0]);
             enqueue({upsert: [Object.assign({}, e.r, {message: (e.r.message || '') + ' '})], delete: []});
             return new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() =>
               done([document.body.contains(document.activeElement),
                     document.activeElement.getAttribute('href')]))));",
            vec![json!(format!("{ns}/shop"))],
        )
        .await;
    assert_eq!(after, json!([true, link]), "focus after a live update");
    // Enter goes to whatever has the focus now (a key action, not a send to
    // an element the page may have drawn again).
    b.client
        .perform_actions(
            KeyActions::new("keyboard".into())
                .then(KeyAction::Down {
                    value: Key::Enter.into(),
                })
                .then(KeyAction::Up {
                    value: Key::Enter.into(),
                }),
        )
        .await
        .unwrap();
    // Promote at the indefinite pause moves the plan on.
    b.wait_text(WAIT, "#plan h2", "RollingOut").await;
    b.wait_text(WAIT, "#plan", "shop-web-").await;
    press(&b, "promote").await;
    b.wait_text(WAIT, "#notice", "sent promote/").await;
    wait_until(WAIT, "the operator to act on the promote", || async {
        let p = get(&client, &ns, "shop").await?;
        (status_of(&p).current_step == 3).then_some(())
    })
    .await;
    b.wait_text(WAIT, "#plan .timeline li.cur", "4.").await;
    b.screenshot("plan").await;

    // Back on the overview, the bar advanced past the second setWeight.
    b.client.goto(&dash.url).await.unwrap();
    wait_segments(&b, &ns, "shop", &["done", "done", "done", "cur"]).await;

    // Promote fully: the plan goes Stable, and the page says so.
    b.click(&format!("{} a", row(&ns, "shop"))).await;
    b.wait_text(WAIT, "#plan h2", "RollingOut").await;
    press(&b, "promote-full").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    b.wait_text(WAIT, "#plan h2", "Stable").await;
    b.wait_text(WAIT, "#plan", "Promoted").await;

    // What other local pages and processes cannot do: read anything
    // without the token; a POST without the page's token (the cookie alone
    // is not enough), or from another origin, or to another Host name,
    // never reaches the cluster.
    let port = dash.port();
    check_every_request_needs_the_token(port, &dash.token(), "shop");
    let post = |extra: &str| {
        format!(
            "POST /api/plans/{ns}/shop/actions/pause HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    let cookie = format!("Cookie: rp_token_{port}={}\r\n", dash.token());
    assert_eq!(raw_status(port, &post("")), 401);
    assert_eq!(raw_status(port, &post(&cookie)), 403);
    assert_eq!(
        raw_status(
            port,
            &post(&format!(
                "{cookie}x-releaseplan-token: {}\r\nOrigin: http://evil.example\r\n",
                dash.token()
            ))
        ),
        403
    );
    assert_eq!(
        raw_status(
            port,
            &format!("GET / HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n")
        ),
        421
    );
    let p = get(&client, &ns, "shop").await.unwrap();
    assert!(!status_of(&p).pause_requested, "{:?}", p.status);
    drop(op);
    b.close().await;
}

#[tokio::test]
async fn a_crash_looping_release_shows_the_rollback_and_its_reason() {
    let (Harness { client, ns }, op) = Harness::with_operator("dash-crash").await;
    let spec = |t: Value| {
        json!({"components": [{"name": "web", "replicas": 2, "template": t}],
               "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}})
    };
    create(
        &client,
        &ns,
        &plan("shop", spec(support::fixtures::template("shop:1"))),
    )
    .await;
    create(
        &client,
        &ns,
        &plan("calm", json!({"components": [web("calm:1", 1)]})),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_phase(&client, &ns, "calm", Phase::Stable, WAIT).await;
    let dash = Dashboard::start(&["-n", &ns]).await;
    let b = Browser::start().await;
    b.client.goto(&dash.url).await.unwrap();
    b.wait_text(WAIT, &row(&ns, "shop"), "Stable").await;

    set_components(
        &client,
        &ns,
        "shop",
        json!([{"name": "web", "replicas": 2,
                "template": faulty_template("shop:2", "crash-loop")}]),
    )
    .await;
    // The failing plan is unmistakable: first row, marked failing, with the reason.
    let text = b.wait_text(WAIT, &row(&ns, "shop"), "RolledBack").await;
    assert!(text.contains("rolled back"), "{text}");
    assert!(text.contains("failed: podHealth"), "{text}");
    let p = get(&client, &ns, "shop").await.unwrap();
    let reason = status_of(&p).failure.expect("failure").reason;
    assert!(text.contains(&reason), "{reason} not in {text}");
    let first = b
        .js(
            "const r = document.querySelector('#rows tr'); return [r.dataset.key, r.className];",
            vec![],
        )
        .await;
    assert_eq!(first, json!([format!("{ns}/shop"), "a-failing"]));
    b.screenshot("overview-rolled-back").await;

    // Readable in both colour schemes: the failure, the muted words, links.
    let failing = format!("{} .state", row(&ns, "shop"));
    let texts = [failing.as_str(), ".st", "#rows a", "#counts"];
    for scheme in ["light", "dark"] {
        color_scheme(&b, scheme).await;
        let bg = b
            .js(
                "return getComputedStyle(document.body).backgroundColor;",
                vec![],
            )
            .await;
        let want = if scheme == "dark" {
            "rgb(13, 17, 23)"
        } else {
            "rgb(255, 255, 255)"
        };
        assert_eq!(bg, json!(want), "{scheme}");
        for css in texts {
            let ratio = contrast(&b, css).await;
            assert!(ratio >= 4.5, "{css} in {scheme}: contrast {ratio:.2}");
        }
    }
    b.screenshot("overview-rolled-back-dark").await;
    color_scheme(&b, "light").await;

    // The plan page: the rollback in the history, the failure, the Events.
    b.click(&format!("{} a", row(&ns, "shop"))).await;
    b.wait_text(WAIT, "#plan h2", "RolledBack").await;
    b.wait_text(WAIT, "#plan", "RolledBack").await;
    b.wait_text(WAIT, "#plan-message", &reason).await;
    b.wait_text(WAIT, "#plan", "Stalled").await;
    b.wait_text(WAIT, "#plan", "RollbackStarted").await;
    b.screenshot("plan-rolled-back").await;
    drop(op);
    b.close().await;
}

#[tokio::test]
async fn an_action_without_permission_shows_the_api_servers_refusal() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, PostParams};
    let (Harness { client, ns }, op) = Harness::with_operator("dash-rbac").await;
    stable_plan(&client, &ns, "shop").await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 4)])).await;
    wait_until(WAIT, "the rollout to hold at the first pause", || async {
        let p = get(&client, &ns, "shop").await?;
        (status_of(&p).current_step == 1).then_some(())
    })
    .await;

    // A user who may look (what the dashboard reads) but not patch.
    let pp = PostParams::default();
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "look"},
            "rules": [{"apiGroups": ["releaseplan.io"], "resources": ["releaseplans"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]}]})).unwrap())
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "look"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "look"},
            "subjects": [{"kind": "User", "name": "viewer", "apiGroup": "rbac.authorization.k8s.io"}]}))
            .unwrap(),
        )
        .await
        .unwrap();

    let dash = Dashboard::start(&["-n", &ns, "--as", "viewer"]).await;
    let b = Browser::start().await;
    b.client
        .goto(&format!("{}#/plan/{ns}/shop", dash.url))
        .await
        .unwrap();
    b.wait_text(WAIT, "#plan h2", "RollingOut").await;
    press(&b, "promote").await;
    let notice = b.wait_text(WAIT, "#notice", "Refused").await;
    assert!(
        notice.contains("User \"viewer\" cannot patch resource \"releaseplans\""),
        "{notice}"
    );
    assert!(notice.contains("403 Forbidden"), "{notice}");
    b.screenshot("plan-refused").await;
    // Nothing was sent: the plan still waits at the pause.
    let p = get(&client, &ns, "shop").await.unwrap();
    assert_eq!(status_of(&p).current_step, 1);
    assert!(
        !p.annotations()
            .contains_key(releaseplan::api::ANNOTATION_REQUEST)
    );
    drop(op);
    b.close().await;
}

use kube::ResourceExt;

/// Bound beyond loopback (0.0.0.0: every address of this machine), the
/// dashboard says so on stderr, and still wants the token on every request
/// (the traffic here goes to 127.0.0.1 only).
#[tokio::test]
async fn bound_beyond_loopback_it_warns_and_still_wants_the_token() {
    let Harness { client, ns } = Harness::new("dash-wide").await;
    create(
        &client,
        &ns,
        &plan("wide", json!({"components": [web("wide:1", 1)]})),
    )
    .await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
        .args([
            "dashboard",
            "-n",
            &ns,
            "--address",
            "0.0.0.0",
            "--port",
            "0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl-releaseplan dashboard");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    // stderr read on a thread of its own, line by line, to the end: a
    // dashboard that never warns fails the test after WAIT, not hangs it.
    let (lines, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let (url, warning) = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut url = String::new();
        std::io::BufReader::new(stdout).read_line(&mut url).unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        let mut warning = String::new();
        while let Ok(line) =
            rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            if line.starts_with("warning:") {
                warning = line;
                break;
            }
        }
        (url.trim().to_string(), warning)
    })
    .await
    .unwrap();
    assert!(
        warning.starts_with("warning: listening on 0.0.0.0:")
            && warning.contains("beyond loopback")
            && warning.contains("with your kubeconfig's identity"),
        "{warning:?}"
    );
    let parsed = url::Url::parse(&url).unwrap();
    assert_eq!(parsed.host_str(), Some("0.0.0.0"), "{url}");
    let port = parsed.port().unwrap();
    let token = parsed
        .query_pairs()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    assert!(
        !warning.contains(&token),
        "the token is printed once, on stdout"
    );
    wait_until(WAIT, "the plan in the dashboard's store", || async {
        let answer = raw(
            port,
            &get_request(
                port,
                "/api/plans",
                &format!("x-releaseplan-token: {token}\r\n"),
            ),
        );
        (status(&answer) == 200 && answer.contains("wide")).then_some(())
    })
    .await;
    check_every_request_needs_the_token(port, &token, "wide");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn an_analysis_gate_shows_each_metric_judged() {
    // No operator: the status is written here as the operator writes it,
    // so the page is checked against a judgement whose every figure is known.
    let Harness { client, ns } = Harness::new("dash-analysis").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 1)]})),
    )
    .await;
    let status = json!({"status": {
        "phase": "RollingOut", "currentStep": 0,
        "gates": [{
            "name": "judge", "verdict": "Failed", "failures": 1, "inconclusive": 0,
            "message": "score 50 below the marginal 75; ttft: canary +29.4% against baseline",
            "analysis": {"score": 50.0, "outcome": "Fail", "metrics": [
                {"name": "ttft", "verdict": "Failed", "canarySamples": 12, "baselineSamples": 12,
                 "statistic": 144.0, "pValue": 0.0000913, "effect": 0.294, "interval": [0.0142, 0.0158]},
                {"name": "errors", "verdict": "Inconclusive", "canarySamples": 4, "baselineSamples": 1200}
            ]}
        }]
    }});
    kube::Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .patch_status(
            "shop",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .unwrap();
    let dash = Dashboard::start(&["-n", &ns]).await;
    let b = Browser::start().await;
    b.client.goto(&dash.url).await.unwrap();
    b.wait_text(WAIT, &row(&ns, "shop"), "RollingOut").await;
    b.click(&format!("{} a", row(&ns, "shop"))).await;
    let heading = b.wait_text(WAIT, "#plan h4.analysis", "judge").await;
    assert!(
        heading.contains("score 50") && heading.contains("Fail"),
        "{heading}"
    );
    let rows = b
        .js(
            "return [...document.querySelectorAll('#plan h4.analysis + table tbody tr')]
               .map(r => [...r.cells].map(c => c.textContent));",
            vec![],
        )
        .await;
    assert_eq!(
        rows,
        json!([
            [
                "ttft",
                "Failed",
                "12 / 12",
                "+29.4%",
                "9.13e-5",
                "0.0142 … 0.0158"
            ],
            ["errors", "Inconclusive", "4 / 1200", "-", "-", "-"]
        ])
    );
    b.screenshot("plan-analysis").await;
    b.close().await;
}
