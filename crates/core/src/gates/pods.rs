//! Built-in pod checks: containers stuck in a failure state, and containers
//! that restart too often.

use crate::api::cached::{CachedContainerStatus, CachedPod};

/// Waiting reasons that mean a container will not start without a change.
pub const FAILURE_REASONS: [&str; 5] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// `PodSignal.reason` of a container restarted more than `maxRestarts` times.
pub const TOO_MANY_RESTARTS: &str = "TooManyRestarts";

/// A pod problem that fails the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSignal {
    /// Pod name.
    pub pod: String,
    /// A waiting reason from [`FAILURE_REASONS`], or [`TOO_MANY_RESTARTS`].
    pub reason: String,
    /// What happened, naming the container.
    pub message: String,
}

/// Finds failing pods. With `detect_failures`, a container or init container
/// waiting with a reason from [`FAILURE_REASONS`] gives a signal; a container
/// restarted more than `max_restarts` times always does (reason
/// [`TOO_MANY_RESTARTS`]). Signals come in pod order, then container order
/// (init containers first); one container can give both kinds.
pub fn detect<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
    max_restarts: i32,
    detect_failures: bool,
) -> Vec<PodSignal> {
    let mut signals = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
        let Some(status) = pod.status.as_ref() else {
            continue;
        };
        let init = status.init_container_statuses.iter();
        let main = status.container_statuses.iter();
        for (kind, c) in init
            .map(|c| ("init container", c))
            .chain(main.map(|c| ("container", c)))
        {
            check_container(name, kind, c, max_restarts, detect_failures, &mut signals);
        }
    }
    signals
}

/// What of a pod [`detect`] can ever give a signal for, whatever the plan's
/// settings: its containers (init containers first, flagged `true`) that
/// restarted or wait in a reason of [`FAILURE_REASONS`]. Empty for a pod
/// that starts and runs well: such a pod's changes (appearing, becoming
/// ready, going) never change a decision, so they need not wake its plan.
pub fn failure_view(pod: &CachedPod) -> Vec<(bool, &CachedContainerStatus)> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let init = status.init_container_statuses.iter().map(|c| (true, c));
    let main = status.container_statuses.iter().map(|c| (false, c));
    init.chain(main)
        .filter(|(_, c)| {
            let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
            c.restart_count > 0
                || waiting
                    .and_then(|w| w.reason.as_deref())
                    .is_some_and(|r| FAILURE_REASONS.contains(&r))
        })
        .collect()
}

fn check_container(
    pod: &str,
    kind: &str,
    c: &CachedContainerStatus,
    max_restarts: i32,
    detect_failures: bool,
    signals: &mut Vec<PodSignal>,
) {
    if detect_failures {
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
        if let Some(reason) = waiting
            .and_then(|w| w.reason.as_deref())
            .filter(|r| FAILURE_REASONS.contains(r))
        {
            let detail = waiting
                .and_then(|w| w.message.as_deref())
                .filter(|m| !m.is_empty());
            let message = match detail {
                Some(m) => format!("{kind} {} is waiting in {reason}: {m}", c.name),
                None => format!("{kind} {} is waiting in {reason}", c.name),
            };
            signals.push(PodSignal {
                pod: pod.to_string(),
                reason: reason.to_string(),
                message,
            });
        }
    }
    if c.restart_count > max_restarts.max(0) {
        signals.push(PodSignal {
            pod: pod.to_string(),
            reason: TOO_MANY_RESTARTS.to_string(),
            message: format!(
                "{kind} {} restarted {} times, more than the {} allowed",
                c.name,
                c.restart_count,
                max_restarts.max(0)
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn waiting(name: &str, reason: &str, message: Option<&str>, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: message.map(Into::into),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running(name: &str, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            ready: true,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod as the cache holds it: decoded from the API's full Pod.
    fn pod(name: &str, init: Vec<ContainerStatus>, main: Vec<ContainerStatus>) -> CachedPod {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                init_container_statuses: (!init.is_empty()).then_some(init),
                container_statuses: (!main.is_empty()).then_some(main),
                ..Default::default()
            }),
            ..Default::default()
        };
        serde_json::from_value(serde_json::to_value(pod).unwrap()).unwrap()
    }

    #[test]
    fn the_failure_view_holds_what_can_give_a_signal() {
        let starting = pod(
            "c",
            vec![],
            vec![waiting("app", "ContainerCreating", None, 0)],
        );
        let healthy = pod("a", vec![running("init", 0)], vec![running("app", 0)]);
        for quiet in [&starting, &healthy, &CachedPod::default()] {
            assert!(failure_view(quiet).is_empty(), "{quiet:?}");
            // And no settings find anything in it.
            assert_eq!(detect([quiet], 0, true), []);
        }
        let restarted = pod("b", vec![running("init", 1)], vec![running("app", 0)]);
        let view = failure_view(&restarted);
        assert_eq!(view.len(), 1);
        assert!(view[0].0, "an init container");
        let crashing = pod(
            "d",
            vec![],
            vec![waiting("app", "CrashLoopBackOff", None, 0)],
        );
        assert_eq!(failure_view(&crashing).len(), 1);
        // Every pod that gives a signal under some settings has a view.
        for p in [&restarted, &crashing] {
            assert!(!detect([p], 0, true).is_empty());
        }
    }

    #[test]
    fn healthy_pods_give_nothing() {
        let pods = [
            pod("a", vec![], vec![running("app", 0)]),
            pod("b", vec![running("init", 1)], vec![running("app", 3)]),
            pod(
                "c",
                vec![],
                vec![waiting("app", "ContainerCreating", None, 0)],
            ),
            CachedPod::default(),
        ];
        assert_eq!(detect(&pods, 3, true), []);
    }

    #[test]
    fn every_failure_reason_is_detected() {
        for reason in FAILURE_REASONS {
            let pods = [pod(
                "web-1",
                vec![],
                vec![waiting("app", reason, Some("details"), 0)],
            )];
            assert_eq!(
                detect(&pods, 3, true),
                [PodSignal {
                    pod: "web-1".into(),
                    reason: reason.into(),
                    message: format!("container app is waiting in {reason}: details"),
                }]
            );
        }
    }

    #[test]
    fn init_containers_are_checked() {
        let pods = [pod(
            "web-1",
            vec![waiting("migrate", "ErrImagePull", None, 0)],
            vec![waiting("app", "PodInitializing", None, 0)],
        )];
        let s = detect(&pods, 3, true);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].reason, "ErrImagePull");
        assert_eq!(
            s[0].message,
            "init container migrate is waiting in ErrImagePull"
        );
    }

    #[test]
    fn failure_detection_can_be_turned_off() {
        let pods = [pod(
            "web-1",
            vec![],
            vec![waiting("app", "CrashLoopBackOff", None, 2)],
        )];
        assert_eq!(detect(&pods, 3, false), []);
        assert_eq!(detect(&pods, 3, true).len(), 1);
    }

    #[test]
    fn restarts_over_the_limit_always_signal() {
        let pods = [pod(
            "web-1",
            vec![],
            vec![running("app", 3), running("sidecar", 4)],
        )];
        for detect_failures in [true, false] {
            assert_eq!(
                detect(&pods, 3, detect_failures),
                [PodSignal {
                    pod: "web-1".into(),
                    reason: TOO_MANY_RESTARTS.into(),
                    message: "container sidecar restarted 4 times, more than the 3 allowed".into(),
                }]
            );
        }
        assert_eq!(detect(&pods, 0, false).len(), 2);
        assert_eq!(detect(&pods, -1, false).len(), 2);
    }

    #[test]
    fn crash_loop_with_many_restarts_gives_both_signals_in_order() {
        let pods = [
            pod("web-1", vec![], vec![running("app", 0)]),
            pod(
                "web-2",
                vec![],
                vec![waiting("app", "CrashLoopBackOff", Some("back-off 5m0s"), 6)],
            ),
        ];
        let s = detect(&pods, 5, true);
        let reasons: Vec<_> = s
            .iter()
            .map(|s| (s.pod.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [("web-2", "CrashLoopBackOff"), ("web-2", TOO_MANY_RESTARTS)]
        );
    }
}
