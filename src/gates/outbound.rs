//! Where gates may send requests, and what of the answer they may repeat.
//!
//! Any plan author can write a gate URL, and the operator calls it from
//! inside the cluster: without limits that makes the operator a proxy into
//! the node's link-local services (cloud metadata, which hands out node
//! credentials) and into any address the plan author cannot reach himself.
//! So gates go through a [`GateHttp`]:
//!
//! - no redirects are followed (a gate answers itself; a 3xx is a failure
//!   that names the redacted `Location`);
//! - every address is checked by [`OutboundPolicy::check`] *after* name
//!   resolution, inside the client's resolver, and the connection goes to
//!   the checked addresses only, so DNS rebinding cannot swap them; IP
//!   literals, which the client does not resolve, are checked before sending;
//! - link-local and cloud-metadata addresses ([`classify`]) are always
//!   refused; `--gate-deny-cidrs` refuses more, `--gate-allow-hosts` turns
//!   the default "anything else" into an allow-list;
//! - proxies of the environment are ignored (a proxy would resolve the name
//!   itself, past the check);
//! - failure messages carry no response body unless `--gate-error-body-chars`
//!   allows a short, [`sanitize`]d start of it, transport errors are named by
//!   kind only ([`describe`]), and URLs are [`redact`]ed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::Url;

pub use releaseplan_core::gates::text::{redact, sanitize};

/// Largest `--gate-error-body-chars` honoured.
pub const MAX_ERROR_BODY_CHARS: u16 = 1024;

/// Default of `--gate-max-answer-bytes`: a gate's answer is one number (a
/// Prometheus instant vector of one series is well under 1 KiB), and every
/// call in flight may hold this much, so 32 calls hold at most 8 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 256 * 1024;

/// What an address is, as far as gates are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// A cloud provider's instance metadata service (node credentials).
    Metadata,
    /// Link-local (169.254.0.0/16, fe80::/10): node-local services.
    LinkLocal,
    /// Anything else: allowed unless the operator's lists say otherwise.
    Other,
}

/// Instance metadata services that are not link-local (and the link-local
/// ones, named for clearer messages).
const METADATA_V4: [Ipv4Addr; 4] = [
    // AWS, GCP, Azure, OpenStack, DigitalOcean...
    Ipv4Addr::new(169, 254, 169, 254),
    // AWS ECS task metadata and credentials.
    Ipv4Addr::new(169, 254, 170, 2),
    // Alibaba Cloud (not link-local).
    Ipv4Addr::new(100, 100, 100, 200),
    // Azure's WireServer (not link-local): the VM agent's channel, which
    // hands out extension settings and certificates.
    Ipv4Addr::new(168, 63, 129, 16),
];
/// IPv6 instance metadata addresses (not link-local).
const METADATA_V6: [Ipv6Addr; 2] = [
    // AWS (IMDS over IPv6).
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    // GCP (metadata.google.internal on IPv6 and dual-stack VMs).
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
];

/// Classifies an address. Pure: sends nothing. An IPv4 address embedded in
/// IPv6 (mapped `::ffff:a.b.c.d`, or NAT64 `64:ff9b::a.b.c.d`) is classified
/// as the IPv4 address it reaches.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return classify_v4(v4);
            }
            if METADATA_V6.contains(&v6) {
                AddressClass::Metadata
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                AddressClass::LinkLocal
            } else {
                AddressClass::Other
            }
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    if METADATA_V4.contains(&ip) {
        AddressClass::Metadata
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else {
        AddressClass::Other
    }
}

/// The IPv4 address an IPv6 address stands for, if it embeds one.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let o = v6.octets();
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    None
}

/// An address as a network: the address itself when it is one of the
/// embedded-IPv4 forms, so `::ffff:127.0.0.2` meets a rule for `127.0.0.2/32`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Parses a CIDR (`10.0.0.0/8`, `fd00::/8`) or a bare address (`127.0.0.2`,
/// taken as /32 or /128).
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = IpNet::from_str(s) {
        return Ok(net.trunc());
    }
    IpAddr::from_str(s)
        .map(IpNet::from)
        .map_err(|_| format!("{s:?} is not a CIDR (10.0.0.0/8) or an IP address"))
}

/// One entry of `--gate-allow-hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    /// Exactly this host name (lowercase, without a trailing dot).
    Name(String),
    /// `*.suffix`: any name under `suffix` (not `suffix` itself).
    Under(String),
    /// Any address in this network.
    Net(IpNet),
}

impl FromStr for HostRule {
    type Err = String;

    fn from_str(s: &str) -> Result<HostRule, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an empty host".into());
        }
        if s.contains(':') || s.contains('/') || IpAddr::from_str(s).is_ok() {
            return parse_cidr(s).map(HostRule::Net);
        }
        let name = normalize_host(s);
        if name
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '*'))
        {
            return Err(format!("{s:?} is not a host name, *.domain or CIDR"));
        }
        match name.strip_prefix("*.") {
            Some(rest) if !rest.contains('*') && !rest.is_empty() => {
                Ok(HostRule::Under(rest.to_string()))
            }
            _ if !name.contains('*') => Ok(HostRule::Name(name)),
            _ => Err(format!("{s:?}: a wildcard is only allowed as *.domain")),
        }
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl HostRule {
    fn admits(&self, host: &str, ip: IpAddr) -> bool {
        match self {
            HostRule::Name(n) => *n == host,
            HostRule::Under(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostRule::Net(net) => net.contains(&canonical(ip)),
        }
    }
}

/// Why a gate may not call an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The address is a cloud metadata service: refused whatever the lists say.
    #[error(
        "address {ip} of {host} is a cloud metadata address: gates may not call it (it hands out node credentials)"
    )]
    Metadata {
        /// Host as written in the URL.
        host: String,
        /// The address it resolved to.
        ip: IpAddr,
    },
    /// The address is link-local: refused whatever the lists say.
    #[error(
        "address {ip} of {host} is link-local: gates may not call it (node-local and metadata services live there)"
    )]
    LinkLocal {
        /// Host as written in the URL.
        host: String,
        /// The address it resolved to.
        ip: IpAddr,
    },
    /// The address is in a network of `--gate-deny-cidrs`.
    #[error("address {ip} of {host} is refused by the operator (--gate-deny-cidrs {net})")]
    Denied {
        /// Host as written in the URL.
        host: String,
        /// The address it resolved to.
        ip: IpAddr,
        /// The rule that refused it.
        net: IpNet,
    },
    /// `--gate-allow-hosts` is set and admits neither the name nor the address.
    #[error("host {host} ({ip}) is not in the operator's --gate-allow-hosts")]
    NotAllowed {
        /// Host as written in the URL.
        host: String,
        /// The address it resolved to.
        ip: IpAddr,
    },
    /// Only http and https are called.
    #[error("scheme {0:?} is not allowed: gates call http or https URLs")]
    Scheme(String),
    /// A URL without a host.
    #[error("the URL has no host")]
    NoHost,
}

/// The operator's limits on gate calls (flags `--gate-deny-cidrs`,
/// `--gate-allow-hosts`, `--gate-error-body-chars`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// Networks refused on top of link-local and metadata addresses.
    pub deny: Vec<IpNet>,
    /// When not empty, the only hosts and networks gates may call.
    pub allow: Vec<HostRule>,
    /// Characters of a failing answer's body repeated in messages (0: none).
    pub error_body_chars: u16,
}

impl OutboundPolicy {
    /// Whether a gate may connect to `ip`, which `host` (as written in the
    /// URL) resolved to. Refusals win: metadata and link-local first, then
    /// the deny list, then the allow list when there is one.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        let host = normalize_host(host);
        match classify(ip) {
            AddressClass::Metadata => return Err(Refusal::Metadata { host, ip }),
            AddressClass::LinkLocal => return Err(Refusal::LinkLocal { host, ip }),
            AddressClass::Other => {}
        }
        if let Some(net) = self.deny.iter().find(|n| n.contains(&canonical(ip))) {
            return Err(Refusal::Denied {
                host,
                ip,
                net: *net,
            });
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.admits(&host, ip)) {
            return Err(Refusal::NotAllowed { host, ip });
        }
        Ok(())
    }

    /// Checks what can be checked before sending: the scheme, and the
    /// address when the host is an IP literal (the resolver never sees those).
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme(url.scheme().to_string()));
        }
        match url.host() {
            None => Err(Refusal::NoHost),
            Some(url::Host::Ipv4(ip)) => self.check(&ip.to_string(), IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(&ip.to_string(), IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
        }
    }
}

/// A host name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("host name {0} does not resolve")]
struct Unresolved(String);

/// The gate client's resolver: resolves with the system resolver and keeps
/// only the addresses the policy allows, so the connection goes to a checked
/// address (no DNS rebinding between the check and the connect).
struct CheckedResolver {
    policy: Arc<OutboundPolicy>,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_string();
        Box::pin(async move {
            let looked_up = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map(Iterator::collect::<Vec<SocketAddr>>);
            let Ok(found) = looked_up else {
                return Err(Box::new(Unresolved(host)) as _);
            };
            let mut refusal = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(&host, a.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        refusal.get_or_insert(r);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refusal) {
                (true, Some(r)) => Err(Box::new(r) as _),
                (true, None) => Err(Box::new(Unresolved(host)) as _),
                (false, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// The client could not be built (no TLS backend).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the gates' HTTP client: {0}")]
pub struct BuildError(#[from] reqwest::Error);

/// Why a gate call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The policy refused the URL before anything was sent.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The request failed (refused addresses found by the resolver included).
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
}

impl CallError {
    /// The policy refused the address: asking again gets the same answer.
    pub fn is_refusal(&self) -> bool {
        match self {
            CallError::Refused(_) => true,
            CallError::Transport(e) => find::<Refusal>(e).is_some(),
        }
    }
}

/// Clients trusting a gate's own CA bundle, by the bundle's SHA-256.
type CaClients = Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], reqwest::Client>>>;

/// Most CA-bundle clients kept; past it the cache starts over (bundles are
/// few: one per private CA, not one per gate).
const MAX_CA_CLIENTS: usize = 64;

/// The HTTP client of gates with its outbound policy (see the module docs).
#[derive(Debug, Clone)]
pub struct GateHttp {
    client: reqwest::Client,
    policy: Arc<OutboundPolicy>,
    with_ca: CaClients,
    /// Largest answer body a gate reads (`--gate-max-answer-bytes`).
    max_answer_bytes: usize,
}

impl GateHttp {
    /// A client enforcing `policy`: no redirects, no proxies, checked addresses.
    pub fn new(policy: OutboundPolicy) -> Result<GateHttp, BuildError> {
        let policy = Arc::new(OutboundPolicy {
            error_body_chars: policy.error_body_chars.min(MAX_ERROR_BODY_CHARS),
            ..policy
        });
        let client = build(&policy, Vec::new())?;
        Ok(GateHttp {
            client,
            policy,
            with_ca: CaClients::default(),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        })
    }

    /// The same client, reading answers of at most `bytes` (a bigger one is
    /// an error of the gate, never read whole).
    #[must_use]
    pub fn with_max_answer_bytes(self, bytes: usize) -> GateHttp {
        GateHttp {
            max_answer_bytes: bytes,
            ..self
        }
    }

    /// The largest answer body a gate reads.
    pub fn max_answer_bytes(&self) -> usize {
        self.max_answer_bytes
    }

    /// A client like [`GateHttp::client`] that also trusts the CA
    /// certificates of `pem`, built once per bundle (cached by its hash, so a
    /// rotated bundle gets a new client and connections are reused between
    /// evaluations). The error says what is wrong with the bundle, never
    /// its content.
    pub fn client_trusting(&self, pem: &[u8]) -> Result<reqwest::Client, String> {
        use sha2::Digest as _;
        let hash: [u8; 32] = sha2::Sha256::digest(pem).into();
        let mut cache = self
            .with_ca
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = cache.get(&hash) {
            return Ok(c.clone());
        }
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|_| "is not a PEM certificate bundle".to_string())?;
        if certs.is_empty() {
            return Err("holds no PEM certificate".to_string());
        }
        let client = build(&self.policy, certs)
            .map_err(|_| "holds a certificate the TLS library refuses".to_string())?;
        if cache.len() >= MAX_CA_CLIENTS {
            cache.clear();
        }
        cache.insert(hash, client.clone());
        Ok(client)
    }

    /// Sends `request` on `client` (the default one or one of
    /// [`GateHttp::client_trusting`]) after checking its URL.
    pub async fn send_on(
        &self,
        client: &reqwest::Client,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, CallError> {
        self.policy.check_url(request.url())?;
        Ok(client.execute(request).await?)
    }

    /// The policy it enforces.
    pub fn policy(&self) -> &OutboundPolicy {
        &self.policy
    }

    /// Sends `request` (built on [`GateHttp::client`]) after checking its URL.
    pub async fn send(&self, request: reqwest::Request) -> Result<reqwest::Response, CallError> {
        self.policy.check_url(request.url())?;
        Ok(self.client.execute(request).await?)
    }

    /// The underlying client, to build requests for [`GateHttp::send`].
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The start of a failing answer's body, as the policy allows: empty by default.
    pub fn body_excerpt(&self, body: &[u8]) -> String {
        sanitize(body, usize::from(self.policy.error_body_chars))
    }
}

/// A gate client enforcing `policy`, trusting `extra_roots` besides the
/// system's roots.
fn build(
    policy: &Arc<OutboundPolicy>,
    extra_roots: Vec<reqwest::Certificate>,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(CheckedResolver {
            policy: Arc::clone(policy),
        })
        .tls_certs_merge(extra_roots)
        .build()
}

/// Names a failed call by its kind only: refused by the policy, timeout,
/// connection refused or reset, unresolvable name, TLS error. Never the
/// error's own text, which can carry addresses and server data.
pub fn describe(what: &str, url: &str, timeout: Duration, e: &CallError) -> String {
    let target = redact(url);
    let e = match e {
        CallError::Refused(r) => return format!("{what} at {target} not called: {r}"),
        CallError::Transport(e) => e,
    };
    if let Some(r) = find::<Refusal>(e) {
        return format!("{what} at {target} not called: {r}");
    }
    if e.is_timeout() {
        return format!(
            "{what} at {target} did not answer within {}s",
            timeout.as_secs()
        );
    }
    let kind = if let Some(u) = find::<Unresolved>(e) {
        u.to_string()
    } else if let Some(tls) = find::<rustls::Error>(e) {
        match tls {
            rustls::Error::InvalidCertificate(_) => {
                "TLS error: the server's certificate is not trusted".to_string()
            }
            _ => "TLS error".to_string(),
        }
    } else if let Some(kind) = io_kind(e) {
        match kind {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                "connection reset".to_string()
            }
            std::io::ErrorKind::TimedOut => "connection timed out".to_string(),
            _ => "connection failed".to_string(),
        }
    } else if e.is_connect() {
        "connection failed".to_string()
    } else if e.is_body() || e.is_decode() {
        "the answer was cut short".to_string()
    } else {
        "request failed".to_string()
    };
    format!("cannot reach {what} at {target}: {kind}")
}

/// The causes of `e`, itself first. Steps into the error an `io::Error`
/// wraps (its `source` skips it): TLS errors travel as
/// `io::Error(Other, io::Error(InvalidData, rustls::Error))`.
fn chain(e: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e as &(dyn std::error::Error + 'static)), |s| {
        match s
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => s.source(),
        }
    })
}

/// The first error of type `T` among the causes of `e`.
fn find<T: std::error::Error + 'static>(e: &reqwest::Error) -> Option<&T> {
    chain(e).find_map(|s| s.downcast_ref::<T>())
}

/// The first telling kind of an `io::Error` among the causes of `e`.
fn io_kind(e: &reqwest::Error) -> Option<std::io::ErrorKind> {
    chain(e)
        .filter_map(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind)
        .find(|k| *k != std::io::ErrorKind::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_classified() {
        for a in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "168.63.129.16",
            "::ffff:168.63.129.16",
            "fd00:ec2::254",
            "fd20:ce::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert_eq!(classify(ip(a)), AddressClass::Metadata, "{a}");
        }
        for a in [
            "169.254.0.1",
            "169.254.255.255",
            "fe80::1",
            "febf:ffff::1",
            "::ffff:169.254.1.1",
        ] {
            assert_eq!(classify(ip(a)), AddressClass::LinkLocal, "{a}");
        }
        for a in [
            "127.0.0.1",
            "10.96.0.10",
            "169.253.255.255",
            "169.255.0.0",
            "fec0::1",
            "fd00:ec2::253",
            "fd20:ce::253",
            "::1",
            "8.8.8.8",
        ] {
            assert_eq!(classify(ip(a)), AddressClass::Other, "{a}");
        }
    }

    #[test]
    fn url_forms_of_the_metadata_address_are_refused() {
        let p = OutboundPolicy::default();
        // Decimal, hex, octal and mapped forms all parse to the same address.
        for u in [
            "http://169.254.169.254/latest/meta-data/",
            "http://2852039166/",
            "http://0xa9fea9fe/",
            "http://0251.0376.0251.0376/",
            "http://[::ffff:169.254.169.254]/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]:8080/",
        ] {
            let url = Url::parse(u).unwrap();
            let r = p.check_url(&url);
            assert!(
                matches!(r, Err(Refusal::Metadata { .. } | Refusal::LinkLocal { .. })),
                "{u}: {r:?}"
            );
        }
        assert_eq!(
            p.check_url(&Url::parse("http://127.0.0.1:9090/").unwrap()),
            Ok(())
        );
        assert_eq!(
            p.check_url(&Url::parse("http://prometheus.monitoring/").unwrap()),
            Ok(())
        );
        assert!(matches!(
            p.check_url(&Url::parse("file:///etc/passwd").unwrap()),
            Err(Refusal::Scheme(_))
        ));
    }

    #[test]
    fn deny_list_wins_and_allow_list_restricts() {
        let p = OutboundPolicy {
            deny: vec![
                parse_cidr("127.0.0.2").unwrap(),
                parse_cidr("10.0.0.0/8").unwrap(),
            ],
            ..Default::default()
        };
        assert!(matches!(
            p.check("127.0.0.2", ip("127.0.0.2")),
            Err(Refusal::Denied { .. })
        ));
        assert!(matches!(
            p.check("x", ip("::ffff:127.0.0.2")),
            Err(Refusal::Denied { .. })
        ));
        assert!(matches!(
            p.check("svc.local", ip("10.1.2.3")),
            Err(Refusal::Denied { .. })
        ));
        assert_eq!(p.check("localhost", ip("127.0.0.1")), Ok(()));

        let p = OutboundPolicy {
            deny: vec![parse_cidr("10.0.5.0/24").unwrap()],
            allow: ["prometheus.monitoring", "*.svc.cluster.local", "10.0.0.0/8"]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect(),
            ..Default::default()
        };
        assert_eq!(p.check("Prometheus.Monitoring.", ip("192.168.1.1")), Ok(()));
        assert_eq!(p.check("a.b.svc.cluster.local", ip("192.168.1.1")), Ok(()));
        assert!(matches!(
            p.check("svc.cluster.local", ip("192.168.1.1")),
            Err(Refusal::NotAllowed { .. })
        ));
        assert!(matches!(
            p.check("evilsvc.cluster.local", ip("192.168.1.1")),
            Err(Refusal::NotAllowed { .. })
        ));
        assert_eq!(p.check("anything", ip("10.1.1.1")), Ok(()));
        assert!(matches!(
            p.check("prometheus.monitoring", ip("10.0.5.1")),
            Err(Refusal::Denied { .. })
        ));
        // An allow-list never opens metadata or link-local addresses.
        let p = OutboundPolicy {
            allow: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
            ..Default::default()
        };
        assert!(matches!(
            p.check("x", ip("169.254.169.254")),
            Err(Refusal::Metadata { .. })
        ));
        assert!(matches!(
            p.check("x", ip("fe80::1")),
            Err(Refusal::LinkLocal { .. })
        ));
    }

    #[test]
    fn host_rules_parse() {
        assert_eq!(
            "Prom.Example.".parse::<HostRule>(),
            Ok(HostRule::Name("prom.example".into()))
        );
        assert_eq!(
            "*.svc".parse::<HostRule>(),
            Ok(HostRule::Under("svc".into()))
        );
        assert_eq!(
            "10.0.0.1".parse::<HostRule>(),
            Ok(HostRule::Net("10.0.0.1/32".parse().unwrap()))
        );
        assert_eq!(
            "10.0.0.7/8".parse::<HostRule>(),
            Ok(HostRule::Net("10.0.0.0/8".parse().unwrap()))
        );
        for bad in ["", "a.*.b", "*", "*.", "10.0.0.0/33", "a b", "http://x"] {
            assert!(bad.parse::<HostRule>().is_err(), "{bad:?}");
        }
        assert!(parse_cidr("nope").is_err());
        assert_eq!(
            parse_cidr("fd00:ec2::254").unwrap(),
            "fd00:ec2::254/128".parse::<IpNet>().unwrap()
        );
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact("https://user:s3cret@prom.example:9090/api?token=abc#frag"),
            "https://prom.example:9090/api"
        );
        assert_eq!(
            redact("http://127.0.0.1:1/hook?k=v"),
            "http://127.0.0.1:1/hook"
        );
        // Path tokens: the first segment only.
        assert_eq!(
            redact("https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX"),
            "https://hooks.slack.com/services/…"
        );
        assert_eq!(
            redact("http://127.0.0.1:9090/api/v1/query?query=up"),
            "http://127.0.0.1:9090/api/…"
        );
        assert_eq!(redact("http://h/hook/"), "http://h/hook/");
        assert_eq!(redact("http://h/"), "http://h/");
        assert_eq!(redact("not a url?token=x"), "not a url");
        assert_eq!(redact("weird://u:p@host?x"), "weird://host");
        assert_eq!(redact("://u:p@h/p#x"), "h/p");
        assert!(
            redact(&format!("http://h/{}", "a".repeat(500)))
                .chars()
                .count()
                <= 201
        );
    }

    #[test]
    fn ca_bundles_are_checked_and_one_client_is_kept_per_bundle() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = GateHttp::new(OutboundPolicy::default()).unwrap();
        assert_eq!(
            http.client_trusting(b"not-a-certificate").unwrap_err(),
            "holds no PEM certificate"
        );
        let broken = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
        assert_eq!(
            http.client_trusting(broken).unwrap_err(),
            "is not a PEM certificate bundle"
        );
        let cached = |h: &GateHttp| h.with_ca.lock().unwrap().len();
        assert_eq!(cached(&http), 0, "refused bundles are not cached");
        let ca = || {
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p.self_signed(&rcgen::KeyPair::generate().unwrap())
                .unwrap()
                .pem()
        };
        let (a, b) = (ca(), ca());
        http.client_trusting(a.as_bytes()).unwrap();
        http.client_trusting(a.as_bytes()).unwrap();
        assert_eq!(cached(&http), 1, "one client per bundle");
        // A clone (the runner's) shares the cache; a new bundle, a new client.
        http.clone().client_trusting(b.as_bytes()).unwrap();
        assert_eq!(cached(&http), 2);
    }

    #[test]
    fn bodies_are_sanitized() {
        assert_eq!(sanitize(b"secret", 0), "");
        assert_eq!(sanitize(b"  a\n\tb\x1b[31m  c ", 100), "a b [31m c");
        assert_eq!(sanitize("x\u{202e}y\u{200b}z".as_bytes(), 100), "x y z");
        assert_eq!(sanitize(b"abcdef", 3), "abc…");
        assert_eq!(sanitize(b"ab cdef", 3), "ab…");
        assert_eq!(sanitize(b"abc", 3), "abc");
        assert_eq!(sanitize(&[0xff, b'a'], 5), "\u{fffd}a");
        let long = "y".repeat(5000);
        assert_eq!(sanitize(long.as_bytes(), 40).chars().count(), 41);
    }
}
