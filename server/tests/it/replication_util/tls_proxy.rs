//! A TLS-terminating proxy in front of a (plain HTTP) tsblob server, with a self-signed
//! certificate for 127.0.0.1 made by rcgen: what an https destination looks like to a
//! replication source, `tsblob cp` or the CLI.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// A certificate for `127.0.0.1` and `localhost`, self-signed: its PEM is what a client
/// trusts (`dst_ca`, `--ca`).
pub struct Cert {
    pub pem: String,
    der: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Cert {
    pub fn new() -> Cert {
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let c = rcgen::generate_simple_self_signed(names).unwrap();
        Cert {
            pem: c.cert.pem(),
            der: c.cert.der().clone(),
            key: c.signing_key.serialize_der(),
        }
    }
}

pub struct TlsProxy {
    addr: String,
    accept: tokio::task::JoinHandle<()>,
}

impl TlsProxy {
    /// Listens on a free loopback port; each TLS connection is forwarded, decrypted, to
    /// `target` (`host:port`).
    pub fn start(cert: &Cert, target: &str) -> TlsProxy {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone()));
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der.clone()], key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap().to_string();
        let listener = TcpListener::from_std(std_listener).unwrap();
        let target = target.to_string();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, target) = (acceptor.clone(), target.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to do.
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                });
            }
        });
        TlsProxy { addr, accept }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
