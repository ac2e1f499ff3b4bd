//! Network patterns: what `network = [...]` grants, and how a request is checked against it.
//!
//! A pattern is `[scheme://]host:port`:
//! - `scheme` is `https` or `http`; without one, both are allowed to that host and port;
//! - `host` is a name (`en.wikipedia.org`), a wildcard over subdomains (`*.example.org`, which
//!   matches `a.example.org` and `a.b.example.org` but not `example.org`), an IP address
//!   (`127.0.0.1`, `[::1]`) or an address range (`10.0.0.0/8`, `[fd00::/8]`);
//! - `port` is required (`:443`).
//!
//! A name may resolve to a loopback, private, link-local or otherwise internal address; such
//! an address is refused unless a pattern grants that address (or its range) itself, so a
//! granted public name cannot be pointed at the host's own network (SSRF through DNS).

use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which schemes a pattern allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemeRule {
    Any,
    Http,
    Https,
}

/// The host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostRule {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name ending in `.<suffix>`.
    Subdomains(String),
    /// An address range (a single address is a /32 or /128).
    Range { network: IpAddr, prefix: u8 },
}

/// One granted `[scheme://]host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct NetPattern {
    pub scheme: SchemeRule,
    pub host: HostRule,
    pub port: u16,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// A lowercase name or an IP address, without brackets.
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        match self.host.parse::<Ipv6Addr>() {
            Ok(_) => write!(f, "{scheme}://[{}]:{}", self.host, self.port),
            Err(_) => write!(f, "{scheme}://{}:{}", self.host, self.port),
        }
    }
}

impl NetPattern {
    /// Parses a pattern, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<NetPattern, String> {
        let hint = "network patterns look like \"host:port\", \"https://host:port\", \
                    \"*.example.org:443\", \"127.0.0.1:8080\" or \"10.0.0.0/8:443\"";
        let (scheme, rest) = match text.split_once("://") {
            Some(("https", rest)) => (SchemeRule::Https, rest),
            Some(("http", rest)) => (SchemeRule::Http, rest),
            Some((other, _)) => {
                return Err(format!(
                    "scheme `{other}` is not one toolhost grants (http or https)"
                ));
            }
            None => (SchemeRule::Any, text),
        };
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} has no port; {hint}"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{text:?} has no valid port (1-65535); {hint}"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = parse_host(host).map_err(|e| format!("{text:?}: {e}; {hint}"))?;
        Ok(NetPattern { scheme, host, port })
    }

    fn scheme_allows(&self, https: bool) -> bool {
        match self.scheme {
            SchemeRule::Any => true,
            SchemeRule::Https => https,
            SchemeRule::Http => !https,
        }
    }

    /// Whether a request to `target` is granted (its name or literal address; the addresses a
    /// name resolves to are checked separately with [`NetPattern::grants_address`]).
    pub fn matches(&self, target: &Target) -> bool {
        if self.port != target.port || !self.scheme_allows(target.https) {
            return false;
        }
        match (&self.host, target.host.parse::<IpAddr>()) {
            (HostRule::Name(name), Err(_)) => *name == target.host,
            (HostRule::Subdomains(suffix), Err(_)) => target
                .host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostRule::Range { network, prefix }, Ok(ip)) => in_range(ip, *network, *prefix),
            _ => false,
        }
    }

    /// Whether this pattern grants connecting to `address` for `target` (an address range
    /// pattern with the target's port and scheme).
    pub fn grants_address(&self, target: &Target, address: IpAddr) -> bool {
        match self.host {
            HostRule::Range { network, prefix } => {
                self.port == target.port
                    && self.scheme_allows(target.https)
                    && in_range(address, network, prefix)
            }
            _ => false,
        }
    }

    /// Whether everything `other` allows, this allows too (an invoker's capability within an
    /// ensemble's grant).
    pub fn covers(&self, other: &NetPattern) -> bool {
        let scheme = self.scheme == SchemeRule::Any || self.scheme == other.scheme;
        let host = match (&self.host, &other.host) {
            (HostRule::Name(a), HostRule::Name(b)) => a == b,
            (HostRule::Subdomains(a), HostRule::Name(b) | HostRule::Subdomains(b)) => {
                b.strip_suffix(a.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                    || matches!(&other.host, HostRule::Subdomains(b) if a == b)
            }
            (
                HostRule::Range { network, prefix },
                HostRule::Range {
                    network: inner,
                    prefix: inner_prefix,
                },
            ) => inner_prefix >= prefix && in_range(*inner, *network, *prefix),
            _ => false,
        };
        scheme && host && self.port == other.port
    }
}

impl fmt::Display for NetPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            SchemeRule::Any => {}
            SchemeRule::Http => f.write_str("http://")?,
            SchemeRule::Https => f.write_str("https://")?,
        }
        match &self.host {
            HostRule::Name(name) => f.write_str(name)?,
            HostRule::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            HostRule::Range { network, prefix } => {
                let full = if network.is_ipv4() { 32 } else { 128 };
                match (network, *prefix == full) {
                    (IpAddr::V6(ip), true) => write!(f, "[{ip}]")?,
                    (IpAddr::V6(ip), false) => write!(f, "[{ip}/{prefix}]")?,
                    (ip, true) => write!(f, "{ip}")?,
                    (ip, false) => write!(f, "{ip}/{prefix}")?,
                }
            }
        }
        write!(f, ":{}", self.port)
    }
}

fn parse_host(host: &str) -> Result<HostRule, String> {
    if let Some((address, prefix)) = host.split_once('/') {
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("`{address}` is not an IP address"))?;
        let full = if network.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= full)
            .ok_or_else(|| format!("`/{prefix}` is not a prefix length (0-{full})"))?;
        return Ok(HostRule::Range { network, prefix });
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        return Ok(HostRule::Range {
            network: ip,
            prefix,
        });
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(format!("`{host}` is not a host name"));
    }
    let name = name.to_ascii_lowercase();
    Ok(if wildcard {
        HostRule::Subdomains(name)
    } else {
        HostRule::Name(name)
    })
}

fn in_range(address: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (canonical(address), canonical(network)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// What kind of internal address `address` is, or `None` for a public one.
pub fn internal_kind(address: IpAddr) -> Option<&'static str> {
    match canonical(address) {
        IpAddr::V4(ip) => {
            let [a, b, ..] = ip.octets();
            if ip.is_loopback() {
                Some("loopback")
            } else if ip.is_private() {
                Some("private")
            } else if ip.is_link_local() {
                Some("link-local")
            } else if ip.is_unspecified() || a == 0 {
                Some("unspecified")
            } else if a == 100 && (64..128).contains(&b) {
                Some("shared (carrier-grade NAT)")
            } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
                Some("broadcast, multicast or reserved")
            } else if ip == Ipv4Addr::new(192, 0, 0, 170) || ip == Ipv4Addr::new(192, 0, 0, 171) {
                Some("special-purpose")
            } else {
                None
            }
        }
        IpAddr::V6(ip) => {
            let first = ip.segments()[0];
            if ip.is_loopback() {
                Some("loopback")
            } else if ip.is_unspecified() {
                Some("unspecified")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private (unique local)")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if ip.is_multicast() {
                Some("multicast")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(https: bool, host: &str, port: u16) -> Target {
        Target {
            https,
            host: host.into(),
            port,
        }
    }

    fn p(text: &str) -> NetPattern {
        NetPattern::parse(text).unwrap()
    }

    #[test]
    fn patterns_parse_and_print_back() {
        for text in [
            "en.wikipedia.org:443",
            "https://api.example.org:443",
            "http://127.0.0.1:8080",
            "*.example.org:443",
            "10.0.0.0/8:443",
            "[::1]:80",
            "[fd00::/8]:443",
        ] {
            assert_eq!(p(text).to_string(), text);
        }
        for bad in [
            "example.org",
            "example.org:0",
            "example.org:http",
            "ftp://example.org:21",
            "*.:443",
            "exa mple.org:443",
            "10.0.0.0/33:443",
            "-bad.org:443",
        ] {
            assert!(NetPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_match_name_wildcard_address_port_and_scheme() {
        assert!(p("Example.org:443").matches(&target(true, "example.org", 443)));
        assert!(p("example.org:443").matches(&target(false, "example.org", 443)));
        assert!(!p("example.org:443").matches(&target(true, "example.org", 8443)));
        assert!(!p("https://example.org:443").matches(&target(false, "example.org", 443)));
        assert!(!p("example.org:443").matches(&target(true, "evil-example.org", 443)));
        assert!(p("*.example.org:443").matches(&target(true, "a.b.example.org", 443)));
        assert!(!p("*.example.org:443").matches(&target(true, "example.org", 443)));
        assert!(!p("*.example.org:443").matches(&target(true, "aexample.org", 443)));
        assert!(p("10.0.0.0/8:80").matches(&target(false, "10.1.2.3", 80)));
        assert!(!p("10.0.0.0/8:80").matches(&target(false, "11.1.2.3", 80)));
        assert!(p("[::1]:80").matches(&target(false, "::1", 80)));
        // A name pattern never matches an address, nor an address pattern a name.
        assert!(!p("localhost:80").matches(&target(false, "127.0.0.1", 80)));
        assert!(!p("127.0.0.1:80").matches(&target(false, "localhost", 80)));
    }

    #[test]
    fn grants_cover_what_lies_within_them() {
        assert!(p("*.example.org:443").covers(&p("https://a.example.org:443")));
        assert!(p("*.example.org:443").covers(&p("*.a.example.org:443")));
        assert!(p("*.example.org:443").covers(&p("*.example.org:443")));
        assert!(!p("*.example.org:443").covers(&p("example.org:443")));
        assert!(!p("https://a.org:443").covers(&p("a.org:443")));
        assert!(p("10.0.0.0/8:443").covers(&p("10.2.0.0/16:443")));
        assert!(!p("10.2.0.0/16:443").covers(&p("10.0.0.0/8:443")));
        assert!(!p("a.org:443").covers(&p("a.org:80")));
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.1.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                internal_kind(internal.parse().unwrap()).is_some(),
                "{internal}"
            );
        }
        for public in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(internal_kind(public.parse().unwrap()).is_none(), "{public}");
        }
        let granted = p("127.0.0.0/8:80");
        assert!(granted.grants_address(
            &target(false, "localhost", 80),
            "127.0.0.1".parse().unwrap()
        ));
        assert!(!granted.grants_address(
            &target(false, "localhost", 81),
            "127.0.0.1".parse().unwrap()
        ));
    }
}
