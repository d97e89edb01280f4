//! The metrics endpoint over loopback HTTP: `/metrics` passes
//! `promtool check metrics`, `/healthz` and `/readyz` follow the daemon's state.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tickgate::gate::server::GateStats;
use tickgate::metrics::{self, FeedStats, LineStats, Metrics};

/// A minimal HTTP/1.1 GET: (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status: u16 = raw[9..12].parse().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    // axum answers small bodies with Content-Length; decode chunked just in case.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (len, after) = rest.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(len.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, body)
}

fn serve(m: Arc<Metrics>) -> (SocketAddr, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(metrics::bind("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(metrics::serve(
        listener,
        m,
        tickgate::http_limits::HttpLimits::metrics_default(),
        tickgate::http_limits::LimitStats::unregistered(),
        std::future::pending(),
    ));
    (addr, rt)
}

fn populated() -> Arc<Metrics> {
    let m = Metrics::new(
        &[("fx", vec!["A", "B"]), ("eq", vec!["A"])],
        Arc::new(GateStats::default()),
    )
    .unwrap();
    m.feeds[0].stats.store(&FeedStats {
        channel_gaps: 2,
        channel_messages_lost: 9,
        ticks_lost: 5,
        symbols: 12,
        symbols_suspect: 1,
        ..Default::default()
    });
    m.feeds[0].line(0).store(&LineStats {
        packets: 100,
        messages: 250,
        bytes: 14_000,
        last_datagram_ns: 1_764_489_601_123_000_000,
        ..Default::default()
    });
    m.feeds[0]
        .clock_offset_ns
        .store(2_500_000, Ordering::Relaxed);
    let mut rec = m.feeds[0].apply_latency.recorder();
    for v in [800, 3_000, 12_000, 70_000, 9_000_000] {
        rec.record(v, 0);
    }
    rec.flush();
    m.gate.ok.store(1, Ordering::Relaxed);
    m.gate.reject.store(1, Ordering::Relaxed);
    m.gate.rejects_by_reason[4].store(1, Ordering::Relaxed);
    m.gate.service.small_recorder().record(450);
    Arc::new(m)
}

#[test]
fn metrics_endpoint_passes_promtool() {
    let m = populated();
    let (addr, _rt) = serve(Arc::clone(&m));
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("tickgate_feed_channel_messages_lost_total{feed=\"fx\"} 9"));
    assert!(body.contains("tickgate_feed_apply_latency_seconds_count{feed=\"fx\"} 5"));
    assert!(body.contains("tickgate_gate_service_duration_seconds_count 1"));
    assert!(!body.contains("symbol="), "no per-symbol labels");

    let promtool = std::path::Path::new("/usr/bin/promtool");
    let promtool = if promtool.exists() {
        promtool.to_path_buf()
    } else {
        match which("promtool") {
            Some(p) => p,
            None => {
                println!("skipped: promtool is not installed");
                return;
            }
        }
    };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics: {report}\n--- exposition ---\n{body}"
    );
}

#[test]
fn health_and_readiness_follow_the_daemon() {
    let m = populated();
    let (addr, _rt) = serve(Arc::clone(&m));
    assert_eq!(get(addr, "/healthz").0, 200);
    assert_eq!(get(addr, "/readyz"), (503, "starting\n".to_string()));
    m.health.ready.store(true, Ordering::Relaxed);
    assert_eq!(get(addr, "/readyz").0, 200);
    assert!(get(addr, "/metrics").1.contains("tickgate_ready 1"));
    m.health.stalled.store(true, Ordering::Relaxed);
    assert_eq!(get(addr, "/healthz").0, 503);
    assert_eq!(get(addr, "/readyz").0, 503);
    m.health.stalled.store(false, Ordering::Relaxed);
    m.health.stopping.store(true, Ordering::Relaxed);
    assert_eq!(get(addr, "/readyz"), (503, "stopping\n".to_string()));
    assert!(get(addr, "/metrics").1.contains("tickgate_ready 0"));
    assert_eq!(get(addr, "/nope").0, 404);
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
}

/// Every metric the shipped Grafana dashboard queries is exported (the
/// dashboard cannot drift from the names).
#[test]
fn dashboard_queries_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/grafana-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exposition = populated().render();
    let mut exprs = Vec::new();
    collect_exprs(&dash, &mut exprs);
    assert!(exprs.len() > 20, "the dashboard has its queries");
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("tickgate_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                exposition.contains(&format!("\n{name}{{"))
                    || exposition.contains(&format!("\n{name} ")),
                "{name} (in {e}) is not exported"
            );
            rest = &rest[i + name.len()..];
        }
    }
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}
