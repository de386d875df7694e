//! Prints the ReleasePlan CRD as YAML; `make crds` writes it to crds/releaseplan.yaml.

use kube::CustomResourceExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crd = releaseplan::api::ReleasePlan::crd();
    print!("{}", serde_yaml::to_string(&crd)?);
    Ok(())
}
