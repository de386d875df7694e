//! The operator's allocator settings reach the binary: jemalloc's options
//! are compiled in from `.cargo/config.toml` when tikv-jemalloc-sys builds
//! it, so a build that missed them (a cargo run outside the workspace, a
//! renamed variable) would silently hold more memory. No cluster needed.

/// The value `.cargo/config.toml` gives the build.
fn configured() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.cargo/config.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("JEMALLOC_SYS_WITH_MALLOC_CONF = "))
        .expect("JEMALLOC_SYS_WITH_MALLOC_CONF in .cargo/config.toml");
    line.trim_matches('"').to_string()
}

#[test]
fn the_operator_is_built_with_the_configured_jemalloc_options() {
    let options = configured();
    assert!(options.contains("narenas:1"), "{options}");
    let binary = std::fs::read(env!("CARGO_BIN_EXE_releaseplan")).unwrap();
    // The background thread (the crate's feature) comes first, then ours.
    let expected = format!("background_thread:true,{options}");
    assert!(
        binary
            .windows(expected.len())
            .any(|w| w == expected.as_bytes()),
        "the operator binary does not hold jemalloc's options {expected:?}"
    );
}
