//! A TCP proxy between a replication source and its destination that really breaks the
//! network: it cuts connections (closes every open one and refuses new ones), stalls them
//! (accepts, forwards nothing), slows them (a byte rate per direction), and can be pointed
//! at another destination (a restarted server on a new port).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Open connections are closed; new ones are closed at once.
    Cut,
    /// Bytes stop flowing (connections stay open).
    Stall,
    /// At most this many bytes per second in each direction of each connection.
    Slow(u64),
}

pub struct Proxy {
    addr: String,
    target: Arc<Mutex<String>>,
    mode: watch::Sender<Mode>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port, forwarding to `target` (`host:port`); runs on the
    /// calling test's tokio runtime.
    pub fn start(target: &str) -> Proxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap().to_string();
        let listener = TcpListener::from_std(std_listener).unwrap();
        let target = Arc::new(Mutex::new(target.to_string()));
        let (mode, rx) = watch::channel(Mode::Pass);
        let t = target.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let rx = rx.clone();
                let to = t.lock().unwrap().clone();
                tokio::spawn(handle(client, to, rx));
            }
        });
        Proxy {
            addr,
            target,
            mode,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_string();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Open connections end with the cut.
        self.mode.send_replace(Mode::Cut);
    }
}

async fn handle(client: TcpStream, target: String, mut mode: watch::Receiver<Mode>) {
    let cut = *mode.borrow() == Mode::Cut;
    if cut {
        return; // dropped: closed at once
    }
    let Ok(server) = TcpStream::connect(&target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, mode.clone());
    let down = pump(sr, cw, mode.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = async { loop {
            let cut = *mode.borrow_and_update() == Mode::Cut;
            if cut || mode.changed().await.is_err() { break; }
        } } => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        // Wait while stalled; stop when cut.
        loop {
            let m = *mode.borrow_and_update();
            match m {
                Mode::Cut => return,
                Mode::Stall => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
                _ => break,
            }
        }
        let current = *mode.borrow();
        let limit = match current {
            Mode::Slow(rate) => ((rate / 10).max(1) as usize).min(buf.len()),
            _ => buf.len(),
        };
        let n = match from.read(&mut buf[..limit]).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        let slow = matches!(*mode.borrow(), Mode::Slow(_));
        if slow {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
