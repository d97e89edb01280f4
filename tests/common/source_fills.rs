//! Synthetic fills shared by the broker source tests (`fills_kafka.rs`,
//! `fills_nats.rs`): a reproducible RNG, fills over a few accounts and
//! symbols, and the positions they must add up to; and the parts of their
//! crash tests that do not depend on the broker (a private copy of the
//! binary, the SIGKILL loop, the final run stopped with SIGTERM).

// Each test file uses part of this.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use tickgate::fills::store::Store;

/// `pid_nanos`: with a prefix, a name no other test (or earlier run) uses.
pub fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// Small deterministic PRNG (xorshift64*), so failures are reproducible.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[derive(Clone, Debug)]
pub struct TestFill {
    pub event_id: String,
    pub deal_id: String,
    pub account: String,
    pub symbol: String,
    pub buy: bool,
    pub qty: Decimal,
    pub price: Decimal,
}

impl TestFill {
    pub fn json(&self) -> String {
        format!(
            r#"{{"kind":"FILL","event_id":"{}","deal_id":"{}","account":"{}","symbol":"{}","side":"{}","qty":"{}","price":"{}","exec_time":"2026-11-30T08:00:00.000001Z"}}"#,
            self.event_id,
            self.deal_id,
            self.account,
            self.symbol,
            if self.buy { "BUY" } else { "SELL" },
            self.qty,
            self.price
        )
    }

    /// A BUST of this fill, with its own event id.
    pub fn bust_json(&self, event_id: &str) -> String {
        format!(
            r#"{{"kind":"BUST","event_id":"{event_id}","deal_id":"{}","account":"{}","exec_time":"2026-11-30T08:05:00Z"}}"#,
            self.deal_id, self.account
        )
    }

    pub fn signed(&self) -> Decimal {
        if self.buy {
            self.qty
        } else {
            -self.qty
        }
    }
}

/// `n` distinct fills over four accounts and three symbols.
pub fn make_fills(rng: &mut Rng, prefix: &str, n: usize) -> Vec<TestFill> {
    let accounts = ["ACC-1", "ACC-2", "ACC-3", "ACC-4"];
    let symbols = ["EURUSD", "USDJPY", "XAUUSD"];
    (0..n)
        .map(|i| TestFill {
            event_id: format!("{prefix}E{i}"),
            deal_id: format!("{prefix}D{i}"),
            account: accounts[rng.below(4) as usize].into(),
            symbol: symbols[rng.below(3) as usize].into(),
            buy: rng.below(2) == 0,
            // 0.01 .. 100.00, exact decimals.
            qty: Decimal::new(1 + rng.below(10_000) as i64, 2),
            price: Decimal::new(100_000 + rng.below(20_000) as i64, 5),
        })
        .collect()
}

/// The signed quantity per (account, symbol) of `fills`, flat positions
/// left out (as in [`actual_qty`]).
pub fn expected_qty<'a>(
    fills: impl IntoIterator<Item = &'a TestFill>,
) -> BTreeMap<(String, String), Decimal> {
    let mut m = BTreeMap::new();
    for f in fills {
        *m.entry((f.account.clone(), f.symbol.clone()))
            .or_insert(Decimal::ZERO) += f.signed();
    }
    m.into_iter().filter(|(_, q)| !q.is_zero()).collect()
}

/// The store's non-flat positions' quantities.
pub async fn actual_qty(store: &Store) -> BTreeMap<(String, String), Decimal> {
    store
        .positions(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| !p.position.qty.is_zero())
        .map(|p| ((p.account, p.symbol), p.position.qty))
        .collect()
}

/// A counter summed over label sets.
pub fn counter_sum(v: &prometheus::IntCounterVec, labels: &[&[&str]]) -> u64 {
    labels.iter().map(|l| v.with_label_values(l).get()).sum()
}

/// The fills' JSON with `repeats` repeats, each inserted somewhere after
/// its original.
pub fn with_repeats(rng: &mut Rng, fills: &[TestFill], repeats: usize) -> Vec<Vec<u8>> {
    let mut messages: Vec<Vec<u8>> = fills.iter().map(|f| f.json().into_bytes()).collect();
    for _ in 0..repeats {
        let i = rng.below(messages.len() as u64) as usize;
        let dup = messages[i].clone();
        let at = i + 1 + rng.below((messages.len() - i) as u64) as usize;
        messages.insert(at.min(messages.len()), dup);
    }
    messages
}

/// A private copy of the tickgate binary, checked to have the subcommand
/// `args` (`["fills", "consume"]`): the target directory may be shared with
/// other checkouts whose builds replace target/debug/tickgate.
pub fn private_binary(args: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("tickgate");
    std::fs::copy(env!("CARGO_BIN_EXE_tickgate"), &bin).unwrap();
    let help = Command::new(&bin)
        .args(args)
        .arg("--help")
        .output()
        .expect("run tickgate");
    assert!(
        help.status.success(),
        "{} has no `{}` (replaced by another build?)",
        env!("CARGO_BIN_EXE_tickgate"),
        args.join(" ")
    );
    (dir, bin)
}

/// Starts `cmd` with `RUST_LOG=rust_log`, its stderr appended to `log`.
pub fn spawn_logged(mut cmd: Command, log: &Path, rust_log: &str) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    cmd.env("RUST_LOG", rust_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn tickgate")
}

/// `kills` runs of `spawn()`, each SIGKILLed after 50-300 ms (short enough
/// that the runs do not drain the work on a quiet machine: with 100-650 ms
/// only 11-12 of 20 kills found work left). A run that exits by itself
/// fails the test with its log. Returns how many kills left work behind
/// (`work_left()` after each).
pub async fn kill_repeatedly(
    kills: usize,
    rng: &mut Rng,
    log: &Path,
    mut spawn: impl FnMut() -> Child,
    mut work_left: impl AsyncFnMut() -> bool,
) -> usize {
    let mut with_work_left = 0;
    for _ in 0..kills {
        let mut child = spawn();
        tokio::time::sleep(Duration::from_millis(50 + rng.below(250))).await;
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "tickgate exited by itself ({status}); log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if work_left().await {
            with_work_left += 1;
        }
    }
    with_work_left
}

/// The final run of a crash test: once it has logged that it is consuming
/// (its signal handler is set), `drained()` waits for the work to be done;
/// then SIGTERM, and the run must exit successfully.
pub async fn drain_and_stop(mut child: Child, log: &Path, drained: impl AsyncFnOnce()) {
    let t0 = Instant::now();
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains("consuming")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "final run never started consuming"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drained().await;
    // SAFETY: a plain signal to our own child, which has not been waited for.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "tickgate exit status {status}");
}
