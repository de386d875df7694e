//! The `process_*` metrics every Prometheus exporter serves, under the names
//! the Prometheus client libraries' process collector gives them, so the
//! dashboards and alerts a platform team already has for any exporter work
//! for the operator too. prometheus-client has no such collector; this one
//! reads `/proc/self` at each scrape with the procfs crate. Off Linux, or
//! when `/proc` is not readable, the families are simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The families the collector serves, as queries name them (the counter
/// with `_total`): `doc_lists` checks docs/operations.md against them.
pub const FAMILIES: &[&str] = &[
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
    "process_threads",
];

/// The process metrics of this process, read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one scrape reads; a field is `None` when `/proc` did not say.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reading {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit of open file descriptors (None when unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    /// Threads.
    pub threads: Option<u64>,
}

/// Off Linux (the plugin is built for Windows and macOS, where the procfs
/// crate does not build): nothing to read.
#[cfg(not(target_os = "linux"))]
pub fn read() -> Reading {
    Reading::default()
}

/// Reads this process's figures from `/proc/self`.
#[cfg(target_os = "linux")]
#[allow(clippy::cast_precision_loss)] // Tick and byte counts far below 2^52.
pub fn read() -> Reading {
    let Ok(me) = procfs::process::Process::myself() else {
        return Reading::default();
    };
    let mut r = Reading::default();
    let ticks = procfs::ticks_per_second() as f64;
    if let Ok(stat) = me.stat() {
        r.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
        r.resident_bytes = Some(stat.rss.saturating_mul(procfs::page_size()));
        r.virtual_bytes = Some(stat.vsize);
        r.threads = u64::try_from(stat.num_threads).ok();
        if let Ok(boot) = procfs::boot_time_secs() {
            r.start_time_seconds = Some(boot as f64 + stat.starttime as f64 / ticks);
        }
    }
    r.open_fds = me.fd_count().ok().and_then(|n| u64::try_from(n).ok());
    if let Ok(limits) = me.limits()
        && let procfs::process::LimitValue::Value(v) = limits.max_open_files.soft_limit
    {
        r.max_fds = Some(v);
    }
    r
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(v) = value else { return Ok(()) };
    let g = ConstGauge::new(v);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for ProcessCollector {
    #[allow(clippy::cast_precision_loss)] // Byte and fd counts far below 2^52.
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = read();
        if let Some(cpu) = r.cpu_seconds {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        let f = |v: Option<u64>| v.map(|v| v as f64);
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            f(r.resident_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            f(r.virtual_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            f(r.open_fds),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            f(r.max_fds),
        )?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            r.start_time_seconds,
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process.",
            f(r.threads),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures are this process's: the files it holds open, the memory
    /// it touches, its threads, a start before now. Lower bounds only: the
    /// other tests of this binary run beside it and open and free their own.
    #[test]
    fn reads_this_process() {
        let before = read();
        let files: Vec<std::fs::File> = (0..200)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let ballast = vec![1u8; 256 << 20];
        let after = read();
        assert!(after.open_fds.unwrap() >= 200, "{after:?}");
        assert!(after.resident_bytes.unwrap() >= 256 << 20, "{after:?}");
        assert!(std::hint::black_box(&ballast).iter().all(|b| *b == 1));
        drop(files);
        assert!(after.threads.unwrap() >= 1);
        assert!(after.max_fds.unwrap_or(u64::MAX) >= after.open_fds.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = after.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} {now}"
        );
        assert!(after.cpu_seconds.unwrap() >= before.cpu_seconds.unwrap());
    }
}
