//! Notifications, delivered beside the reconciles (the core's `notify` says
//! which transitions make which notices, and what each receiver is sent).
//!
//! Like Events, a reconcile only queues its notices, after the status write
//! that made the transition landed ([`super::write`]), and never waits: the
//! queue into the dispatcher is bounded and a full one drops (counted). The
//! dispatcher reads the namespace's `releaseplan-notifications` ConfigMap
//! (one GET with a timeout, so an edit applies to the next transition, no
//! restart), picks the subscribed receivers and hands each message to the
//! receiver's own worker, through the receiver's own bounded queue: a slow
//! or dead receiver fills its queue and loses its messages (counted as
//! dropped), nothing else waits for it.
//!
//! At most once per receiver, also across a restart or a leader failover:
//! the mark is the status write itself. It is written under the plan's
//! resourceVersion before anything is sent, so of two operators deciding the
//! same transition only one writes it (the other gets a conflict and drops
//! its notices), and a new leader reads a status that already records the
//! transition and decides no transition again. A crash between the write
//! and the send loses the notice rather than repeating it. Within one
//! process a delivery is retried only when nothing can have arrived
//! (connection refused, credentials not readable) or the receiver said it
//! failed (429, 5xx); a request whose answer never came is not repeated.
//! Every message carries an id unique to its transition, so a receiver can
//! drop a repeat of a 5xx retry itself.
//!
//! Receivers' URLs and tokens are Secret keys read under the gates'
//! credential rules (`gates::access`), and every request goes through the
//! gates' client and its egress checks (`gates::outbound`). Neither a URL
//! nor a token is logged: failures name the receiver and the kind of error.

use super::events::Events;
use super::policy::PolicyCaches;
use crate::api::ReleasePlan;
use crate::api::access::SecretKeyRef;
use crate::gates::access::{AccessError, Binding, CredentialReader};
use crate::gates::outbound::{CallError, GateHttp};
use crate::gates::policy::{Destination, NamespacePolicy};
use crate::ops::metrics::{Metrics, NotificationLabel};
use crate::plan::{EventReason, EventType};
use backon::BackoffBuilder;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::{Api, Client, Resource, ResourceExt};
use releaseplan_core::notify::alertmanager;
use releaseplan_core::notify::commit_status::{self, Forge};
use releaseplan_core::notify::config::{self as ncfg, NotifyConfig, Receiver, ReceiverKind};
use releaseplan_core::notify::payload::{Message, PlanRef};
use releaseplan_core::notify::{Notice, Trigger};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Transitions waiting for the dispatcher; past it they are dropped.
const DISPATCH_QUEUE: usize = 1024;
/// Messages waiting for one receiver; past it they are dropped.
pub const RECEIVER_QUEUE: usize = 64;
/// Longest wait for a receiver's answer.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the API server when reading the ConfigMap, each time.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time the ConfigMap is asked for again while the API server is away.
const READ_DEADLINE: Duration = Duration::from_secs(60);
/// Tries of one delivery (the first and the retries).
const TRIES: u32 = 4;
/// The pauses between tries: `ops::backoff::notification`, 1 s doubling,
/// each under 5 s (with its jitter).
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Failed deliveries in a row after which the plan gets a Warning Event.
pub const FAILING_AFTER: u32 = 3;
/// Who sends: GitHub refuses a request without a User-Agent.
const USER_AGENT: &str = concat!("releaseplan/", env!("CARGO_PKG_VERSION"));
/// The GitHub REST API version the commit statuses are written for.
const GITHUB_API_VERSION: &str = "2022-11-28";
/// Label of drops before any receiver is known.
const NO_RECEIVER: &str = "-";

/// What the controller knows of a plan when it queues its notices.
struct Job {
    reference: ObjectReference,
    plan: PlanRef,
    annotations: BTreeMap<String, String>,
    notices: Vec<Notice>,
}

/// One message for one receiver.
struct Delivery {
    reference: ObjectReference,
    plan_namespace: String,
    receiver: Receiver,
    message: Message,
    /// The commit a commit-status receiver marks.
    commit: Option<String>,
}

/// The notifier's settings.
#[derive(Debug, Clone, Default)]
pub struct NotifySettings {
    /// `--dashboard-url`: a template over `namespace`, `name`, `uid`.
    pub dashboard_url: Option<String>,
}

/// What the dispatcher and the workers share.
struct Shared {
    client: Client,
    http: GateHttp,
    secrets: CredentialReader,
    policy: PolicyCaches,
    events: Events,
    metrics: Arc<Metrics>,
    settings: NotifySettings,
    /// The queue of each receiver's worker, by `namespace/receiver`.
    workers: Mutex<HashMap<String, mpsc::Sender<Delivery>>>,
    /// The commit each plan's revisions started with.
    commits: Mutex<Commits>,
}

/// Revisions kept per plan in [`Commits`]: the rollout, the one it
/// superseded, a rollback's.
const COMMITS_PER_PLAN: usize = 4;
/// Plans kept in [`Commits`]; past it, it starts again (a plan released
/// before loses only the superseded mark of a rollout started before).
const COMMITS_PLANS: usize = 10_000;

/// The commit each revision of a plan started with (the annotation when its
/// `rolloutStarted` was routed), so that the transitions of a rollout, its
/// supersession included, mark its own commit after the annotation has
/// moved on to a newer one. In memory: after a restart a rollout's later
/// transitions read the annotation, and a supersession marks nothing.
#[derive(Default)]
struct Commits(HashMap<String, Vec<(String, String)>>);

impl Commits {
    /// The commit a notice marks; `Ok(None)` when none is known for it.
    fn of(
        &mut self,
        uid: &str,
        notice: &Notice,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<String>, commit_status::CommitError> {
        let revision = notice.revision.clone().unwrap_or_default();
        let kept = self.0.get(uid).and_then(|revs| {
            revs.iter()
                .find(|(r, _)| *r == revision)
                .map(|(_, c)| c.clone())
        });
        if notice.trigger != Trigger::RolloutStarted
            && let Some(c) = kept
        {
            return Ok(Some(c));
        }
        if notice.trigger == Trigger::Superseded {
            return Ok(None);
        }
        let Some(value) = annotations.get(commit_status::COMMIT_ANNOTATION) else {
            return Ok(None);
        };
        let commit = commit_status::commit_of(value)?;
        if self.0.len() >= COMMITS_PLANS && !self.0.contains_key(uid) {
            self.0.clear();
        }
        let revs = self.0.entry(uid.to_string()).or_default();
        revs.retain(|(r, _)| *r != revision);
        revs.push((revision, commit.clone()));
        if revs.len() > COMMITS_PER_PLAN {
            revs.remove(0);
        }
        Ok(Some(commit))
    }
}

/// The queue of notices to deliver; cheap to use from any reconcile.
pub struct Notifier {
    tx: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
}

impl Notifier {
    /// The queue and its dispatcher task (which starts receivers' workers).
    pub fn start(
        client: Client,
        http: GateHttp,
        secrets: CredentialReader,
        policy: PolicyCaches,
        events: Events,
        metrics: Arc<Metrics>,
        settings: NotifySettings,
    ) -> Notifier {
        let (tx, rx) = mpsc::channel::<Job>(DISPATCH_QUEUE);
        let shared = Arc::new(Shared {
            client,
            http,
            secrets,
            policy,
            events,
            metrics: Arc::clone(&metrics),
            settings,
            workers: Mutex::new(HashMap::new()),
            commits: Mutex::new(Commits::default()),
        });
        tokio::spawn(dispatch(shared, rx));
        Notifier { tx, metrics }
    }

    /// Queues the notices of a written decision; never waits.
    pub fn planned(&self, plan: &ReleasePlan, notices: &[Notice]) {
        if notices.is_empty() {
            return;
        }
        let namespace = plan.namespace().unwrap_or_default();
        let job = Job {
            reference: plan.object_ref(&()),
            plan: PlanRef {
                namespace: namespace.clone(),
                name: plan.name_any(),
                uid: plan.uid().unwrap_or_default(),
            },
            annotations: plan.annotations().clone(),
            notices: notices.to_vec(),
        };
        if self.tx.try_send(job).is_err() {
            warn!(
                notices = notices.len(),
                "notification queue full: notices dropped"
            );
            count(
                &self.metrics,
                &namespace,
                NO_RECEIVER,
                "dropped",
                notices.len(),
            );
        }
    }
}

fn count(metrics: &Metrics, namespace: &str, receiver: &str, result: &str, n: usize) {
    metrics
        .notifications
        .get_or_create(&NotificationLabel {
            namespace: namespace.to_string(),
            receiver: receiver.to_string(),
            result: result.to_string(),
        })
        .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
}

/// Takes queued transitions one at a time (a few at once), reads the
/// namespace's config and hands each subscribed receiver its message.
async fn dispatch(shared: Arc<Shared>, rx: mpsc::Receiver<Job>) {
    use futures::StreamExt;
    let reader = Arc::clone(&shared);
    let read = move |job: &Job| {
        let shared = Arc::clone(&reader);
        let ns = job.plan.namespace.clone();
        async move { read_config(&shared, &ns).await }
    };
    in_order(tokio_stream_of(rx), read, 4)
        .for_each(|(job, config)| {
            route(&shared, job, config);
            std::future::ready(())
        })
        .await;
}

/// Each job with what `read` answers for it, up to `at_once` reads running
/// at once, in the order the jobs came: two transitions of a plan written
/// a few milliseconds apart reach each receiver's worker, and so the
/// receiver, in that order even when the first one's read answers last.
fn in_order<J, C, F, R>(
    jobs: impl futures::Stream<Item = J>,
    mut read: R,
    at_once: usize,
) -> impl futures::Stream<Item = (J, C)>
where
    R: FnMut(&J) -> F,
    F: std::future::Future<Output = C>,
{
    use futures::StreamExt;
    jobs.map(move |job| {
        let answer = read(&job);
        async move { (job, answer.await) }
    })
    .buffered(at_once)
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The namespace's config: `Ok(None)` when it has none.
async fn read_config(shared: &Shared, namespace: &str) -> Result<Option<NotifyConfig>, String> {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), namespace);
    let Some(cm) = get_config_map(&api).await? else {
        return Ok(None);
    };
    NotifyConfig::parse(&cm.data.unwrap_or_default())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Reads the namespace's ConfigMap, asking again while the API server is
/// away (no answer within [`READ_TIMEOUT`], 5xx, 429) for up to
/// [`READ_DEADLINE`]: the transition is already marked sent in the status,
/// so a notice given up here is never sent.
async fn get_config_map(api: &Api<ConfigMap>) -> Result<Option<ConfigMap>, String> {
    let deadline = tokio::time::Instant::now() + READ_DEADLINE;
    let mut waits = crate::ops::backoff::api_away().build();
    loop {
        let delay = waits.next().unwrap_or(RETRY_MAX);
        let why = match tokio::time::timeout(READ_TIMEOUT, api.get_opt(ncfg::CONFIG_MAP)).await {
            Ok(Ok(got)) => return Ok(got),
            Ok(Err(kube::Error::Api(s))) if !crate::kube_errors::away_status(s.code) => {
                return Err(format!(
                    "ConfigMap {} not read: HTTP {}",
                    ncfg::CONFIG_MAP,
                    s.code
                ));
            }
            Ok(Err(kube::Error::Api(s))) => format!("HTTP {}", s.code),
            Ok(Err(_)) => "the API server could not be reached".to_string(),
            Err(_) => format!(
                "the API server did not answer within {}s",
                READ_TIMEOUT.as_secs()
            ),
        };
        if tokio::time::Instant::now() + delay > deadline {
            return Err(format!(
                "ConfigMap {} not read for {}s: {why}",
                ncfg::CONFIG_MAP,
                READ_DEADLINE.as_secs()
            ));
        }
        debug!(retry_in = ?delay, "ConfigMap {} not read yet: {why}", ncfg::CONFIG_MAP);
        tokio::time::sleep(delay).await;
    }
}

/// A Warning Event on the plan about its notifications.
fn warn_plan(shared: &Shared, reference: &ObjectReference, message: &str) {
    warn!(plan = ?reference.name, "{message}");
    shared.events.send(
        reference,
        EventType::Warning,
        EventReason::NotificationFailed,
        message,
    );
}

fn route(shared: &Shared, job: Job, config: Result<Option<NotifyConfig>, String>) {
    let ns = &job.plan.namespace;
    let config = match config {
        Ok(Some(c)) => c,
        Ok(None) => {
            if ncfg::subscribes(&job.annotations) {
                warn_plan(
                    shared,
                    &job.reference,
                    &format!(
                        "the plan subscribes to notifications but namespace {ns} has no ConfigMap {}: nothing sent",
                        ncfg::CONFIG_MAP
                    ),
                );
            }
            return;
        }
        Err(e) => {
            warn_plan(
                shared,
                &job.reference,
                &format!("notifications not sent: {e}"),
            );
            count(
                &shared.metrics,
                ns,
                NO_RECEIVER,
                "failed",
                job.notices.len(),
            );
            return;
        }
    };
    let link = shared.settings.dashboard_url.as_deref().and_then(|t| {
        releaseplan_core::notify::payload::link(t, &job.plan)
            .map_err(|e| warn!(error = %e, "--dashboard-url does not render"))
            .ok()
    });
    for notice in job.notices {
        let (receivers, problems) = config.receivers_for(&job.annotations, notice.trigger);
        for p in problems {
            warn_plan(
                shared,
                &job.reference,
                &format!("notification subscription ignored: {p}"),
            );
        }
        if receivers.is_empty() {
            continue;
        }
        // A template refused as over the budget: the built-in text, and a
        // Warning naming the ConfigMap and key at each notice it would have
        // written (tenants read their plans' Events, not the operator's log).
        if let Some(why) = config.refused_templates.get(&notice.trigger) {
            warn_plan(
                shared,
                &job.reference,
                &format!("notification text: {why}; the built-in text was sent"),
            );
        }
        let template = config.templates.get(&notice.trigger).map(String::as_str);
        let (message, problem) = Message::new(job.plan.clone(), notice, template, link.clone());
        if let Some(p) = problem {
            warn_plan(
                shared,
                &job.reference,
                &format!("notification text: {p}; the built-in text was sent"),
            );
        }
        for r in receivers {
            let Ok(commit) = commit_to_mark(
                shared,
                &job.reference,
                &job.plan.uid,
                &job.annotations,
                r,
                &message,
            ) else {
                continue;
            };
            enqueue(
                shared,
                Delivery {
                    reference: job.reference.clone(),
                    plan_namespace: ns.clone(),
                    receiver: r.clone(),
                    message: message.clone(),
                    commit,
                },
            );
        }
    }
}

/// The commit a commit-status receiver marks with `message` (`Ok(None)`
/// for other receivers); `Err(())` when nothing is to be sent to it: the
/// transition sets no state, or a supersession whose commit is not known,
/// or no commit to mark (a Warning on the plan, counted failed).
fn commit_to_mark(
    shared: &Shared,
    reference: &ObjectReference,
    uid: &str,
    annotations: &BTreeMap<String, String>,
    r: &Receiver,
    message: &Message,
) -> Result<Option<String>, ()> {
    let Some(forge) = Forge::of(r.kind) else {
        return Ok(None);
    };
    let notice = &message.notice;
    if forge.state(notice.trigger).is_none() {
        return Err(());
    }
    let found = shared
        .commits
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .of(uid, notice, annotations);
    let why = match found {
        Ok(Some(c)) => return Ok(Some(c)),
        Ok(None) if notice.trigger == Trigger::Superseded => return Err(()),
        Ok(None) => format!(
            "notification receiver {} marks the commit the plan's annotation {} names, and the plan has none: nothing sent to it",
            r.name,
            commit_status::COMMIT_ANNOTATION
        ),
        Err(e) => format!("notification receiver {}: {e}: nothing sent to it", r.name),
    };
    warn_plan(shared, reference, &why);
    count(
        &shared.metrics,
        &message.plan.namespace,
        &r.name,
        "failed",
        1,
    );
    Err(())
}

/// Hands a delivery to its receiver's worker, starting it when needed; a
/// full queue drops it.
fn enqueue(shared: &Shared, d: Delivery) {
    let key = format!("{}/{}", d.plan_namespace, d.receiver.name);
    let (ns, name) = (d.plan_namespace.clone(), d.receiver.name.clone());
    let mut workers = shared
        .workers
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let tx = workers.entry(key).or_insert_with(|| {
        let (tx, rx) = mpsc::channel(RECEIVER_QUEUE);
        tokio::spawn(work(SharedRef::from(shared), rx));
        tx
    });
    match tx.try_send(d) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(d)) => {
            warn!(namespace = %ns, receiver = %name, id = %d.message.id, "receiver queue full: notification dropped");
            count(&shared.metrics, &ns, &name, "dropped", 1);
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            count(&shared.metrics, &ns, &name, "dropped", 1);
        }
    }
}

/// What a worker needs of [`Shared`] (the workers map stays behind).
#[derive(Clone)]
struct SharedRef {
    http: GateHttp,
    secrets: CredentialReader,
    policy: PolicyCaches,
    events: Events,
    metrics: Arc<Metrics>,
}

impl From<&Shared> for SharedRef {
    fn from(s: &Shared) -> SharedRef {
        SharedRef {
            http: s.http.clone(),
            secrets: s.secrets.clone(),
            policy: s.policy.clone(),
            events: s.events.clone(),
            metrics: Arc::clone(&s.metrics),
        }
    }
}

/// Why one try failed, and whether another may succeed.
struct Failed {
    why: String,
    retry: bool,
    /// The API server was away (a credential not readable for want of an
    /// answer, the GatePolicies not listed yet): tried again for up to
    /// [`READ_DEADLINE`], past the receiver's own tries.
    away: bool,
    /// Refused by the namespace's GatePolicy or the operator's egress rules:
    /// a setting to change, warned about at once, not after three in a row.
    refused: bool,
}

/// Whether a delivery that failed at its `attempt`-th try, `elapsed`
/// after the first, is tried again after `wait`: a retryable failure up to
/// [`TRIES`] tries; one for want of the API server (`away`) for as long as
/// the next try starts within [`READ_DEADLINE`], however many tries that is.
fn try_again(f: &Failed, attempt: u32, elapsed: Duration, wait: Duration) -> bool {
    f.retry && (attempt < TRIES || (f.away && elapsed + wait <= READ_DEADLINE))
}

/// One receiver's worker: its deliveries in order, one at a time.
async fn work(s: SharedRef, mut rx: mpsc::Receiver<Delivery>) {
    let mut failing: u32 = 0;
    while let Some(d) = rx.recv().await {
        let (ns, name) = (d.plan_namespace.as_str(), d.receiver.name.as_str());
        let mut waits = crate::ops::backoff::notification().build();
        let mut wait = waits.next().unwrap_or(RETRY_MAX);
        let mut outcome = Err(Failed {
            why: String::new(),
            retry: false,
            away: false,
            refused: false,
        });
        let started = tokio::time::Instant::now();
        for attempt in 1.. {
            outcome = deliver(&s, &d).await;
            match &outcome {
                Err(f) if try_again(f, attempt, started.elapsed(), wait) => {
                    debug!(namespace = %ns, receiver = %name, attempt, why = %f.why, "notification not delivered yet");
                    tokio::time::sleep(wait).await;
                    wait = waits.next().unwrap_or(RETRY_MAX);
                }
                _ => break,
            }
        }
        match outcome {
            Ok(()) => {
                failing = 0;
                count(&s.metrics, ns, name, "sent", 1);
                debug!(namespace = %ns, receiver = %name, id = %d.message.id, "notification sent");
            }
            Err(f) => {
                failing = failing.saturating_add(1);
                count(&s.metrics, ns, name, "failed", 1);
                warn!(namespace = %ns, receiver = %name, id = %d.message.id, why = %f.why, "notification not delivered");
                // A refusal by policy is a setting to change: said at once.
                let msg = if f.refused {
                    Some(format!("notification receiver {name}: {}", f.why))
                } else {
                    (failing == FAILING_AFTER).then(|| {
                        format!(
                            "notification receiver {name} failed {FAILING_AFTER} times in a row, last: {}",
                            f.why
                        )
                    })
                };
                if let Some(msg) = msg {
                    s.events.send(
                        &d.reference,
                        EventType::Warning,
                        EventReason::NotificationFailed,
                        &msg,
                    );
                }
            }
        }
    }
}

/// Reads a Secret key of a receiver under the gates' rules.
async fn secret(
    s: &SharedRef,
    r: &SecretKeyRef,
    plan_namespace: &str,
    policy: &NamespacePolicy,
    destination: Option<&Destination>,
) -> Result<String, Failed> {
    let bound = Binding {
        policy,
        destination,
        pinned: &[],
    };
    s.secrets
        .secret_text(r, plan_namespace, &bound)
        .await
        .map_err(|e| Failed {
            away: matches!(e, AccessError::Unreadable { away: true, .. }),
            refused: false,
            why: format!("credentials: {e}"),
            retry: true,
        })
}

/// One try: read the receiver's URL and token, check the destination, send.
async fn deliver(s: &SharedRef, d: &Delivery) -> Result<(), Failed> {
    let ns = d.plan_namespace.as_str();
    let Some(policy) = s.policy.for_namespace(ns) else {
        return Err(Failed {
            why: "GatePolicies not listed yet".into(),
            retry: true,
            away: true,
            refused: false,
        });
    };
    let url = secret(s, &d.receiver.url_from.secret_key_ref, ns, &policy, None).await?;
    // An Alertmanager receiver's URL is the Alertmanager's, a commit
    // status receiver's the forge's API: the API path follows.
    let forge = Forge::of(d.receiver.kind);
    let url = match (d.receiver.kind, forge, &d.receiver.repository, &d.commit) {
        (ReceiverKind::Alertmanager, ..) => alertmanager::alerts_url(url.trim()),
        (_, Some(forge), Some(repo), Some(commit)) => format!(
            "{}/{}",
            url.trim().trim_end_matches('/'),
            commit_status::path(forge, repo, commit)
        ),
        (_, Some(_), ..) => {
            return Err(Failed {
                why: "no commit to mark".into(),
                retry: false,
                away: false,
                refused: false,
            });
        }
        _ => url,
    };
    let url = reqwest::Url::parse(&url).map_err(|_| Failed {
        why: format!(
            "Secret {} key {} is not a URL",
            d.receiver.url_from.secret_key_ref.name, d.receiver.url_from.secret_key_ref.key
        ),
        retry: false,
        away: false,
        refused: false,
    })?;
    let destination = Destination::of(&url);
    if let Some(dest) = &destination
        && let Err(r) = policy.admit_destination(dest)
    {
        return Err(Failed {
            why: format!("not sent: {r}"),
            retry: false,
            away: false,
            refused: true,
        });
    }
    let token = match &d.receiver.token_from {
        Some(t) => Some(secret(s, &t.secret_key_ref, ns, &policy, destination.as_ref()).await?),
        None => None,
    };
    let (body, content_type) = d.message.body(d.receiver.kind, d.receiver.format);
    let mut req = s
        .http
        .client()
        .post(url)
        .timeout(SEND_TIMEOUT)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .header("Idempotency-Key", d.message.id.as_str())
        .body(body.to_string());
    if forge == Some(Forge::GitHub) {
        // What GitHub's REST API documents for every request.
        req = req
            .header(reqwest::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", GITHUB_API_VERSION);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let req = req.build().map_err(|_| Failed {
        why: "the request cannot be built".into(),
        retry: false,
        away: false,
        refused: false,
    })?;
    match s.http.send(req).await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => {
            let code = resp.status();
            Err(Failed {
                why: format!("the receiver answered HTTP {}", code.as_u16()),
                retry: code.as_u16() == 429 || code.is_server_error(),
                away: false,
                refused: false,
            })
        }
        Err(e) => Err(describe(&e)),
    }
}

/// A failed send by kind only (a reqwest error's text holds the URL, which
/// is a credential for Slack and Teams); retried only when nothing was sent.
fn describe(e: &CallError) -> Failed {
    let t = match e {
        // The refusal names the host, not the URL's path.
        CallError::Refused(r) => {
            return Failed {
                why: format!("not sent: {r}"),
                retry: false,
                away: false,
                refused: true,
            };
        }
        CallError::Transport(_) if e.is_refusal() => {
            return Failed {
                why: "not sent: the receiver's address is refused by the operator's egress rules"
                    .into(),
                retry: false,
                away: false,
                refused: true,
            };
        }
        CallError::Transport(t) => t,
    };
    if t.is_timeout() {
        Failed {
            why: format!("no answer within {}s", SEND_TIMEOUT.as_secs()),
            retry: false,
            away: false,
            refused: false,
        }
    } else if t.is_connect() {
        Failed {
            why: "could not connect".into(),
            retry: true,
            away: false,
            refused: false,
        }
    } else {
        Failed {
            why: "the request failed (connection lost)".into(),
            retry: false,
            away: false,
            refused: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// The ConfigMap is asked for again while the API server is away, so
    /// a blip does not lose a transition's notices (its mark is already
    /// written); a refusal is an answer.
    #[tokio::test(start_paused = true)]
    async fn the_config_map_is_asked_for_again_while_the_api_server_is_away() {
        use crate::canned_api::{answering, status};
        let config_map = serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": ncfg::CONFIG_MAP, "namespace": "shop"}});
        let answers = |answers: Vec<(u16, serde_json::Value)>| {
            let (client, asked) = answering(answers);
            let api: Api<ConfigMap> = Api::namespaced(client, "shop");
            (api, asked)
        };
        let (api, asked) = answers(vec![
            status(503),
            status(500),
            status(429),
            (200, config_map),
        ]);
        let got = get_config_map(&api).await.unwrap();
        assert!(got.is_some());
        assert_eq!(*asked.lock().unwrap(), 4);

        let (api, asked) = answers(vec![status(403)]);
        let err = get_config_map(&api).await.unwrap_err();
        assert!(err.contains("HTTP 403"), "{err}");
        assert_eq!(*asked.lock().unwrap(), 1);

        let (api, _) = answers(vec![status(503)]);
        let started = tokio::time::Instant::now();
        let err = get_config_map(&api).await.unwrap_err();
        assert!(err.contains("not read for 60s: HTTP 503"), "{err}");
        assert!(
            started.elapsed() <= READ_DEADLINE,
            "{:?}",
            started.elapsed()
        );
    }

    /// A receiver's Secret unread for want of an answer (a 5xx, a 429) is
    /// `away`: the worker goes on trying it for up to [`READ_DEADLINE`],
    /// past its four tries; a refusal (403) is not.
    #[tokio::test]
    async fn a_receivers_secret_unread_while_the_api_server_is_away_is_tried_longer() {
        use crate::canned_api::{answering, status};
        let client = |code: u16| answering(vec![status(code)]).0;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let metrics = Arc::new(Metrics::new());
        let reporter = kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        };
        let (events, _publisher) = Events::start(client(500), reporter, Arc::clone(&metrics));
        let shared = |code: u16| SharedRef {
            http: GateHttp::new(crate::gates::outbound::OutboundPolicy::default()).unwrap(),
            secrets: CredentialReader::new(client(code), "ops".into()),
            policy: PolicyCaches::none(crate::gates::policy::Mode::Optional),
            events: events.clone(),
            metrics: Arc::clone(&metrics),
        };
        let r: SecretKeyRef =
            serde_json::from_value(serde_json::json!({"name": "hooks", "key": "url"})).unwrap();
        let open = NamespacePolicy::open("shop");
        for (code, away) in [(503, true), (500, true), (429, true), (403, false)] {
            let Err(f) = secret(&shared(code), &r, "shop", &open, None).await else {
                panic!("{code}: read")
            };
            assert!(f.retry, "{code}");
            assert_eq!(f.away, away, "{code}: {}", f.why);
        }
    }

    /// A failure for want of the API server is tried past the receiver's
    /// four tries, until the next try would start after [`READ_DEADLINE`];
    /// any other retryable failure gets four tries, and a final one none.
    #[test]
    fn a_delivery_is_tried_longer_only_while_the_api_server_is_away() {
        let failed = |retry, away| Failed {
            why: "x".into(),
            retry,
            away,
            refused: false,
        };
        let s = Duration::from_secs;
        let receiver_down = failed(true, false);
        for attempt in 1..TRIES {
            assert!(try_again(&receiver_down, attempt, s(0), s(1)), "{attempt}");
        }
        assert!(!try_again(&receiver_down, TRIES, s(7), s(5)));
        assert!(!try_again(&failed(false, false), 1, s(0), s(1)), "final");
        assert!(!try_again(&failed(false, true), 1, s(0), s(1)), "final");

        let api_away = failed(true, true);
        assert!(try_again(&api_away, TRIES, s(7), s(5)));
        assert!(
            try_again(&api_away, 12, s(55), s(5)),
            "starts at the deadline"
        );
        assert!(
            !try_again(&api_away, 12, s(56), s(5)),
            "would start past it"
        );

        // The waits of a delivery while the API server is away: doubling
        // from a second, each under five (the jitter), every try starting
        // within the deadline: the shortest pauses (1 + 2 + 2.5 * 22 s) make
        // 25 tries, the longest (2 + 4 + 5 * 10 s) 13.
        for _ in 0..50 {
            let mut waits = crate::ops::backoff::notification().build();
            let (mut wait, mut elapsed, mut tries) = (waits.next().unwrap(), Duration::ZERO, 1);
            while try_again(&api_away, tries, elapsed, wait) {
                elapsed += wait;
                wait = waits.next().unwrap();
                tries += 1;
            }
            assert!(elapsed <= READ_DEADLINE, "{elapsed:?}");
            assert!(elapsed > READ_DEADLINE - RETRY_MAX, "{elapsed:?}");
            assert!((12..=26).contains(&tries), "{tries} tries in {elapsed:?}");
        }
    }

    fn notice(trigger: Trigger, revision: &str) -> Notice {
        Notice {
            trigger,
            rollout: 1,
            phase: crate::api::Phase::RollingOut,
            revision: Some(revision.into()),
            stable_revision: None,
            step: 1,
            steps: 1,
            weight: 0,
            gate: None,
            reason: None,
            message: String::new(),
            started_at: None,
            at: chrono::Utc::now(),
            duration_seconds: None,
            analysis: None,
        }
    }

    fn counted(metrics: &Metrics, receiver: &str, result: &str) -> u64 {
        metrics
            .notifications
            .get_or_create(&NotificationLabel {
                namespace: "shop".into(),
                receiver: receiver.into(),
                result: result.into(),
            })
            .get()
    }

    /// What the dispatcher and the workers need, on a canned API server.
    fn shared() -> (Shared, Arc<Metrics>) {
        use crate::canned_api::{answering, status};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = answering(vec![status(500)]).0;
        let metrics = Arc::new(Metrics::new());
        let reporter = kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        };
        let (events, _publisher) = Events::start(client.clone(), reporter, Arc::clone(&metrics));
        let shared = Shared {
            client: client.clone(),
            http: GateHttp::new(crate::gates::outbound::OutboundPolicy::default()).unwrap(),
            secrets: CredentialReader::new(client, "ops".into()),
            policy: PolicyCaches::none(crate::gates::policy::Mode::Optional),
            events,
            metrics: Arc::clone(&metrics),
            settings: NotifySettings::default(),
            workers: Mutex::new(HashMap::new()),
            commits: Mutex::new(Commits::default()),
        };
        (shared, metrics)
    }

    /// A receiver whose worker is busy: its queue holds 64 messages, the
    /// rest are dropped and counted `dropped` under its name, nothing waits.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_receiver_queue_drops_what_does_not_fit_and_counts_it() {
        let (shared, metrics) = shared();
        let receiver: Receiver = serde_json::from_value(serde_json::json!({"name": "hook",
            "type": "webhook", "urlFrom": {"secretKeyRef": {"name": "hooks", "key": "url"}}}))
        .unwrap();
        let plan = PlanRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u".into(),
        };
        // No await in between: the worker takes nothing meanwhile.
        for i in 0..RECEIVER_QUEUE + 3 {
            let (message, _) = Message::new(
                plan.clone(),
                notice(Trigger::StepAdvanced, &format!("r{i}")),
                None,
                None,
            );
            enqueue(
                &shared,
                Delivery {
                    reference: ObjectReference::default(),
                    plan_namespace: "shop".into(),
                    receiver: receiver.clone(),
                    message,
                    commit: None,
                },
            );
        }
        assert_eq!(counted(&metrics, "hook", "dropped"), 3);
    }

    /// The dispatcher's queue full (1024 transitions waiting): a reconcile
    /// queueing more does not wait, and the notices are counted `dropped`
    /// before any receiver is known.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_dispatch_queue_drops_without_waiting_and_counts_it() {
        let (shared, metrics) = shared();
        let notifier = Notifier::start(
            shared.client.clone(),
            shared.http.clone(),
            shared.secrets.clone(),
            shared.policy.clone(),
            shared.events.clone(),
            Arc::clone(&metrics),
            NotifySettings::default(),
        );
        let plan: ReleasePlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
            "spec": {"components": [], "strategy": {"steps": []}}}))
        .unwrap();
        let two = [
            notice(Trigger::RolloutStarted, "r"),
            notice(Trigger::StepAdvanced, "r"),
        ];
        for _ in 0..DISPATCH_QUEUE + 2 {
            notifier.planned(&plan, &two);
        }
        assert_eq!(counted(&metrics, NO_RECEIVER, "dropped"), 4);
    }

    /// A rollout's transitions mark the commit it started with, also once
    /// the annotation names a newer one; a supersession of a rollout whose
    /// start was not seen marks nothing rather than the newer commit.
    #[test]
    fn a_revision_keeps_the_commit_it_started_with() {
        use releaseplan_core::notify::Trigger as T;
        let annotated = |c: &str| {
            BTreeMap::from([(commit_status::COMMIT_ANNOTATION.to_string(), c.to_string())])
        };
        let mut commits = Commits::default();
        let (a, b) = ("aaaaaaa1", "bbbbbbb2");
        fn got(c: &mut Commits, t: T, r: &str, ann: &BTreeMap<String, String>) -> Option<String> {
            c.of("uid", &notice(t, r), ann).unwrap()
        }
        assert_eq!(
            got(&mut commits, T::RolloutStarted, "r1", &annotated(a)).as_deref(),
            Some(a)
        );
        assert_eq!(
            got(&mut commits, T::StepAdvanced, "r1", &annotated(b)).as_deref(),
            Some(a)
        );
        assert_eq!(
            got(&mut commits, T::Superseded, "r1", &annotated(b)).as_deref(),
            Some(a)
        );
        assert_eq!(
            got(&mut commits, T::RolloutStarted, "r2", &annotated(b)).as_deref(),
            Some(b)
        );
        assert_eq!(
            got(&mut commits, T::RolledBack, "r2", &annotated(b)).as_deref(),
            Some(b)
        );
        // Not seen start (a restart): the annotation, but never for a supersession.
        assert_eq!(
            got(&mut commits, T::Promoted, "r3", &annotated(b)).as_deref(),
            Some(b)
        );
        assert_eq!(got(&mut commits, T::Superseded, "r9", &annotated(b)), None);
        assert_eq!(got(&mut commits, T::Promoted, "r4", &BTreeMap::new()), None);
        assert!(
            commits
                .of("uid", &notice(T::RolloutStarted, "r5"), &annotated("main"))
                .is_err()
        );
        // Bounded per plan.
        for i in 0..10 {
            got(
                &mut commits,
                T::RolloutStarted,
                &format!("x{i}"),
                &annotated(a),
            );
        }
        assert_eq!(commits.0["uid"].len(), COMMITS_PER_PLAN);
    }

    #[tokio::test]
    async fn jobs_are_routed_in_the_order_they_came_whichever_read_answers_first() {
        // The first job's read answers last.
        let delays = [300, 10, 100, 0, 50];
        let read = |job: &usize| {
            let delay = Duration::from_millis(delays[*job]);
            async move {
                tokio::time::sleep(delay).await;
                delay
            }
        };
        let routed: Vec<(usize, Duration)> = in_order(futures::stream::iter(0..5), read, 4)
            .collect()
            .await;
        let order: Vec<usize> = routed.iter().map(|(j, _)| *j).collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        assert!(
            routed
                .iter()
                .all(|(j, d)| *d == Duration::from_millis(delays[*j]))
        );
    }
}
