//! Shell completion, with plan names read from the cluster.
//!
//! Two ways in, one engine (clap_complete's dynamic completion):
//! * the binary on its own: `completion bash|zsh|fish` prints a script that
//!   calls the binary back with `COMPLETE=<shell>` on every Tab;
//! * `kubectl releaseplan <Tab>`: kubectl (1.26+) runs an executable named
//!   `kubectl_complete-releaseplan` with the words typed so far and reads
//!   candidates in cobra's format; `completion kubectl` prints that shim, which
//!   calls `kubectl-releaseplan __complete ...`.
//!
//! Plan names come from a list call with a short timeout, in the namespace of
//! `-n`/`--namespace` when typed before the Tab, else the kubeconfig context's;
//! no cluster means no plan names, never an error.

use super::connect::{Ctx, Global};
use clap_complete::CompletionCandidate;
use clap_complete::env::EnvCompleter;
use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;
use std::time::Duration;

/// The namespace typed on the command line being completed (`-n X`).
static NAMESPACE: OnceLock<Option<String>> = OnceLock::new();

/// The value of `-n`/`--namespace` among the words typed so far.
pub fn namespace_in(words: &[OsString]) -> Option<String> {
    let words: Vec<String> = words
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let mut found = None;
    for (i, w) in words.iter().enumerate() {
        if let Some(v) = w
            .strip_prefix("--namespace=")
            .or_else(|| w.strip_prefix("-n="))
        {
            found = Some(v.to_string());
        } else if (w == "-n" || w == "--namespace")
            && let Some(v) = words.get(i + 1)
        {
            found = Some(v.clone());
        } else if let Some(v) = w
            .strip_prefix("-n")
            .filter(|v| !v.is_empty() && !v.starts_with('='))
        {
            found = Some(v.to_string());
        }
    }
    found.filter(|n| !n.is_empty())
}

/// The plan names starting with `current`, from the cluster (empty when none
/// answers within two seconds).
pub fn plan_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let prefix = current.to_string_lossy().into_owned();
    let namespace = NAMESPACE.get().cloned().flatten();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let names = runtime.block_on(async {
        let listing = async {
            let global = Global {
                namespace,
                ..Global::default()
            };
            let ctx = Ctx::connect(&global).await.ok()?;
            let list = ctx
                .plans()
                .list(&kube::api::ListParams::default())
                .await
                .ok()?;
            Some(
                list.items
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .collect::<Vec<_>>(),
            )
        };
        tokio::time::timeout(Duration::from_secs(2), listing)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    });
    names
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .map(CompletionCandidate::new)
        .collect()
}

/// Handles the completion entry points before normal parsing, for the
/// command line that `cli` makes. Returns `true` when this run was a
/// completion request (and its output is written).
pub fn handle(args: &[OsString], cli: fn() -> clap::Command) -> bool {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if args.get(1).is_some_and(|a| a == "__complete") {
        let words: Vec<OsString> = args.iter().skip(2).cloned().collect();
        let _ = NAMESPACE.set(namespace_in(&words));
        print!("{}", kubectl_candidates(cli(), &words));
        return true;
    }
    if std::env::var_os("COMPLETE").is_some_and(|v| !v.is_empty() && v != "0") {
        let _ = NAMESPACE.set(namespace_in(args));
    }
    clap_complete::CompleteEnv::with_factory(cli)
        .try_complete(args.iter().cloned(), None)
        .unwrap_or(false)
}

/// Candidates for kubectl's plugin completion of the command line `cmd`, in
/// cobra's format: one per line (`value\thelp`), then `:4` (no file completion).
pub fn kubectl_candidates(mut cmd: clap::Command, words: &[OsString]) -> String {
    let mut all = vec![OsString::from("kubectl-releaseplan")];
    all.extend(words.iter().cloned());
    if all.len() == 1 {
        all.push(OsString::new());
    }
    let index = all.len() - 1;
    let candidates =
        clap_complete::engine::complete(&mut cmd, all, index, None).unwrap_or_default();
    let mut out = String::new();
    for c in candidates.iter().filter(|c| !c.is_hide_set()) {
        out.push_str(&c.get_value().to_string_lossy());
        if let Some(help) = c.get_help() {
            let help = help.to_string();
            if let Some(first) = help.lines().next() {
                out.push('\t');
                out.push_str(first);
            }
        }
        out.push('\n');
    }
    out.push_str(":4\n");
    out
}

/// The `kubectl_complete-releaseplan` shim for kubectl's plugin completion.
pub const KUBECTL_SHIM: &str = "#!/bin/sh\n# kubectl (1.26+) runs this for `kubectl releaseplan <Tab>`.\nexec kubectl-releaseplan __complete \"$@\"\n";

/// A shell of `completion`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// bash: `source <(kubectl-releaseplan completion bash)`.
    Bash,
    /// zsh: `source <(kubectl-releaseplan completion zsh)`.
    Zsh,
    /// fish: `kubectl-releaseplan completion fish | source`.
    Fish,
    /// The `kubectl_complete-releaseplan` shim for `kubectl releaseplan <Tab>`.
    Kubectl,
}

/// The script of `completion SHELL`.
pub fn script(shell: Shell) -> Result<String, std::io::Error> {
    let bin = "kubectl-releaseplan";
    let mut buf = Vec::new();
    match shell {
        Shell::Bash => {
            clap_complete::env::Bash.write_registration("COMPLETE", bin, bin, bin, &mut buf)?;
        }
        Shell::Zsh => {
            clap_complete::env::Zsh.write_registration("COMPLETE", bin, bin, bin, &mut buf)?;
        }
        Shell::Fish => {
            clap_complete::env::Fish.write_registration("COMPLETE", bin, bin, bin, &mut buf)?;
        }
        Shell::Kubectl => buf.extend_from_slice(KUBECTL_SHIM.as_bytes()),
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::CommandFactory;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_the_namespace() {
        assert_eq!(
            namespace_in(&words(&["get", "-n", "prod", "s"])),
            Some("prod".into())
        );
        assert_eq!(
            namespace_in(&words(&["--namespace=prod", "get"])),
            Some("prod".into())
        );
        assert_eq!(
            namespace_in(&words(&["-nprod", "get"])),
            Some("prod".into())
        );
        assert_eq!(namespace_in(&words(&["get", "-n"])), None);
    }

    #[test]
    fn completes_commands_for_kubectl() {
        let out = kubectl_candidates(Cli::command(), &words(&["se"]));
        assert!(out.starts_with("set\t"), "{out}");
        assert!(out.ends_with(":4\n"), "{out}");
        let out = kubectl_candidates(Cli::command(), &words(&[""]));
        for c in ["get\t", "list\t", "lint\t", "restart\t", "completion\t"] {
            assert!(out.contains(c), "{c}: {out}");
        }
    }

    #[test]
    fn scripts() {
        assert!(script(Shell::Bash).unwrap().contains("COMPLETE"));
        assert!(script(Shell::Fish).unwrap().contains("complete"));
        assert!(script(Shell::Zsh).unwrap().contains("compdef"));
        assert!(script(Shell::Kubectl).unwrap().contains("__complete"));
    }
}
