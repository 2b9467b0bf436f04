//! A connection's socket with a send-progress timeout (`--send-timeout`): an answer the
//! client takes no bytes of for that long ends its connection.
//!
//! Bug "stalled readers hold streams forever" (findings s12, F2): a client that stopped
//! reading a query answer kept its stream slot (and the answer's queued pieces, mapped
//! block windows included) for as long as it stayed connected: nothing timed out a
//! response the socket would not take. 64 such connections refused every other tokenless
//! client's queries (429 `too_many_streams`) indefinitely.
//!
//! The watch is on the socket, under TLS and hyper, so it covers every answer the same way
//! (query streams, live tails, MCAP exports, record reads, the ReductStore API's batch
//! reads): while a write finds the socket full, a timer runs; when it fires and the client
//! acknowledged no byte since it was armed (the socket's send queue did not shrink), the
//! write fails, hyper closes the connection and drops the response, which frees its
//! stream slot and everything its answer held. A write that goes through disarms it. A
//! client reading slowly but steadily keeps acknowledging bytes, so it is never cut, even
//! while the kernel keeps the server's writes waiting (it wakes a writer only once half of
//! a full send buffer is free, which takes a slow reader much longer than the timeout).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// A TCP connection whose writes fail once the client takes nothing for `timeout`.
pub struct SendWatch {
    tcp: TcpStream,
    /// `Duration::ZERO`: no watch.
    timeout: Duration,
    /// Armed while a write waits on a full socket.
    stall: Option<Stall>,
}

/// A write waiting on a full socket: when `timer` fires, the client has had `timeout` to
/// acknowledge bytes of `queued` (the send queue when it was armed, or last looked at).
struct Stall {
    timer: Pin<Box<Sleep>>,
    queued: Option<u64>,
}

impl SendWatch {
    pub fn new(tcp: TcpStream, timeout: Duration) -> SendWatch {
        SendWatch {
            tcp,
            timeout,
            stall: None,
        }
    }

    /// What a write that went through (or failed) answers: the watch disarmed.
    fn went(&mut self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if r.is_ready() {
            self.stall = None;
        }
        r
    }

    /// A write found the socket full: `Pending` (the timer armed, or still running, or
    /// re-armed because the client acknowledged bytes since), or the timeout's error.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.timeout.is_zero() {
            return Poll::Pending;
        }
        let (tcp, timeout) = (&self.tcp, self.timeout);
        let stall = self.stall.get_or_insert_with(|| Stall {
            timer: Box::pin(tokio::time::sleep(timeout)),
            queued: send_queue(tcp),
        });
        loop {
            if stall.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = send_queue(tcp);
            match (stall.queued, now) {
                // The client took bytes: a slow reader, not a stalled one.
                (Some(before), Some(now)) if now < before => {
                    stall.queued = Some(now);
                    let at = tokio::time::Instant::now() + timeout;
                    stall.timer.as_mut().reset(at);
                }
                _ => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the client took no bytes of its answer for {} s (--send-timeout): connection closed",
                            timeout.as_secs_f64()
                        ),
                    )))
                }
            }
        }
    }
}

/// Bytes written to the socket that the client has not acknowledged yet (sent or not):
/// it shrinks only as the client reads. `None` where the system does not say.
#[cfg(target_os = "linux")]
fn send_queue(tcp: &TcpStream) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ for a TCP socket) writes one int through the pointer,
    // which points at a live local; the descriptor is the open socket of `tcp`.
    let r = unsafe { libc::ioctl(tcp.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    (r == 0).then(|| u64::try_from(queued).ok()).flatten()
}

#[cfg(not(target_os = "linux"))]
fn send_queue(_tcp: &TcpStream) -> Option<u64> {
    None
}

impl AsyncRead for SendWatch {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendWatch {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_write(cx, buf) {
            Poll::Pending => this.stalled(cx),
            r => this.went(r),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.stalled(cx),
            r => this.went(r),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the server's side watched, the client's a plain socket.
    async fn pair(timeout: Duration) -> (SendWatch, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (SendWatch::new(server, timeout), client)
    }

    #[tokio::test]
    async fn a_write_the_client_never_takes_fails_after_the_timeout() {
        let (mut w, _client) = pair(Duration::from_millis(300)).await;
        let chunk = vec![1u8; 1 << 20];
        let started = std::time::Instant::now();
        let err = loop {
            match w.write_all(&chunk).await {
                Ok(()) => assert!(started.elapsed() < Duration::from_secs(20)),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("--send-timeout"), "{err}");
    }

    #[tokio::test]
    async fn a_client_reading_slowly_is_not_cut() {
        let (mut w, mut client) = pair(Duration::from_secs(1)).await;
        // Reads 64 KiB every 100 ms (far slower than the writer, far from stalled).
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            let mut total = 0usize;
            loop {
                match client.read(&mut buf).await.unwrap() {
                    0 => return total,
                    n => total += n,
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        // More than the socket buffers hold, for several timeouts' time.
        let chunk = vec![1u8; 1 << 20];
        let started = std::time::Instant::now();
        let mut sent = 0usize;
        while started.elapsed() < Duration::from_secs(3) {
            w.write_all(&chunk).await.unwrap();
            sent += chunk.len();
        }
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), sent);
    }
}
