//! Prints the operator's CRDs as YAML: the ReleasePlan CRD (`make crds`
//! writes it to crds/releaseplan.yaml), or with the argument `templates` the
//! GateTemplate and ClusterGateTemplate CRDs (crds/gatetemplates.yaml).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::args().nth(1).as_deref() {
        None => print!("{}", serde_yaml::to_string(&releaseplan::api::crd())?),
        Some("templates") => print!("{}", releaseplan::api::template::crds_yaml()?),
        Some(other) => {
            return Err(format!("unknown argument {other:?}: expected none or `templates`").into());
        }
    }
    Ok(())
}
