//! Logging setup: text for people, JSON for log pipelines.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` overrides the default level.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,kube=warn,kube_runtime=warn,kube_client=warn,kube_lease_manager=warn")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: ignore the error.
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
