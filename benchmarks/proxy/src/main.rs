//! A TCP proxy that makes an HTTP server on 127.0.0.1 behave like a remote store, for
//! benchmarks/remote_read.py. Standard library only.
//!
//!     proxy LISTEN UPSTREAM --rtt-ms N --mbps M [--tail FRACTION:MS] [--seed S] [--stats FILE]
//!     proxy 127.0.0.1:0 127.0.0.1:8000 --rtt-ms 20 --mbps 50 --tail 0.02:1000
//!
//! - A request is the client's bytes that arrive first on a connection or after the server
//!   has answered (so an HTTP keep-alive connection's requests are counted one by one); each
//!   waits one round trip (RTT) before it is forwarded upstream. A FRACTION of them, drawn
//!   by a seeded generator (splitmix64), wait MS more: a store's slow tail.
//! - Each connection's responses are paced to M MB/s (10^6 bytes) by a token bucket (64 KiB
//!   of burst): the proxy sleeps once per forwarded block, never per byte. M = 0: no limit.
//! - Counters: requests, connections (accepted), open and peak open connections, bytes each
//!   way, requests given the tail. A line `stats` sent to the control port (printed at start)
//!   answers them as one JSON line; `reset` answers them too, then sets the peak to the
//!   connections open now. With --stats FILE they are also rewritten to FILE (atomically, by
//!   a rename) when they changed, at most every 100 ms, and at exit.
//! - Binds 127.0.0.1 only; prints `listening ADDR control ADDR` on stdout once it is ready
//!   (LISTEN may give port 0); exits with status 0 on SIGTERM or SIGINT.
//!
//! A thread per direction per connection, blocking I/O with 128 KiB buffers, 256 KiB
//! stacks, two descriptors: several hundred connections cost a few hundred MB of address
//! space and little CPU.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::SeqCst); // async-signal-safe: a store and nothing else
}

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;
const BUF: usize = 128 * 1024;
const BURST: f64 = 64.0 * 1024.0;

struct Config {
    rtt: Duration,
    rate: f64, // bytes per second per connection; 0: unpaced
    tail_fraction: f64,
    tail: Duration,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    connections: AtomicU64,
    open: AtomicU64,
    peak_open: AtomicU64,
    bytes_down: AtomicU64,
    bytes_up: AtomicU64,
    tail_requests: AtomicU64,
    changes: AtomicU64,
    draws: AtomicU64, // the generator's state: seed + k * golden gamma
}

impl Stats {
    fn json(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::SeqCst);
        format!(
            "{{\"requests\": {}, \"connections\": {}, \"open\": {}, \"peak_open\": {}, \
             \"bytes_down\": {}, \"bytes_up\": {}, \"tail_requests\": {}}}",
            g(&self.requests),
            g(&self.connections),
            g(&self.open),
            g(&self.peak_open),
            g(&self.bytes_down),
            g(&self.bytes_up),
            g(&self.tail_requests)
        )
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// A uniform draw in [0, 1) (splitmix64: one step of the shared sequence per draw).
    fn draw(&self) -> f64 {
        let mut z = self.draws.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Paces one connection's responses: `rate` bytes a second, `BURST` bytes of credit.
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Bucket {
        Bucket { rate, tokens: BURST, last: Instant::now() }
    }

    /// Waits until `n` more bytes may go out (the debt is carried to the next block).
    fn take(&mut self, n: usize) {
        if self.rate <= 0.0 {
            return;
        }
        let now = Instant::now();
        let earned = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(BURST) - n as f64;
        self.last = now;
        if self.tokens < 0.0 {
            thread::sleep(Duration::from_secs_f64(-self.tokens / self.rate));
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: proxy LISTEN UPSTREAM --rtt-ms N --mbps M [--tail FRACTION:MS] [--seed S] \
         [--stats FILE]"
    );
    std::process::exit(2);
}

fn parse<T: std::str::FromStr>(what: &str, s: Option<&String>) -> T {
    match s.map(|s| s.parse::<T>()) {
        Some(Ok(v)) => v,
        _ => {
            eprintln!("proxy: {what} needs a number");
            usage()
        }
    }
}

fn millis(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut positional, mut rtt_ms, mut mbps, mut tail, mut seed, mut stats_file) =
        (Vec::new(), None, None, None, 0x5EED_u64, None);
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1);
        match args[i].as_str() {
            "--rtt-ms" => rtt_ms = Some(parse::<f64>("--rtt-ms", value)),
            "--mbps" => mbps = Some(parse::<f64>("--mbps", value)),
            "--seed" => seed = parse::<u64>("--seed", value),
            "--tail" => tail = Some(value.cloned().unwrap_or_else(|| usage())),
            "--stats" => stats_file = Some(value.cloned().unwrap_or_else(|| usage())),
            "-h" | "--help" => usage(),
            a if a.starts_with("--") => {
                eprintln!("proxy: unknown option {a}");
                usage()
            }
            _ => {
                positional.push(args[i].clone());
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    if positional.len() != 2 || rtt_ms.is_none() || mbps.is_none() {
        usage();
    }
    let (tail_fraction, tail_ms) = match &tail {
        Some(t) => match t.split_once(':').map(|(f, ms)| (f.parse::<f64>(), ms.parse::<f64>())) {
            Some((Ok(f), Ok(ms))) if (0.0..=1.0).contains(&f) => (f, ms),
            _ => {
                eprintln!("proxy: --tail is FRACTION:MS, e.g. 0.02:1000");
                usage()
            }
        },
        None => (0.0, 0.0),
    };
    let config = Arc::new(Config {
        rtt: millis(rtt_ms.unwrap()),
        rate: mbps.unwrap() * 1e6,
        tail_fraction,
        tail: millis(tail_ms),
    });
    let listen: SocketAddr = positional[0].parse().unwrap_or_else(|_| {
        eprintln!("proxy: LISTEN is 127.0.0.1:PORT");
        usage()
    });
    if listen.ip().to_string() != "127.0.0.1" {
        eprintln!("proxy: binds 127.0.0.1 only, not {}", listen.ip());
        std::process::exit(2);
    }
    let upstream = positional[1].clone();
    let listener = TcpListener::bind(listen).expect("proxy: bind LISTEN");
    let control = TcpListener::bind("127.0.0.1:0").expect("proxy: bind the control port");
    let stats = Arc::new(Stats::default());
    stats.draws.store(seed, Ordering::SeqCst);
    unsafe {
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
    }

    {
        let stats = stats.clone();
        thread::spawn(move || watch(&stats, stats_file));
    }
    let control_addr = control.local_addr().expect("proxy: the control port");
    {
        let stats = stats.clone();
        thread::spawn(move || {
            for conn in control.incoming().flatten() {
                answer_control(conn, &stats);
            }
        });
    }
    println!("listening {} control {}", listener.local_addr().unwrap(), control_addr);
    std::io::stdout().flush().ok();

    for client in listener.incoming() {
        let client = match client {
            Ok(c) => c,
            Err(_) => {
                thread::sleep(Duration::from_millis(10)); // e.g. out of descriptors: not a spin
                continue;
            }
        };
        let (upstream, config, shared) = (upstream.clone(), config.clone(), stats.clone());
        stats.connections.fetch_add(1, Ordering::SeqCst);
        let open = stats.open.fetch_add(1, Ordering::SeqCst) + 1;
        stats.peak_open.fetch_max(open, Ordering::SeqCst);
        stats.changed();
        let spawned = thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                serve(client, &upstream, &config, &shared);
                shared.open.fetch_sub(1, Ordering::SeqCst);
                shared.changed();
            });
        if spawned.is_err() {
            eprintln!("proxy: could not start a thread for a connection");
            stats.open.fetch_sub(1, Ordering::SeqCst); // (the client is closed as it drops)
        }
    }
}

fn answer_control(conn: TcpStream, stats: &Stats) {
    let mut line = String::new();
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let reply = match line.trim() {
        "stats" => stats.json(),
        "reset" => {
            let before = stats.json();
            stats.peak_open.store(stats.open.load(Ordering::SeqCst), Ordering::SeqCst);
            before
        }
        other => format!("{{\"error\": \"unknown command {:?}\"}}", other),
    };
    let mut conn = conn;
    let _ = conn.write_all(format!("{reply}\n").as_bytes());
}

/// Writes the stats file when the counters changed (at most every 100 ms); on SIGTERM or
/// SIGINT writes it a last time and ends the process with status 0.
fn watch(stats: &Stats, file: Option<String>) {
    let write = |path: &str| {
        let tmp = format!("{path}.tmp");
        if std::fs::write(&tmp, format!("{}\n", stats.json())).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    };
    let mut written = u64::MAX;
    let mut last = Instant::now() - Duration::from_secs(1);
    loop {
        thread::sleep(Duration::from_millis(10));
        if STOP.load(Ordering::SeqCst) {
            if let Some(path) = &file {
                write(path);
            }
            std::process::exit(0);
        }
        let now = stats.changes.load(Ordering::Relaxed);
        if now != written && last.elapsed() >= Duration::from_millis(100) {
            if let Some(path) = &file {
                write(path);
            }
            written = now;
            last = Instant::now();
        }
    }
}

/// One client connection: client -> server on this thread (each request held one RTT),
/// server -> client on another (paced).
fn serve(client: TcpStream, upstream: &str, config: &Config, stats: &Arc<Stats>) {
    let server = match TcpStream::connect(upstream) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("proxy: cannot reach {upstream}: {e}");
            return;
        }
    };
    client.set_nodelay(true).ok();
    server.set_nodelay(true).ok();
    // each socket shared by the two threads (&TcpStream reads and writes): two descriptors a
    // connection, not four
    let (client, server) = (Arc::new(client), Arc::new(server));
    // true when the server has sent bytes since the client last sent: the client's next
    // bytes start a request (true at first: the connection's first bytes are one)
    let answered = Arc::new(AtomicBool::new(true));
    let down = {
        let (answered, stats, rate) = (answered.clone(), stats.clone(), config.rate);
        let (client, server) = (client.clone(), server.clone());
        thread::Builder::new().stack_size(256 * 1024).spawn(move || {
            let mut buf = vec![0u8; BUF];
            let mut bucket = Bucket::new(rate);
            loop {
                let n = match (&*server).read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                answered.store(true, Ordering::SeqCst);
                bucket.take(n);
                if (&*client).write_all(&buf[..n]).is_err() {
                    break;
                }
                stats.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
            }
            // the server is done (or the client gone): end both sides, so the other
            // thread's read returns
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        })
    };
    let down = match down {
        Ok(d) => d,
        Err(_) => return,
    };
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match (&*client).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if answered.swap(false, Ordering::SeqCst) {
            stats.requests.fetch_add(1, Ordering::SeqCst);
            let mut wait = config.rtt;
            if config.tail_fraction > 0.0 && stats.draw() < config.tail_fraction {
                wait += config.tail;
                stats.tail_requests.fetch_add(1, Ordering::SeqCst);
            }
            stats.changed();
            thread::sleep(wait);
        }
        if (&*server).write_all(&buf[..n]).is_err() {
            break;
        }
        stats.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = server.shutdown(Shutdown::Write);
    let _ = down.join();
}
