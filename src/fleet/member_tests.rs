use super::*;
use base64::Engine as _;
use k8s_openapi::ByteString;
use kube::api::ObjectMeta;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn secret(data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("cluster-eu-1".into()),
            namespace: Some("argocd".into()),
            labels: Some(BTreeMap::from([
                (
                    SECRET_TYPE_LABEL.to_string(),
                    SECRET_TYPE_CLUSTER.to_string(),
                ),
                ("env".to_string(), "prod".to_string()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// A CA and a client certificate it signed, as PEM.
fn pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["admin".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), client.pem(), key.serialize_pem())
}

#[tokio::test]
async fn a_bearer_token_secret_gives_a_client_with_its_ca_and_deadlines() {
    let (ca, _, _) = pki();
    let config = format!(
        r#"{{"bearerToken":"t0k3n","tlsClientConfig":{{"caData":"{}","serverName":"api.eu-1"}}}}"#,
        b64(&ca)
    );
    let m = Member::from_secret(&secret(&[
        ("name", "eu-1"),
        ("server", "https://127.0.0.1:6443"),
        ("config", &config),
    ]))
    .unwrap();
    assert_eq!(m.name, "eu-1");
    assert_eq!(m.labels.get("env").map(String::as_str), Some("prod"));
    let c = m.config(Deadlines::default()).await.unwrap();
    assert_eq!(c.cluster_url.to_string(), "https://127.0.0.1:6443/");
    assert_eq!(c.root_cert.as_ref().map(Vec::len), Some(1));
    assert_eq!(c.tls_server_name.as_deref(), Some("api.eu-1"));
    assert!(!c.accept_invalid_certs);
    assert!(c.auth_info.token.is_some());
    assert_eq!(c.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(c.read_timeout, Some(Duration::from_secs(15)));
}

#[tokio::test]
async fn client_certificates_and_no_name_key_use_the_secrets_name() {
    let (ca, cert, key) = pki();
    let config = format!(
        r#"{{"tlsClientConfig":{{"caData":"{}","certData":"{}","keyData":"{}"}}}}"#,
        b64(&ca),
        b64(&cert),
        b64(&key)
    );
    let m = Member::from_secret(&secret(&[
        ("server", "https://127.0.0.1:7443"),
        ("config", &config),
    ]))
    .unwrap();
    assert_eq!(m.name, "cluster-eu-1");
    let c = m.config(Deadlines::default()).await.unwrap();
    assert!(c.auth_info.client_certificate_data.is_some());
    assert!(c.auth_info.client_key_data.is_some());
}

#[test]
fn what_cannot_be_read_is_an_error_naming_the_secret() {
    let e = Member::from_secret(&secret(&[("name", "x")])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cluster Secret argocd/cluster-eu-1: no key server"
    );
    let e = Member::from_secret(&secret(&[("server", "https://x"), ("config", "{")])).unwrap_err();
    assert!(
        e.to_string().contains("key config is not Argo CD's JSON"),
        "{e}"
    );
    let e = Member::from_secret(&secret(&[
        ("server", "https://x"),
        ("config", r#"{"awsAuthConfig":{"clusterName":"eks"}}"#),
    ]))
    .unwrap_err();
    assert!(
        e.to_string().contains("awsAuthConfig is not supported"),
        "{e}"
    );
}

#[tokio::test]
async fn a_certificate_that_is_not_pem_is_refused_when_the_client_is_made() {
    let config = format!(
        r#"{{"tlsClientConfig":{{"caData":"{}"}}}}"#,
        b64("not a certificate")
    );
    let m = Member::from_secret(&secret(&[
        ("server", "https://127.0.0.1:1"),
        ("config", &config),
    ]))
    .unwrap();
    let e = m.config(Deadlines::default()).await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cluster Secret argocd/cluster-eu-1: "),
        "{e}"
    );
}
