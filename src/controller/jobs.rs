//! Acts on the Job gates' intents: creates the Jobs the core asked for and
//! deletes those it no longer wants. Decides nothing (see `gates::job`).

use super::context::Context;
use super::error::{Error, is_not_found, namespace_terminating};
use crate::api::ReleasePlan;
use crate::gates::job::{self, JobIntents, JobObs, JobState};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tracing::{info, warn};

/// Creates and deletes the decision's Jobs. A Job that already exists is
/// adopted (its name is the step's, so it is the one a restarted operator or
/// an earlier reconcile created); one already gone is fine. Every write is
/// tried; the first failure is returned (the reconcile is retried with
/// backoff, which also reports it in a Warning Event), and every refused
/// create is remembered for the plan's next observation (`refused`), so the
/// core can judge it.
pub async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    intents: &JobIntents,
    refused: &mut Vec<JobObs>,
) -> Result<(), Error> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let mut failed = None;
    for intent in &intents.create {
        let desired = job::build(plan, intent);
        match api.create(&PostParams::default(), &desired).await {
            Ok(_) => {
                ctx.metrics.write("job");
                info!(job = %intent.name, gate = %intent.gate.name, step = intent.step, "Job gate: Job created");
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                info!(job = %intent.name, "Job gate: the step's Job exists already: adopted");
            }
            Err(e) if namespace_terminating(&e) => return Ok(()),
            Err(e) => {
                warn!(job = %intent.name, error = %e, "Job gate: creating the Job failed");
                let (code, message) = match &e {
                    kube::Error::Api(s) => (s.code, s.message.clone()),
                    other => (0, other.to_string()),
                };
                refused.push(JobObs {
                    name: intent.name.clone(),
                    rollout: intent.rollout,
                    created: None,
                    state: JobState::Refused { code, message },
                });
                failed.get_or_insert(Error::Job {
                    name: intent.name.clone(),
                    source: e,
                });
            }
        }
    }
    for name in &intents.delete {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.metrics.write("job");
                info!(job = %name, "Job gate: Job of an earlier step or rollout deleted");
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                warn!(job = %name, error = %e, "Job gate: deleting the Job failed");
                failed.get_or_insert(Error::Job {
                    name: name.clone(),
                    source: e,
                });
            }
        }
    }
    failed.map_or(Ok(()), Err)
}
