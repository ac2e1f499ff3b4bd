//! A real OCI registry for the tests and benchmarks: Debian's `docker-registry` (the CNCF
//! distribution registry, which `scripts/test-tools.sh` installs) on 127.0.0.1, on a port the
//! OS picks, optionally behind HTTP basic authentication. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct LocalRegistry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub address: String,
}

impl LocalRegistry {
    /// Starts a registry storing under `dir`. With `Some((user, password))`, every request
    /// needs basic authentication (an htpasswd file made by Apache's `htpasswd`, bcrypt).
    pub fn start(dir: &Path, auth: Option<(&str, &str)>) -> Self {
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  \
             delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  secret: toolhost-tests\n",
            dir.join("data").display()
        );
        if let Some((user, password)) = auth {
            let made = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd (apache2-utils) runs; scripts/test-tools.sh installs it");
            assert!(made.status.success(), "htpasswd failed");
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, &made.stdout).expect("write htpasswd");
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: toolhost-tests\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config).expect("write registry config");
        let program = if Path::new("/usr/bin/docker-registry").exists() {
            "/usr/bin/docker-registry"
        } else {
            "docker-registry"
        };
        let mut child = Command::new(program)
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker-registry runs; scripts/test-tools.sh installs it");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let address = loop {
            let line = lines
                .next()
                .expect("the registry said where it listens")
                .expect("stderr line");
            if let Some(at) = line.find("listening on ") {
                let rest = &line[at + "listening on ".len()..];
                break rest
                    .split(|c: char| c == '"' || c.is_whitespace())
                    .next()
                    .expect("address")
                    .to_string();
            }
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        LocalRegistry { child, address }
    }

    /// `oci://<address>/<repository_and_tag>`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.address)
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
