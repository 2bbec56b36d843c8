//! Name resolution for the `http` import: every name is resolved once, here,
//! and the connector connects to exactly the addresses returned, so a name
//! cannot be checked as one address and connected as another (DNS rebinding).
//! Unless a manifest opts in (`http-private-addresses`), addresses that are
//! not globally routable (loopback, private, link-local including the cloud
//! metadata address 169.254.169.254, unique-local, unspecified, ...) are
//! refused. A URL with a literal IP is never resolved: the manifest's
//! `http-hosts` must name that IP itself, which is the explicit allowance.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// A resolver for hyper-util's `HttpConnector`.
#[derive(Clone, Copy)]
pub(crate) struct CheckedResolver {
    /// Let names resolve to non-global addresses too.
    pub(crate) allow_private: bool,
}

impl tower_service::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let allow_private = self.allow_private;
        Box::pin(async move {
            // Port 0: the connector sets the URL's port on each address.
            let all: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let usable: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| allow_private || is_global(a.ip()))
                .collect();
            if usable.is_empty() && !all.is_empty() {
                let shown: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{name} resolves only to non-public addresses ({}); allow them with http-private-addresses = true in the manifest, or name the IP in http-hosts",
                        shown.join(", ")
                    ),
                ));
            }
            Ok(usable.into_iter())
        })
    }
}

/// Whether `ip` is globally routable (what std's unstable `is_global` means).
pub(crate) fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_global_v4(v4);
            }
            let s = v6.segments();
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link local fe80::/10
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64 (embeds IPv4)
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard 100::/64
                || (s[..6] == [0; 6])) // IPv4-compatible (deprecated) and ::/96
        }
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_unspecified()
        || o[0] == 0 // "this network" 0/8
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16, the cloud metadata address included
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // shared 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240) // reserved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_global_addresses_are_recognised() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_global(bad.parse().unwrap()), "{bad}");
        }
        for good in ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert!(is_global(good.parse().unwrap()), "{good}");
        }
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused_unless_allowed() {
        use tower_service::Service;
        let name: Name = "localhost".parse().unwrap();
        let e = CheckedResolver {
            allow_private: false,
        }
        .call(name.clone())
        .await
        .unwrap_err();
        assert!(e.to_string().contains("non-public"), "{e}");
        let addrs: Vec<_> = CheckedResolver {
            allow_private: true,
        }
        .call(name)
        .await
        .unwrap()
        .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
