//! Build script: the git commit the binaries were built from, for
//! `--version` and `releaseplan_build_info` (src/build_info.rs).
//!
//! Sets `RELEASEPLAN_BUILD_COMMIT` to `git rev-parse --short=12 HEAD`; outside
//! a git checkout (a source tarball, a Docker context without `.git`) to the
//! `RELEASEPLAN_COMMIT` environment variable, else to `unknown`. It never
//! fails the build.
//!
//! It reruns only when HEAD moves (the HEAD file, the branch's ref file,
//! packed-refs) or `RELEASEPLAN_COMMIT` changes, so an incremental build does
//! not run git or relink for nothing.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RELEASEPLAN_COMMIT");
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_hexdigit()));
    let commit = if let Some(commit) = commit {
        watch_head();
        commit
    } else {
        std::env::var("RELEASEPLAN_COMMIT")
            .ok()
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    };
    println!("cargo:rustc-env=RELEASEPLAN_BUILD_COMMIT={commit}");
}

/// Watches the files whose change moves HEAD: the HEAD file of this
/// worktree, the ref it points to, and packed-refs (a ref packed by `git gc`
/// lives there). Only existing files: cargo reruns every time for a missing one.
fn watch_head() {
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) else {
        return;
    };
    let common = git(&["rev-parse", "--git-common-dir"]).map_or_else(
        || git_dir.clone(),
        |c| {
            let c = PathBuf::from(c);
            if c.is_absolute() { c } else { root().join(c) }
        },
    );
    let mut files = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(&branch));
        files.push(git_dir.join(&branch));
    }
    for file in files.iter().filter(|f| f.is_file()) {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

/// The package root, where git runs.
fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// Trimmed standard output of `git ARGS` in the package root, if git ran and succeeded.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}
