//! The reliable lane inside the daemon: the fills store (SQLite or
//! PostgreSQL), its HTTP API, the NATS JetStream consumer when configured,
//! and the retention sweeper, all on the daemon's runtime, with their
//! metrics in the daemon's registry. The lane's logic is `crate::fills`;
//! this file only starts and stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use prometheus::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fills::config::FillsConfig;
use crate::fills::http::{self, HttpOptions, HttpState};
use crate::fills::metrics::FillsMetrics;
use crate::fills::nats::{self, NatsMetrics, NatsSettings};
use crate::fills::retention::{self, RetentionPolicy};
use crate::fills::store::{system_clock, Store};

pub struct FillsLane {
    stop: watch::Sender<bool>,
    http: JoinHandle<std::io::Result<()>>,
    unix: Option<(JoinHandle<std::io::Result<()>>, std::path::PathBuf)>,
    consumer: Option<JoinHandle<anyhow::Result<()>>>,
    sweeper: JoinHandle<()>,
    pub http_addr: SocketAddr,
    pub db: String,
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

impl FillsLane {
    /// Opens the store (running its migrations), binds the HTTP address
    /// and starts the tasks. Errors name what failed.
    pub async fn start(
        cfg: &FillsConfig,
        registry: &Registry,
        limited: &prometheus::IntCounterVec,
    ) -> anyhow::Result<FillsLane> {
        let metrics = FillsMetrics::new(registry).context("registering the fills metrics")?;
        let store = Store::open(cfg, metrics.clone())
            .await
            .with_context(|| format!("opening the fills store {}", cfg.db))?;
        let options = HttpOptions::from_config(cfg)?;
        let state = HttpState::new(
            Arc::new(store.clone()),
            &cfg.http.clients,
            options,
            registry,
        )?;
        let listener = tokio::net::TcpListener::bind(&cfg.http.listen)
            .await
            .with_context(|| format!("binding the fills HTTP address {}", cfg.http.listen))?;
        let http_addr = listener.local_addr()?;
        let (stop, rx) = watch::channel(false);
        // The limits (timeouts, connection cap, rate per client token)
        // in front of the API: crate::http_limits.
        let tokens: Vec<String> = cfg.http.clients.iter().map(|c| c.token.clone()).collect();
        let limit_stats = crate::http_limits::LimitStats::of(limited, "fills");
        let app = crate::http_limits::limit_requests(
            http::router(state),
            &cfg.http.limits,
            &tokens,
            cfg.http.max_body_bytes,
            limit_stats.clone(),
        );
        // The same API on a Unix socket, with its own slots; the
        // per-client cap counts each peer uid there (docs/operations.md).
        let unix = match &cfg.http.socket {
            Some(path) => {
                let std_listener =
                    crate::gate::server::bind_socket(path, cfg.http.socket_mode, "fills API")?;
                std_listener
                    .set_nonblocking(true)
                    .with_context(|| format!("setting {} non-blocking", path.display()))?;
                let listener = tokio::net::UnixListener::from_std(std_listener)
                    .with_context(|| format!("registering {}", path.display()))?;
                Some(tokio::spawn(crate::http_limits::serve(
                    listener,
                    app.clone(),
                    cfg.http.limits.clone(),
                    crate::http_limits::LimitStats::of(limited, "fills_unix"),
                    stopped(rx.clone()),
                )))
            }
            None => None,
        };
        let http = tokio::spawn(crate::http_limits::serve(
            listener,
            app,
            cfg.http.limits.clone(),
            limit_stats,
            stopped(rx.clone()),
        ));
        let consumer = match NatsSettings::from_fills_config(cfg) {
            Some(settings) => {
                let m = NatsMetrics::new(registry, metrics.clone())
                    .context("registering the fills NATS metrics")?;
                Some(tokio::spawn(nats::run_consumer(
                    settings,
                    store.clone(),
                    m,
                    stopped(rx.clone()),
                )))
            }
            None => None,
        };
        let sweeper = tokio::spawn(retention::run_sweeper(
            store,
            RetentionPolicy::from_config(cfg),
            cfg.retention.interval,
            system_clock(),
        ));
        tracing::info!(http = %http_addr, socket = ?cfg.http.socket, db = cfg.db.as_str(), nats = consumer.is_some(), "fills lane started");
        Ok(FillsLane {
            stop,
            http,
            unix: unix.zip(cfg.http.socket.clone()),
            consumer,
            sweeper,
            http_addr,
            db: cfg.db.clone(),
        })
    }

    /// Stops taking work and lets batches in flight commit (the HTTP
    /// server's graceful shutdown; the consumer acks what it committed).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.sweeper.abort();
        if let Err(e) = self.http.await.unwrap_or(Ok(())) {
            tracing::error!(error = %e, "fills HTTP server failed");
        }
        if let Some((task, path)) = self.unix {
            if let Err(e) = task.await.unwrap_or(Ok(())) {
                tracing::error!(error = %e, "fills HTTP server on the Unix socket failed");
            }
            let _ = std::fs::remove_file(&path);
        }
        if let Some(c) = self.consumer {
            if let Ok(Err(e)) = c.await {
                tracing::error!(error = %crate::util::errors::chain(&e), "fills NATS consumer failed");
            }
        }
    }
}
