//! `kubectl releaseplan`: the kubectl plugin for ReleasePlans. Installed on the
//! PATH as `kubectl-releaseplan`, kubectl runs it for `kubectl releaseplan ...`.
//! The logic lives in `releaseplan::cli`.

fn main() {
    std::process::exit(releaseplan::cli::main());
}
