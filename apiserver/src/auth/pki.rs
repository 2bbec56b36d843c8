//! The server's credentials in its data directory: a self-signed CA, a serving
//! certificate signed by it (for 127.0.0.1, ::1 and localhost), a bearer token,
//! and the `kubeconfig` that carries all three to `kubectl` and `kube::Config`.
//! Existing files are reused, so a restart keeps every client's kubeconfig valid.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use base64::Engine;
use rand::Rng;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

pub struct Pki {
    pub(crate) dir: PathBuf,
    pub ca_pem: String,
    pub(crate) ca_key_pem: String,
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) token: String,
}

fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    std::io::Write::write_all(&mut f, contents.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

impl Pki {
    /// Loads `DIR/pki`, creating whatever is missing.
    pub fn load_or_create(data_dir: &Path) -> Result<Pki> {
        let dir = data_dir.join("pki");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca, ca_key, cert, key, token) = (
            dir.join("ca.crt"),
            dir.join("ca.key"),
            dir.join("apiserver.crt"),
            dir.join("apiserver.key"),
            dir.join("token"),
        );
        if !(ca.exists() && ca_key.exists()) {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, "wasmlet-ca");
            params.not_after = rcgen::date_time_ymd(2100, 1, 1);
            let cert = params.self_signed(&key)?;
            write_private(&ca_key, &key.serialize_pem())?;
            write_private(&ca, &cert.pem())?;
            let _ = fs::remove_file(cert_path(&dir));
        }
        let ca_pem = fs::read_to_string(&ca)?;
        let ca_key_pem = fs::read_to_string(&ca_key)?;
        if !(cert.exists() && key.exists()) {
            let (c, k) = sign_serving(&ca_pem, &ca_key_pem, &[])?;
            write_private(&key, &k)?;
            write_private(&cert, &c)?;
        }
        if !token.exists() {
            let bytes: [u8; 24] = rand::rng().random();
            let t: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            write_private(&token, &t)?;
        }
        Ok(Pki {
            cert_pem: fs::read_to_string(&cert)?,
            key_pem: fs::read_to_string(&key)?,
            token: fs::read_to_string(&token)?.trim().to_string(),
            ca_pem,
            ca_key_pem,
            dir,
        })
    }

    pub(crate) fn rustls_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        super::tls::server_config(&self.cert_pem, &self.key_pem, &self.ca_pem)
    }

    /// Writes `DIR/kubeconfig` (the admin's token) for the server at `addr`
    /// (atomically).
    pub(crate) fn write_kubeconfig(&self, data_dir: &Path, addr: SocketAddr) -> Result<PathBuf> {
        let user = format!("    token: {}\n", self.token);
        self.write_config(&data_dir.join("kubeconfig"), addr, "wasmlet-admin", &user)
    }

    /// Writes `path`, a kubeconfig authenticating with a client certificate
    /// this CA signs for `user` in `group` (upstream's x509 identities).
    pub fn write_identity_kubeconfig(
        &self,
        path: &Path,
        addr: SocketAddr,
        user: &str,
        group: Option<&str>,
    ) -> Result<PathBuf> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let (cert, key) = self.client_cert_in(user, group)?;
        let auth = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64.encode(cert),
            b64.encode(key)
        );
        self.write_config(path, addr, user, &auth)
    }

    fn write_config(
        &self,
        path: &Path,
        addr: SocketAddr,
        user: &str,
        auth: &str,
    ) -> Result<PathBuf> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let server = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => format!("https://127.0.0.1:{}", addr.port()),
            IpAddr::V4(ip) => format!("https://{ip}:{}", addr.port()),
            IpAddr::V6(ip) => format!("https://[{ip}]:{}", addr.port()),
        };
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: wasmlet\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: \"{user}\"\n  user:\n{auth}contexts:\n- name: wasmlet\n  context:\n    cluster: wasmlet\n    user: \"{user}\"\n    namespace: default\ncurrent-context: wasmlet\n",
            b64.encode(&self.ca_pem),
        );
        write_private(path, &config)?;
        Ok(path.to_path_buf())
    }

    /// A serving certificate for a node's kubelet endpoint (`name`, localhost,
    /// 127.0.0.1, ::1), signed by this CA.
    pub fn node_serving_cert(&self, name: &str) -> Result<(String, String)> {
        sign_serving(&self.ca_pem, &self.ca_key_pem, &[name])
    }

    /// A client certificate signed by this CA (for the kubelet API's callers).
    pub(crate) fn client_cert(&self, common_name: &str) -> Result<(String, String)> {
        self.client_cert_in(common_name, None)
    }

    /// A client certificate for `common_name` with `group` as its
    /// organization, signed by this CA (rcgen keeps one value per
    /// distinguished-name type, so one group).
    pub(crate) fn client_cert_in(
        &self,
        common_name: &str,
        group: Option<&str>,
    ) -> Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if let Some(g) = group {
            params.distinguished_name.push(DnType::OrganizationName, g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = Issuer::from_ca_cert_pem(&self.ca_pem, KeyPair::from_pem(&self.ca_key_pem)?)?;
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

impl Pki {
    /// Signs a client certificate request (PEM) with this CA, for the
    /// subject it names, valid from five minutes ago (clock skew, as
    /// upstream's signer backdates) for `valid_for`: what the signer of an
    /// approved CertificateSigningRequest issues. Returns the certificate's PEM.
    pub(crate) fn sign_client_request(
        &self,
        request_pem: &str,
        valid_for: std::time::Duration,
    ) -> Result<String> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(request_pem)?;
        let now = time::OffsetDateTime::now_utc();
        csr.params.not_before = now - time::Duration::minutes(5);
        csr.params.not_after = now + valid_for;
        csr.params.is_ca = IsCa::ExplicitNoCa;
        csr.params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        csr.params.subject_alt_names.clear();
        let issuer = Issuer::from_ca_cert_pem(&self.ca_pem, KeyPair::from_pem(&self.ca_key_pem)?)?;
        Ok(csr.signed_by(&issuer)?.pem())
    }
}

fn cert_path(dir: &Path) -> PathBuf {
    dir.join("apiserver.crt")
}

fn sign_serving(ca_pem: &str, ca_key_pem: &str, extra_names: &[&str]) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut names = vec!["localhost".to_string()];
    names.extend(extra_names.iter().map(|n| n.to_string()));
    let mut params = CertificateParams::new(names)?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    params
        .distinguished_name
        .push(DnType::CommonName, "wasmlet-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
    let issuer = Issuer::from_ca_cert_pem(ca_pem, KeyPair::from_pem(ca_key_pem)?)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}
