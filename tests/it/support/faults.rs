//! A TCP proxy with faults, between an operator process and the test
//! cluster's API server: the network misbehaving, for real, while the
//! operator works. The operator is pointed at it by a kubeconfig of its own
//! ([`FaultProxy::kubeconfig`]); TLS passes through untouched (the API
//! server's certificate names 127.0.0.1, whatever the port).
//!
//! Faults ([`Fault`]): latency with jitter on every chunk, a bandwidth limit,
//! an outage (every connection reset, new ones reset at once), a black hole
//! (connections stay open, nothing moves either way, as when packets are
//! dropped: the bytes flow again when it ends), lost answers (what the API
//! server sends is dropped while requests still reach it and the connection
//! stays open). [`FaultProxy::on_next_write`] starts a fault at the moment a
//! request larger than a read (a Deployment apply, a status write) passes.
//! Every connection counts in [`FaultProxy::connections`], so a reconnect
//! storm shows.
//!
//! Only 127.0.0.1: the proxy listens there and the API server is there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the network does now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Bytes pass as they come.
    Pass,
    /// Each chunk waits `base` plus up to `jitter` (uniform) before it passes.
    Latency {
        /// The least delay.
        base: Duration,
        /// The most added at random.
        jitter: Duration,
    },
    /// At most this many bytes a second each way, per connection.
    Bandwidth(u64),
    /// Connections are reset (RST), and new ones reset as soon as accepted.
    Down,
    /// Nothing moves either way; connections stay open (new ones too).
    BlackHole,
    /// What the API server sends is dropped; what the operator sends still
    /// reaches it; connections stay open. Under TLS the next record that
    /// passes after it ends fails the connection (its sequence number is
    /// off), as behind a middlebox that lost them.
    LoseAnswers,
}

/// The least size of a chunk the operator sends that [`FaultProxy::on_next_write`]
/// takes for a write: a Deployment apply or a status write is several KB,
/// a read, a ping or a window update a few hundred bytes at most.
pub const WRITE_BYTES: usize = 1500;

/// A small seeded generator (SplitMix64): the same seed, the same faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// A duration in `lo..=hi`, to the millisecond.
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        Duration::from_millis(self.range(lo.as_millis() as u64, hi.as_millis() as u64))
    }
}

/// A fault waiting for the next write ([`FaultProxy::on_next_write`]).
struct Trigger {
    state: Arc<watch::Sender<State>>,
    armed: std::sync::Mutex<Option<Fault>>,
    fired: tokio::sync::Notify,
}

impl Trigger {
    /// The armed fault, taken, when a chunk of `n` bytes is a write.
    fn take(&self, n: usize) -> Option<Fault> {
        if n < WRITE_BYTES {
            return None;
        }
        self.armed.lock().unwrap().take()
    }

    /// Sets `fault` on every connection and says it fired.
    fn fire(&self, fault: Fault) {
        self.state.send_modify(|s| {
            s.fault = fault;
            if fault == Fault::Down {
                s.resets += 1;
            }
        });
        self.fired.notify_one();
    }
}

/// The state every connection follows: the fault, and a generation that an
/// outage bumps to reset every open connection.
#[derive(Debug, Clone, Copy, PartialEq)]
struct State {
    fault: Fault,
    resets: u64,
}

/// A running proxy; stopped when dropped.
pub struct FaultProxy {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    trigger: Arc<Trigger>,
    connections: Arc<AtomicU64>,
    open: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy forwards to loopback only, not {upstream}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (state, rx) = watch::channel(State {
            fault: Fault::Pass,
            resets: 0,
        });
        let state = Arc::new(state);
        let trigger = Arc::new(Trigger {
            state: Arc::clone(&state),
            armed: std::sync::Mutex::new(None),
            fired: tokio::sync::Notify::new(),
        });
        let armed = Arc::clone(&trigger);
        let connections = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&connections);
        let open = Arc::new(AtomicU64::new(0));
        let open_now = Arc::clone(&open);
        let task = tokio::spawn(async move {
            let mut seed = 1u64;
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                open_now.fetch_add(1, Ordering::Relaxed);
                seed += 1;
                let (rx, open_now, armed) = (rx.clone(), Arc::clone(&open_now), Arc::clone(&armed));
                tokio::spawn(async move {
                    connection(client, upstream, rx, armed, seed).await;
                    open_now.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        FaultProxy {
            addr,
            state,
            trigger,
            connections,
            open,
            task,
        }
    }

    /// Sets the fault from now on; [`Fault::Down`] resets every open connection.
    pub fn set(&self, fault: Fault) {
        self.state.send_modify(|s| {
            s.fault = fault;
            if fault == Fault::Down {
                s.resets += 1;
            }
        });
    }

    /// Sets `fault` at the moment the next write passes (a chunk of at least
    /// [`WRITE_BYTES`] from the operator): [`Fault::LoseAnswers`] before it
    /// reaches the API server, so its answer is lost; [`Fault::Down`] just
    /// after, so the connection is reset with the write in flight. Returns
    /// whether a write came within `within` (the fault is disarmed if not).
    pub async fn on_next_write(&self, fault: Fault, within: Duration) -> bool {
        let fired = self.trigger.fired.notified();
        tokio::pin!(fired);
        fired.as_mut().enable();
        *self.trigger.armed.lock().unwrap() = Some(fault);
        if tokio::time::timeout(within, fired).await.is_ok() {
            return true;
        }
        // Not fired, unless it fired just now.
        self.trigger.armed.lock().unwrap().take().is_none()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections open now (accepted, and neither side has ended them).
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// A copy of the kubeconfig at `from` whose server is this proxy, written
    /// under `dir`.
    pub fn kubeconfig(&self, from: &Path, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(from).expect("read kubeconfig");
        let mut replaced = 0;
        let out: Vec<String> = text
            .lines()
            .map(|l| {
                let t = l.trim_start();
                if let Some(url) = t.strip_prefix("server:") {
                    let url = url.trim().trim_matches('"');
                    assert!(
                        url.starts_with("https://127.0.0.1:"),
                        "not a local API server: {url}"
                    );
                    replaced += 1;
                    let indent = &l[..l.len() - t.len()];
                    format!("{indent}server: https://{}", self.addr)
                } else {
                    l.to_string()
                }
            })
            .collect();
        assert_eq!(replaced, 1, "one server in {}", from.display());
        std::fs::create_dir_all(dir).expect("kubeconfig dir");
        let path = dir.join(format!("proxied-{}.kubeconfig", self.addr.port()));
        std::fs::write(&path, out.join("\n") + "\n").expect("write kubeconfig");
        path
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Every connection ends with the proxy.
        self.set(Fault::Down);
    }
}

/// The address of the API server a kubeconfig names (127.0.0.1 only).
pub fn api_server_addr(kubeconfig: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let url = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server:"))
        .expect("a server in the kubeconfig")
        .trim()
        .trim_matches('"');
    let hostport = url
        .strip_prefix("https://")
        .expect("an https server")
        .trim_end_matches('/');
    hostport.parse().expect("a 127.0.0.1:port server")
}

/// One proxied connection: both directions, until either side closes or an
/// outage resets it.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    state: watch::Receiver<State>,
    trigger: Arc<Trigger>,
    seed: u64,
) {
    let born = *state.borrow();
    if born.fault == Fault::Down {
        reset(&client);
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pipe(
        cr,
        sw,
        state.clone(),
        born.resets,
        Rng::new(seed),
        Some(trigger),
    ));
    let down = tokio::spawn(pipe(sr, cw, state, born.resets, Rng::new(!seed), None));
    let _ = tokio::join!(up, down);
}

/// Closes with RST: an outage, not a clean end. (tokio deprecates
/// `set_linger` because a positive linger blocks the thread on drop; a zero
/// one never waits: the kernel drops the buffer and sends RST.)
#[allow(deprecated)]
fn reset(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Copies one direction through the faults: the operator's requests when
/// `trigger` is given (it watches them for writes), else the API server's
/// answers.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    resets: u64,
    mut rng: Rng,
    trigger: Option<Arc<Trigger>>,
) {
    let answers = trigger.is_none();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = reset_of(&mut state, resets) => {
                reset(from.as_ref());
                reset(to.as_ref());
                return;
            }
        };
        // A write with a fault waiting for it: answers lost from before it
        // passes, or a reset once it has.
        let after = match trigger.as_ref().and_then(|t| t.take(n).map(|f| (t, f))) {
            Some((t, Fault::Down)) => Some(t),
            Some((t, fault)) => {
                t.fire(fault);
                None
            }
            None => None,
        };
        if let Some(t) = after {
            let _ = to.write_all(&buf[..n]).await;
            let _ = to.flush().await;
            t.fire(Fault::Down);
            reset(from.as_ref());
            reset(to.as_ref());
            return;
        }
        // Hold the chunk as the fault says; an outage meanwhile resets.
        let mut lost = false;
        loop {
            let s = *state.borrow();
            if s.resets != resets {
                reset(from.as_ref());
                reset(to.as_ref());
                return;
            }
            match s.fault {
                Fault::Pass | Fault::Down => break,
                Fault::LoseAnswers => {
                    lost = answers;
                    break;
                }
                Fault::BlackHole => {
                    let _ = state.changed().await;
                }
                Fault::Latency { base, jitter } => {
                    let extra = rng.duration(Duration::ZERO, jitter);
                    tokio::time::sleep(base + extra).await;
                    break;
                }
                Fault::Bandwidth(bps) => {
                    let secs = n as f64 / bps.max(1) as f64;
                    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                    break;
                }
            }
        }
        if lost {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Resolves when an outage after `resets` began.
async fn reset_of(state: &mut watch::Receiver<State>, resets: u64) {
    loop {
        if state.borrow().resets != resets {
            return;
        }
        if state.changed().await.is_err() {
            // The proxy is gone: never resolves here (its drop reset first).
            std::future::pending::<()>().await;
        }
    }
}
