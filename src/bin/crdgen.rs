//! Prints the ReleasePlan CRD as YAML; `make crds` writes it to crds/releaseplan.yaml.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crd = releaseplan::api::crd();
    print!("{}", serde_yaml::to_string(&crd)?);
    Ok(())
}
