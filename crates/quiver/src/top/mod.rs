//! `quiver top`: a live view of a server (tables, memory, RPC rates, the
//! slowest RPCs), redrawn every interval from its Prometheus metrics.

mod exposition;
mod view;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::cli::TopArgs;
use exposition::Scrape;

/// Longest wait for one scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `quiver top` until Ctrl-C (or, with `--once`, for one interval).
pub(crate) async fn run(args: TopArgs) -> Result<(), Box<dyn std::error::Error>> {
    let uri: http::Uri = args
        .metrics
        .parse()
        .map_err(|e| format!("--metrics {}: {e}", args.metrics))?;
    let source = uri.to_string();
    let interval = Duration::try_from_secs_f64(args.interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100))
        .ok_or("--interval: at least 0.1 seconds")?;
    let mut before = scrape(&uri).await?;
    let mut at = Instant::now();
    if args.once {
        tokio::time::sleep(interval).await;
        let now = scrape(&uri).await?;
        print!(
            "{}",
            view::render(&source, &before, &now, at.elapsed().as_secs_f64())
        );
        return Ok(());
    }
    let screen = Screen::enter()?;
    let mut ticks = tokio::time::interval(interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let frame = match scrape(&uri).await {
            Ok(now) => {
                let frame = view::render(&source, &before, &now, at.elapsed().as_secs_f64());
                before = now;
                at = Instant::now();
                frame
            }
            Err(e) => format!("quiver top  {source}\n\ncannot read the metrics: {e}\n"),
        };
        screen.draw(&frame)?;
    }
    drop(screen);
    Ok(())
}

/// The terminal's alternate screen, left (and the cursor shown) when dropped.
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Self> {
        let mut out = std::io::stdout().lock();
        out.write_all(b"\x1b[?1049h\x1b[?25l")?;
        out.flush()?;
        Ok(Self)
    }

    fn draw(&self, frame: &str) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(b"\x1b[H\x1b[2J")?;
        // Raw mode is off: lines need a carriage return only where the
        // terminal does not add one; "\r\n" is right either way.
        out.write_all(frame.replace('\n', "\r\n").as_bytes())?;
        out.write_all(b"\r\n(Ctrl-C to quit)")?;
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
    }
}

/// One GET of the metrics page, parsed.
async fn scrape(uri: &http::Uri) -> Result<Scrape, Box<dyn std::error::Error>> {
    let fetch = async {
        let authority = uri
            .authority()
            .ok_or("the metrics URL needs a host and port: http://HOST:PORT/metrics")?
            .clone();
        if uri.scheme_str().is_some_and(|s| s != "http") {
            return Err("the metrics URL must be http://".into());
        }
        let port = authority.port_u16().unwrap_or(80);
        let stream = TcpStream::connect((authority.host(), port)).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let path = uri.path_and_query().map_or("/metrics", |p| p.as_str());
        let path = if path == "/" { "/metrics" } else { path };
        let request = http::Request::get(path)
            .header(http::header::HOST, authority.as_str())
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            return Err(format!("{uri}: HTTP {status}").into());
        }
        let text = std::str::from_utf8(&body)?;
        Ok::<_, Box<dyn std::error::Error>>(Scrape::parse(text)?)
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fetch)
        .await
        .map_err(|_| format!("{uri}: no answer in {} s", SCRAPE_TIMEOUT.as_secs()))?
}
