//! What the administrator's GatePolicy allows the plan, judged before a
//! release starts: a gate the policy would refuse to call, or a route it
//! would refuse to write, makes the release pointless to start (it could
//! never be judged, or never get its traffic). A refusal is configuration,
//! not a health verdict: the release does not start (no pod is created), a
//! release under way holds where it is, and nothing is ever rolled back for
//! it. The plan is `Stalled` with a message that names the gate or route,
//! the destination, and the GatePolicy field (and the Helm chart's value)
//! that would allow it; a change of the policy wakes the plan, which then
//! starts by itself.

use super::Target;
use crate::api::Component;
use crate::gates::policy::NamespacePolicy;
use crate::gates::text::redact;

/// A gate or route of the plan that the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyBlock {
    /// What is refused: `gate smoke (webhook at http://…)`, `route of component web`.
    pub what: String,
    /// The policy's refusal, naming the policy and rule.
    pub refusal: String,
    /// What would allow it: the GatePolicy field and the chart's value.
    pub remedy: String,
}

impl PolicyBlock {
    /// The one line conditions, messages and Events show.
    pub fn message(&self) -> String {
        format!(
            "{} is refused by policy: {}; {}",
            self.what, self.refusal, self.remedy
        )
    }
}

/// The gates and routes of `target` (the plan's `components` as written)
/// that `policy` refuses, gates first in spec order. Dry-run gates are left
/// out: they never hold a rollout.
pub fn blocks(
    target: &Target,
    components: &[Component],
    policy: &NamespacePolicy,
) -> Vec<PolicyBlock> {
    let gates = target
        .gates
        .iter()
        .filter(|g| !target.dry_run(g.name()))
        .filter_map(|g| {
            let refusal = policy.admit_gate(g).err()?;
            let url = g.url();
            Some(PolicyBlock {
                what: format!("gate {} ({} at {})", g.name(), g.kind(), redact(url)),
                refusal: refusal.to_string(),
                remedy: refusal.remedy(),
            })
        });
    let routes = components.iter().filter_map(|c| {
        let (kind, refusal) = policy.admit_traffic(c.traffic.as_ref()?).err()?;
        Some(PolicyBlock {
            what: format!("the {kind} of component {}", c.name),
            refusal: refusal.to_string(),
            remedy: refusal.remedy(),
        })
    });
    gates.chain(routes).collect()
}
