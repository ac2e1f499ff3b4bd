//! Who may pull from a registry and which components are trusted: credentials from the
//! environment or a Docker config (the password never printed), and signatures verified
//! offline against the trusted keys.

use crate::cli::stdout;
use crate::registry::{LocalRegistry, both, echo_ensemble, echo_variant, push, toolhost};
use crate::support::Fixture;
use toolhost::registry::Reference;

#[test]
fn credentials_come_from_the_environment_or_a_docker_config() {
    let registry = LocalRegistry::start_with_auth(Some(("alice", "s3cret")));
    let fixture = Fixture::new();
    let reference = registry.reference("private/echo:1");
    let echo = fixture.root().join("echo.wasm");
    let refused = toolhost(
        &fixture,
        &["push", echo.to_str().expect("path"), &reference],
        &[],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", both(&refused));
    assert!(both(&refused).contains("401"), "{}", both(&refused));
    let credentials = [
        ("TOOLHOST_REGISTRY_USERNAME", "alice"),
        ("TOOLHOST_REGISTRY_PASSWORD", "s3cret"),
    ];
    push(&fixture, &echo, &reference, &credentials);

    fixture.write("echo.toml", &echo_ensemble(&reference));
    let anonymous = toolhost(&fixture, &["pull"], &[]);
    assert_eq!(anonymous.status.code(), Some(1));
    assert!(stdout(&anonymous).contains("401"), "{}", both(&anonymous));
    // A Docker config.json, as `docker login` writes it.
    let docker = fixture.mkdir("docker");
    let auth = base64_encode(b"alice:s3cret");
    std::fs::write(
        docker.join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.address
        ),
    )
    .expect("config.json");
    let pulled = toolhost(
        &fixture,
        &["pull"],
        &[("DOCKER_CONFIG", docker.to_str().expect("path"))],
    );
    assert!(pulled.status.success(), "{}", both(&pulled));
    // The password is never printed.
    assert!(!both(&pulled).contains("s3cret"));
}

/// Copies the signature manifest of `from` (a pinned reference) to the signature tag of
/// `to`'s digest: a real signature, of another component.
async fn copy_signature(from: &str, to: &str) {
    let reference = |text: &str| {
        let pinned = Reference::parse(text).expect("reference");
        let digest = pinned.digest().expect("pinned").clone();
        let tag = toolhost::registry::trust::signature_tag(&digest);
        oci_client::Reference::with_tag(
            pinned.registry().to_string(),
            pinned.repository().to_string(),
            tag,
        )
    };
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let (body, _) = client
        .pull_manifest_raw(
            &reference(from),
            &oci_client::secrets::RegistryAuth::Anonymous,
            &["application/vnd.oci.image.manifest.v1+json"],
        )
        .await
        .expect("the signature manifest");
    client
        .push_manifest_raw(
            &reference(to),
            body,
            http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
        )
        .await
        .expect("copied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_are_verified_offline_against_the_trusted_keys() {
    use toolhost::registry::SigningKey;
    toolhost::tls::install_provider();
    let registry = LocalRegistry::start();
    let fixture = Fixture::new();
    let keys = fixture.mkdir("keys");
    let (private_a, public_a) = SigningKey::generate(b"password a").expect("key a");
    let (private_b, _) = SigningKey::generate(b"password b").expect("key b");
    std::fs::write(keys.join("a.key"), private_a).expect("a.key");
    std::fs::write(keys.join("a.pub"), public_a).expect("a.pub");
    std::fs::write(keys.join("b.key"), private_b).expect("b.key");
    fixture.write_host_file("trust", "keys = [\"keys/a.pub\"]");
    let sign_with = |key: &str, password: &str, reference: &str, label: &str| {
        let file = fixture.root().join(format!("{label}.wasm"));
        std::fs::write(&file, echo_variant(label)).expect("component");
        let mut args = vec!["push", file.to_str().expect("path"), reference];
        let key = keys.join(key);
        if !password.is_empty() {
            args.extend(["--sign", key.to_str().expect("path")]);
        }
        let output = toolhost(&fixture, &args, &[("COSIGN_PASSWORD", password)]);
        assert!(output.status.success(), "{}", both(&output));
        let text = stdout(&output);
        assert_eq!(text.contains(", signed"), !password.is_empty(), "{text}");
        text.split_whitespace()
            .find(|w| w.contains("@sha256:"))
            .expect("pinned")
            .to_string()
    };
    let signed = sign_with(
        "a.key",
        "password a",
        &registry.reference("t/signed:1"),
        "signed",
    );
    let unsigned = sign_with("", "", &registry.reference("t/unsigned:1"), "unsigned");
    let other_key = sign_with(
        "b.key",
        "password b",
        &registry.reference("t/other:1"),
        "other",
    );
    let copied = sign_with("", "", &registry.reference("t/signed:copied"), "copied");
    copy_signature(&signed, &copied).await;

    let ensemble = |name: &str, component: &str| {
        format!(
            "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\ncomponent = \"{component}\"\n\
             require-signature = true\n\n[[invokers]]\ninvoker = {{ name = \"{name}\", tool = \"echo\" }}\n"
        )
    };
    fixture.write(
        "signed.toml",
        &ensemble("signed", &registry.reference("t/signed:1")),
    );
    fixture.write("unsigned.toml", &ensemble("unsigned", &unsigned));
    fixture.write("other.toml", &ensemble("other", &other_key));
    fixture.write(
        "copied.toml",
        &ensemble("copied", &registry.reference("t/signed:copied")),
    );
    fixture.write("file.toml", &ensemble("file", "../echo.wasm"));

    let mut expectations = [
        ("signed.toml", None),
        ("unsigned.toml", Some("it is not signed")),
        (
            "other.toml",
            Some("by none of the trusted keys (keys/a.pub)"),
        ),
        (
            "copied.toml",
            Some("a signature copied from another component"),
        ),
        ("file.toml", Some("a file has no signature")),
    ];
    let check_all = |label: &str, expectations: &[(&str, Option<&str>)]| {
        let check = toolhost(&fixture, &["check", "--json"], &[]);
        let report: serde_json::Value = serde_json::from_slice(&check.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", both(&check)));
        let errors = report["errors"].to_string();
        for &(file, expected) in expectations {
            let refused = report["refused"]
                .as_array()
                .expect("refused")
                .iter()
                .any(|r| r.as_str().is_some_and(|r| r.ends_with(&format!("/{file}"))));
            assert_eq!(refused, expected.is_some(), "{label}: {file}: {errors}");
            if let Some(expected) = expected {
                assert!(errors.contains(expected), "{label}: {file}: {errors}");
            }
        }
        assert_eq!(
            report["tools"].as_array().expect("tools").len(),
            1,
            "{label}"
        );
    };
    let pull = toolhost(&fixture, &["pull"], &[]);
    assert!(pull.status.success(), "{}", both(&pull));
    assert!(
        stdout(&pull).contains("signed by keys/a.pub"),
        "{}",
        both(&pull)
    );
    check_all("online", &expectations);
    let call = toolhost(&fixture, &["call", "signed", r#"{"text":"trusted"}"#], &[]);
    assert!(stdout(&call).contains("trusted"), "{}", both(&call));

    // Offline, the signatures kept in the store are checked again, with the same verdicts;
    // what had none is still refused (there is no telling that it has none).
    drop(registry);
    expectations[1].1 = Some("its signature cannot be fetched: cannot reach registry");
    check_all("offline", &expectations);

    // The host as a whole may require signatures: then an ensemble that does not ask still
    // gets only signed components.
    fixture.write_host_file(
        "trust",
        "keys = [\"keys/a.pub\"]\nrequire-signatures = true",
    );
    for file in ["signed.toml", "other.toml", "copied.toml", "file.toml"] {
        std::fs::remove_file(fixture.ensembles().join(file)).expect("remove");
    }
    fixture.write("unsigned.toml", &echo_ensemble(&unsigned));
    let check = toolhost(&fixture, &["check"], &[]);
    assert_eq!(check.status.code(), Some(1), "{}", both(&check));
    assert!(
        stdout(&check).contains("it must be signed by a trusted key"),
        "{}",
        both(&check)
    );
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
