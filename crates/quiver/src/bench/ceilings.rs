//! The ceilings the Flight numbers are read against: loopback TCP and memcpy.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{MemcpyArgs, TcpArgs, gbps};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// Streams bytes over a loopback TCP connection for `args.seconds` and reports
/// what the receiver got.
pub(super) fn tcp(args: &TcpArgs) -> Result {
    let write_size = usize::try_from(args.write_size.0)?.max(1);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        let (mut socket, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let mut started = None;
        loop {
            let n = socket.read(&mut buf)?;
            if n == 0 {
                break;
            }
            started.get_or_insert_with(Instant::now);
            total += n as u64;
        }
        let seconds = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        Ok((total, seconds))
    });
    let mut socket = TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let chunk = vec![7u8; write_size];
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    while Instant::now() < deadline {
        socket.write_all(&chunk)?;
    }
    drop(socket);
    let (bytes, seconds) = receiver.join().map_err(|_| "receiver thread panicked")??;
    println!(
        "{}",
        json!({"ceiling": "tcp", "write_size": write_size, "bytes": bytes, "seconds": seconds, "gbps": gbps(bytes, seconds)})
    );
    Ok(())
}

/// Copies `args.bytes` into freshly mapped pages (each page faulted in on first
/// touch) and then again into the same, now warm, pages.
pub(super) fn memcpy(args: &MemcpyArgs) -> Result {
    let len = usize::try_from(args.bytes.0)?;
    let src = vec![1u8; len];
    let started = Instant::now();
    let mut dst: Vec<u8> = Vec::with_capacity(len);
    dst.extend_from_slice(&src);
    let fresh = started.elapsed().as_secs_f64();
    std::hint::black_box(&dst);
    let started = Instant::now();
    dst.copy_from_slice(&src);
    let warm = started.elapsed().as_secs_f64();
    std::hint::black_box(&dst);
    let bytes = len as u64;
    println!(
        "{}",
        json!({"ceiling": "memcpy_fresh", "bytes": bytes, "seconds": fresh, "gbps": gbps(bytes, fresh)})
    );
    println!(
        "{}",
        json!({"ceiling": "memcpy_warm", "bytes": bytes, "seconds": warm, "gbps": gbps(bytes, warm)})
    );
    Ok(())
}
