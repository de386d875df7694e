//! What this binary is: its version and the git commit it was built from, as
//! `--version` prints them (`0.2.0 (1a2b3c4d5e6f)`) and `/metrics` exports
//! them (`releaseplan_build_info`). The commit comes from build.rs:
//! `git rev-parse --short=12 HEAD`, else the `RELEASEPLAN_COMMIT` environment
//! variable at build time, else `unknown`.

/// The package version (Cargo.toml), the same for the operator and the plugin.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binary was built from (12 hex digits), or what
/// `RELEASEPLAN_COMMIT` said at build time, or `unknown`.
pub const COMMIT: &str = env!("RELEASEPLAN_BUILD_COMMIT");

/// `--version`'s text: `<version> (<commit>)`. A constant, as clap takes it.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RELEASEPLAN_BUILD_COMMIT"),
    ")"
);

/// `<version> (<commit>)`, the shape of [`VERSION_LINE`] for any pair.
pub fn version_line(version: &str, commit: &str) -> String {
    format!("{version} ({commit})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_is_version_then_commit_in_parentheses() {
        assert_eq!(
            version_line("0.2.0", "1a2b3c4d5e6f"),
            "0.2.0 (1a2b3c4d5e6f)"
        );
        assert_eq!(version_line("0.2.0", "unknown"), "0.2.0 (unknown)");
        assert_eq!(VERSION_LINE, version_line(VERSION, COMMIT));
    }

    #[test]
    fn the_commit_is_twelve_hex_digits_or_says_where_it_came_from() {
        // From git: 12 lowercase hex digits. Otherwise whatever
        // RELEASEPLAN_COMMIT said, or `unknown`: never empty.
        assert!(!COMMIT.is_empty());
        let from_git = COMMIT.len() == 12 && COMMIT.bytes().all(|b| b.is_ascii_hexdigit());
        let fallback = std::env::var("RELEASEPLAN_COMMIT").ok();
        assert!(
            from_git || COMMIT == "unknown" || fallback.as_deref() == Some(COMMIT),
            "unexpected commit {COMMIT:?}"
        );
    }

    /// A `major.minor.patch` version, as numbers.
    fn semver(text: &str) -> Option<(u64, u64, u64)> {
        let mut parts = text.split('.').map(|p| {
            (!p.is_empty() && (p == "0" || !p.starts_with('0')))
                .then(|| p.parse::<u64>().ok())
                .flatten()
        });
        let v = (parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }

    fn read(path: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The value of a top-level `key: value` line of a YAML file, unquoted.
    fn yaml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(|v| v.trim().trim_matches('"'))
    }

    #[test]
    fn the_version_is_the_same_everywhere_it_is_written() {
        let core = read("crates/core/Cargo.toml");
        let core_version = core
            .lines()
            .find_map(|l| l.strip_prefix("version = "))
            .map(|v| v.trim_matches('"'));
        assert_eq!(core_version, Some(VERSION), "crates/core/Cargo.toml");
        let chart = read("charts/releaseplan/Chart.yaml");
        assert_eq!(
            yaml_value(&chart, "version"),
            Some(VERSION),
            "Chart.yaml version"
        );
        assert_eq!(
            yaml_value(&chart, "appVersion"),
            Some(VERSION),
            "Chart.yaml appVersion"
        );
        let changelog = read("CHANGELOG.md");
        assert!(
            changelog.contains(&format!("\n## [{VERSION}]")),
            "CHANGELOG.md has no section ## [{VERSION}]"
        );
        // The README's install commands name the artifacts of this version.
        let readme = read("README.md");
        let install = readme
            .split("## Installing it in a cluster")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README.md: ## Installing it in a cluster");
        let named: Vec<&str> = install
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .filter(|w| semver(w).is_some())
            .collect();
        assert!(
            !named.is_empty(),
            "README.md's install section names no version"
        );
        for v in named {
            assert_eq!(v, VERSION, "README.md's install section names version {v}");
        }
    }

    /// Runs git in the repository; `None` when git cannot run there.
    fn git(args: &[&str]) -> Option<std::process::Output> {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
    }

    #[test]
    fn releases_txt_lists_each_release_once_with_a_commit_of_this_history() {
        let text = read("releases.txt");
        let mut releases = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(' ').collect();
            let [version, commit] = fields[..] else {
                panic!(
                    "releases.txt:{}: want `<version> <commit>`, got {line:?}",
                    n + 1
                );
            };
            let parsed = semver(version)
                .unwrap_or_else(|| panic!("releases.txt:{}: {version:?} is not x.y.z", n + 1));
            let full = commit.len() == 40
                && commit
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            assert!(
                full || commit == "pending",
                "releases.txt:{}: {commit:?} is neither a full lowercase commit hash nor `pending`",
                n + 1
            );
            releases.push((parsed, version, commit));
        }
        assert!(!releases.is_empty(), "releases.txt lists no release");
        for pair in releases.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "releases.txt: {} must come after {} (oldest first, each once)",
                pair[1].1,
                pair[0].1
            );
        }
        let pending: Vec<_> = releases.iter().filter(|r| r.2 == "pending").collect();
        assert!(
            pending.len() <= 1 && pending.iter().all(|r| r.1 == releases.last().unwrap().1),
            "releases.txt: only the last release may be pending"
        );
        assert_eq!(
            releases.last().unwrap().1,
            VERSION,
            "releases.txt: the last release is the package version"
        );

        // Every recorded commit is in HEAD's history; not checkable in a
        // shallow clone (old commits are missing) or without git.
        let shallow = match git(&["rev-parse", "--is-shallow-repository"]) {
            Some(out) if out.status.success() => {
                String::from_utf8_lossy(&out.stdout).trim() == "true"
            }
            _ => {
                println!(
                    "releases.txt: commits not checked: git cannot run here or this is not a git checkout"
                );
                return;
            }
        };
        if shallow {
            println!(
                "releases.txt: commits not checked: this is a shallow clone (git rev-parse \
                 --is-shallow-repository says true), so older commits are missing; \
                 `git fetch --unshallow` to check them"
            );
            return;
        }
        for (_, version, commit) in releases.iter().filter(|r| r.2 != "pending") {
            let out = git(&["merge-base", "--is-ancestor", commit, "HEAD"]).unwrap();
            assert!(
                out.status.success(),
                "releases.txt: {version}'s commit {commit} is not in HEAD's history: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn versions_are_read_as_major_minor_patch() {
        assert_eq!(semver("0.2.0"), Some((0, 2, 0)));
        assert_eq!(semver("10.0.12"), Some((10, 0, 12)));
        for bad in ["0.2", "0.2.0.1", "v0.2.0", "0.02.0", "0.2.x", ""] {
            assert_eq!(semver(bad), None, "{bad}");
        }
    }
}
