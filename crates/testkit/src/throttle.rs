//! A TCP proxy that forwards to one upstream and limits one direction to a
//! rate shared by every connection through it: a slow download link to
//! storage (an S3 endpoint at a few hundred kilobytes a second) for tests
//! of what weir does while a restore takes long, or a slow upload link for
//! tests of checkpoints that take longer than a transaction may stay open.
//! The other direction goes through at full speed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running proxy; it stops when dropped (connections it accepted end
/// with their peers).
pub struct Throttle {
    /// `127.0.0.1:<port>` to connect to instead of the upstream.
    pub addr: String,
    stop: Arc<AtomicBool>,
    budget: Arc<Mutex<Budget>>,
}

/// Bytes let through so far, one budget for every connection's answers.
struct Budget {
    rate: u64,
    started: Instant,
    sent: u64,
}

impl Budget {
    /// Waits until `n` more bytes fit in the rate.
    fn take(budget: &Mutex<Budget>, n: usize) {
        let wait = {
            let mut b = budget.lock().unwrap();
            let due = Duration::from_secs_f64(b.sent as f64 / b.rate as f64);
            if due < b.started.elapsed() {
                // Idle since: the link does not save up for a burst.
                b.started = Instant::now();
                b.sent = 0;
            }
            b.sent += n as u64;
            let due = Duration::from_secs_f64(b.sent as f64 / b.rate as f64);
            due.saturating_sub(b.started.elapsed())
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

impl Throttle {
    /// Forwards connections to `upstream` (`host:port`), its answers at
    /// `bytes_per_sec`.
    pub fn downloads(upstream: &str, bytes_per_sec: u64) -> Throttle {
        Self::start(upstream, bytes_per_sec, false)
    }

    /// Forwards connections to `upstream` (`host:port`), what the clients
    /// send (requests, uploaded bodies) at `bytes_per_sec`.
    pub fn uploads(upstream: &str, bytes_per_sec: u64) -> Throttle {
        Self::start(upstream, bytes_per_sec, true)
    }

    fn start(upstream: &str, bytes_per_sec: u64, uploads: bool) -> Throttle {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the throttle's port");
        let addr = listener.local_addr().unwrap().to_string();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let budget = Arc::new(Mutex::new(Budget {
            rate: bytes_per_sec,
            started: Instant::now(),
            sent: 0,
        }));
        let upstream = upstream.to_string();
        let stopping = stop.clone();
        let shared = budget.clone();
        std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        let (up_from, up_to) =
                            (client.try_clone().unwrap(), server.try_clone().unwrap());
                        let (up, down) = if uploads {
                            (Some(budget.clone()), None)
                        } else {
                            (None, Some(budget.clone()))
                        };
                        std::thread::spawn(move || pipe(up_from, up_to, up.as_deref()));
                        std::thread::spawn(move || pipe(server, client, down.as_deref()));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => return,
                }
            }
        });
        Throttle {
            addr,
            stop,
            budget: shared,
        }
    }

    /// Changes the rate for every connection from now on.
    pub fn set_rate(&self, bytes_per_sec: u64) {
        let mut b = self.budget.lock().unwrap();
        b.rate = bytes_per_sec;
        b.started = Instant::now();
        b.sent = 0;
    }

    /// `http://<addr>`, for an endpoint setting.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, budget: Option<&Mutex<Budget>>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(budget) = budget {
            Budget::take(budget, n);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
