//! The Kubernetes manifests in `deploy/kubernetes/`: every document parses; the ConfigMap
//! holds exactly the shipped ensembles (`BLESS=1` writes it again from `ensembles/`); the
//! Deployment projects every key, mounts what toolhost.toml names, runs read-only with a
//! writable cache, and probes paths and a port that `serve` really serves (a real `serve
//! --http` answers them); the Service reaches the pods' port.

use crate::mcp::HttpServer;
use crate::support::Fixture;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifests() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// Every YAML document of `file`.
fn documents(file: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(manifests().join(file)).expect("manifest");
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The document of `kind` named `name` among the kustomization's resources.
fn resource(kind: &str, name: &str) -> Yaml {
    let kustomization = &documents("kustomization.yaml")[0];
    let files: Vec<&str> = kustomization["resources"]
        .as_vec()
        .expect("resources")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    files
        .iter()
        .flat_map(|file| documents(file))
        .find(|doc| {
            doc["kind"].as_str() == Some(kind) && doc["metadata"]["name"].as_str() == Some(name)
        })
        .unwrap_or_else(|| panic!("no {kind} {name} in {files:?}"))
}

/// The shipped ensembles as ConfigMap keys (`a/b.toml` is `a__b.toml`) and their text.
fn shipped_ensembles() -> BTreeMap<String, (String, String)> {
    fn walk(dir: &Path, base: &Path, into: &mut BTreeMap<String, (String, String)>) {
        for entry in std::fs::read_dir(dir).expect("ensembles") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, base, into);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let relative = path
                    .strip_prefix(base)
                    .expect("inside")
                    .to_string_lossy()
                    .into_owned();
                let text = std::fs::read_to_string(&path).expect("ensemble");
                into.insert(relative.replace('/', "__"), (relative, text));
            }
        }
    }
    let mut files = BTreeMap::new();
    let base = repo().join("ensembles");
    walk(&base, &base, &mut files);
    files
}

/// The ConfigMap of the shipped ensembles, as YAML.
fn ensembles_configmap() -> String {
    let mut text = String::from(
        "# The shipped ensembles (ensembles/), one key per file; `a__b.toml` is `a/b.toml`.\n\
         # Written by `BLESS=1 cargo test -p toolhost --test all -- kubernetes`; edit\n\
         # ensembles/ and bless again rather than this file.\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: toolhost-ensembles\n  labels:\n    \
         app.kubernetes.io/name: toolhost\ndata:\n",
    );
    for (key, (_, body)) in shipped_ensembles() {
        text.push_str(&format!("  {key}: |\n"));
        for line in body.lines() {
            if line.is_empty() {
                text.push('\n');
            } else {
                text.push_str(&format!("    {line}\n"));
            }
        }
    }
    text
}

#[test]
fn the_configmap_holds_exactly_the_shipped_ensembles() {
    let path = manifests().join("ensembles.yaml");
    let expected = ensembles_configmap();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &expected).expect("bless");
    }
    let configmap = resource("ConfigMap", "toolhost-ensembles");
    let data = configmap["data"].as_hash().expect("data");
    let shipped = shipped_ensembles();
    let keys: Vec<&str> = data.keys().filter_map(Yaml::as_str).collect();
    assert_eq!(
        keys,
        shipped.keys().map(String::as_str).collect::<Vec<_>>(),
        "run BLESS=1 cargo test -p toolhost --test all -- kubernetes"
    );
    for (key, (_, text)) in &shipped {
        let held = configmap["data"][key.as_str()].as_str().expect("text");
        assert_eq!(
            held.trim_end(),
            text.trim_end(),
            "{key} differs from ensembles/: bless again"
        );
    }
}

#[test]
fn the_deployment_mounts_what_the_host_file_names_and_runs_read_only() {
    let deployment = resource("Deployment", "toolhost");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"].as_i64(), Some(3));
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"].as_bool(),
        Some(false)
    );
    assert!(
        container["resources"]["requests"]["memory"]
            .as_str()
            .is_some()
    );
    assert!(container["resources"]["requests"]["cpu"].as_str().is_some());
    // The grace period outlasts the drain.
    let config = resource("ConfigMap", "toolhost-config");
    let host_file = config["data"]["toolhost.toml"]
        .as_str()
        .expect("toolhost.toml");
    let host: toml::Table = host_file.parse().expect("toolhost.toml parses");
    let drain = host["host"]["drain-timeout-s"].as_integer().expect("drain");
    assert!(
        pod["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("grace")
            > drain
    );

    // Each path toolhost.toml names is on a mounted volume; the writable ones on an emptyDir.
    let mounts: Vec<(&str, &str, bool)> = container["volumeMounts"]
        .as_vec()
        .expect("mounts")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().expect("name"),
                m["mountPath"].as_str().expect("path"),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    let volume = |name: &str| {
        pod["volumes"]
            .as_vec()
            .expect("volumes")
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .cloned()
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    let mount_of = |path: &str| {
        mounts
            .iter()
            .find(|(_, at, _)| Path::new(path).starts_with(at))
            .unwrap_or_else(|| panic!("{path} is on no mounted volume: {mounts:?}"))
    };
    for key in ["cache-dir", "status-file"] {
        let path = host["host"][key].as_str().expect(key);
        let (name, _, read_only) = mount_of(path);
        assert!(!read_only, "{key} {path} is read-only");
        assert!(
            volume(name)["emptyDir"].as_hash().is_some(),
            "{key} is not on an emptyDir"
        );
    }
    let ensembles = host["host"]["ensembles"].as_str().expect("ensembles");
    let (name, _, _) = mount_of(ensembles);
    assert_eq!(
        volume(name)["configMap"]["name"].as_str(),
        Some("toolhost-ensembles")
    );
    let config_path = flag(container, "--config");
    let (name, _, _) = mount_of(config_path);
    assert_eq!(
        volume(name)["configMap"]["name"].as_str(),
        Some("toolhost-config")
    );

    // Every ensemble key is projected, to its path.
    let items: BTreeMap<String, String> = volume(name_of_ensembles(pod))["configMap"]["items"]
        .as_vec()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["key"].as_str().expect("key").into(),
                i["path"].as_str().expect("path").into(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = shipped_ensembles()
        .into_iter()
        .map(|(key, (path, _))| (key, path))
        .collect();
    assert_eq!(
        items, expected,
        "the volume's items must list every key of ensembles.yaml"
    );

    // The fleet's Redis is the one the kustomization ships: the variable `redis-env` names
    // holds its Service's address, and the Service selects its pod.
    let variable = host["fleet"]["redis-env"]
        .as_str()
        .expect("[fleet] redis-env");
    let redis_url = container["env"]
        .as_vec()
        .expect("env")
        .iter()
        .find(|e| e["name"].as_str() == Some(variable))
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("the container sets no {variable}"));
    let redis_service = resource("Service", "redis");
    let port = redis_service["spec"]["ports"][0]["port"]
        .as_i64()
        .expect("port");
    assert_eq!(redis_url, format!("redis://redis:{port}/0"));
    // The address each pod advertises: its own IP (the downward API) and the port it serves.
    let advertise_variable = host["fleet"]["advertise-env"]
        .as_str()
        .expect("[fleet] advertise-env");
    let env = container["env"].as_vec().expect("env");
    let value_of = |name: &str| {
        (env.iter().find(|e| e["name"].as_str() == Some(name)))
            .unwrap_or_else(|| panic!("the container sets no {name}"))
    };
    let served_port = flag(container, "--http")
        .rsplit(':')
        .next()
        .expect("a port");
    let advertise_template = value_of(advertise_variable)["value"]
        .as_str()
        .expect("value");
    assert_eq!(
        advertise_template,
        format!("http://$(POD_IP):{served_port}")
    );
    assert_eq!(
        value_of("POD_IP")["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("status.podIP")
    );
    let advertise = advertise_template.replace("$(POD_IP)", "10.0.0.7");
    assert!(
        resource("Service", "toolhost")["spec"]["sessionAffinity"].is_badvalue(),
        "the Service keeps no affinity"
    );
    let redis = resource("Deployment", "redis");
    let labels = &redis["spec"]["template"]["metadata"]["labels"];
    for (key, value) in redis_service["spec"]["selector"]
        .as_hash()
        .expect("selector")
    {
        assert_eq!(&labels[key.as_str().expect("key")], value);
    }
    let redis_container = &redis["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        redis_container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let redis_args: Vec<&str> = (redis_container["args"].as_vec().expect("args").iter())
        .filter_map(Yaml::as_str)
        .collect();
    assert!(
        redis_args.windows(2).any(|w| w == ["--appendonly", "no"]),
        "{redis_args:?}"
    );
    assert!(redis_args.contains(&"--maxmemory"), "{redis_args:?}");

    // The host file is one toolhost accepts (its paths exist only in the image).
    let fixture = Fixture::new();
    let file = fixture.root().join("toolhost.toml");
    std::fs::write(&file, host_file).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--config")
        .arg(&file)
        .args(["--ensembles"])
        .arg(fixture.ensembles())
        .args(["--cache-dir"])
        .arg(fixture.root().join("cache"))
        .args(["--status-file"])
        .arg(fixture.root().join("status.json"))
        .env(variable, redis_url)
        .env(advertise_variable, advertise)
        .arg("list")
        .output()
        .expect("toolhost runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The container's argument after `name` (`--config PATH`, `--http ADDRESS`).
fn flag<'a>(container: &'a Yaml, name: &str) -> &'a str {
    let args: Vec<&str> = (container["args"].as_vec().expect("args").iter())
        .filter_map(Yaml::as_str)
        .collect();
    let at = args.iter().position(|a| *a == name);
    at.and_then(|at| args.get(at + 1))
        .unwrap_or_else(|| panic!("the container runs without {name}"))
}

fn name_of_ensembles(pod: &Yaml) -> &str {
    pod["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .find(|v| v["configMap"]["name"].as_str() == Some("toolhost-ensembles"))
        .and_then(|v| v["name"].as_str())
        .expect("the ensembles volume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_and_ports_are_what_serve_serves() {
    let deployment = resource("Deployment", "toolhost");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let listen = flag(container, "--http");
    let port: i64 = listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    // Beyond loopback, serve needs a token: the variable it names comes from the Secret.
    let token = flag(container, "--token-env");
    let env = container["env"].as_vec().expect("env");
    assert!(
        env.iter().any(|e| e["name"].as_str() == Some(token)
            && e["valueFrom"]["secretKeyRef"].as_hash().is_some()),
        "{token} is not set from a Secret"
    );
    let ports = container["ports"].as_vec().expect("ports");
    let named = ports
        .iter()
        .find(|p| p["containerPort"].as_i64() == Some(port))
        .expect("the --http port is a container port");
    let name = named["name"].as_str().expect("a named port");

    let fixture = Fixture::new();
    fixture.write_echo();
    let server = HttpServer::start(&fixture, &[], &[]);
    let base = server.url.trim_end_matches("/mcp").to_string();
    let client = reqwest::Client::new();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        let target = &get["port"];
        assert!(
            target.as_str() == Some(name) || target.as_i64() == Some(port),
            "{probe} probes another port"
        );
        let path = get["path"].as_str().expect("a path");
        let status = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("probe")
            .status();
        assert_eq!(status.as_u16(), 200, "{probe} {path}");
    }

    let service = resource("Service", "toolhost");
    let selector = service["spec"]["selector"].as_hash().expect("selector");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in selector {
        assert_eq!(
            &labels[key.as_str().expect("key")],
            value,
            "the Service selects the pods"
        );
    }
    let target = &service["spec"]["ports"][0]["targetPort"];
    assert!(target.as_str() == Some(name) || target.as_i64() == Some(port));
}
