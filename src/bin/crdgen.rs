//! Prints the operator's CRDs as YAML: the ReleasePlan CRD (`make crds`
//! writes it to crds/releaseplan.yaml), or with the argument `templates` the
//! GateTemplate and ClusterGateTemplate CRDs (crds/gatetemplates.yaml), or with
//! `scales` the ComponentScale CRD (crds/componentscales.yaml), with
//! `policies` the GatePolicy CRD (crds/gatepolicies.yaml), or with `freezes`
//! the ReleaseFreeze CRD (crds/releasefreezes.yaml).

use releaseplan::api::template;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::args().nth(1).as_deref() {
        None => print!("{}", yaml_serde::to_string(&releaseplan::api::crd())?),
        // Both template CRDs as one YAML stream.
        Some("templates") => print!(
            "{}---\n{}",
            yaml_serde::to_string(&template::gate_template_crd())?,
            yaml_serde::to_string(&template::cluster_gate_template_crd())?
        ),
        Some("scales") => print!(
            "{}",
            yaml_serde::to_string(&releaseplan::api::scale::component_scale_crd())?
        ),
        Some("policies") => print!(
            "{}",
            yaml_serde::to_string(&releaseplan::api::policy::gate_policy_crd())?
        ),
        Some("freezes") => print!(
            "{}",
            yaml_serde::to_string(&releaseplan::api::window::release_freeze_crd())?
        ),
        Some(other) => {
            return Err(format!(
                "unknown argument {other:?}: expected none, `templates`, `scales`, `policies` or `freezes`"
            )
            .into());
        }
    }
    Ok(())
}
