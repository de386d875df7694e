//! What docs/decisions.md says about this crate, held to the crate itself.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

use std::collections::BTreeSet;

/// The repository's root: this crate sits in `crates/core`.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The names of the `[dependencies]` table of a Cargo.toml: the key of each
/// `name = ...` line up to the next table (comments and blank lines skipped).
fn dependencies(manifest: &str) -> BTreeSet<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_string()))
        .collect()
}

/// The names in backquotes of the one sentence that starts with `marker`, up
/// to its full stop (crate names hold no `.`), across line breaks.
fn named_after(doc: &str, marker: &str) -> BTreeSet<String> {
    let mut found = doc.match_indices(marker);
    let (at, _) = found
        .next()
        .unwrap_or_else(|| panic!("docs/decisions.md: no sentence starting {marker:?}"));
    assert!(
        found.next().is_none(),
        "docs/decisions.md: {marker:?} more than once"
    );
    let rest = &doc[at + marker.len()..];
    let sentence = &rest[..rest.find('.').expect("the sentence ends with a full stop")];
    sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_core_depends_on_what_decisions_md_says() {
    let manifest = dependencies(&read("crates/core/Cargo.toml"));
    assert!(
        manifest.contains("kube") && manifest.contains("serde"),
        "crates/core/Cargo.toml: [dependencies] not read: {manifest:?}"
    );
    let documented = named_after(&read("docs/decisions.md"), "The core depends on:");
    let missing: Vec<_> = manifest.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&manifest).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/decisions.md (\"The core depends on: ...\", in \"The pure core is a crate\") \
         differs from [dependencies] of crates/core/Cargo.toml: not named in the doc: \
         {missing:?}; named but not a dependency: {extra:?}"
    );
}

#[test]
fn the_dependency_reader_reads_only_the_dependencies_table() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\n# a comment\na = \"1\"\nb-c = { version = \"2\" }\n\n[dev-dependencies]\nd = \"3\"\n";
    let names: Vec<_> = dependencies(manifest).into_iter().collect();
    assert_eq!(names, ["a", "b-c"]);
    let doc = "x\nThe core depends on: `a`,\n`b-c`. Not `d`.\n";
    let named: Vec<_> = named_after(doc, "The core depends on:")
        .into_iter()
        .collect();
    assert_eq!(named, ["a", "b-c"]);
}
