//! PostgreSQL store (work in progress: API only).

use super::{
    AnswerFn, DeadLetterRow, Extra, HeldBust, HttpOutcome, PositionRow, StoreOptions, StoredAnswer,
    SweepTable,
};
use crate::fills::metrics::FillsMetrics;
use crate::fills::model::{EventOutcome, Parsed};

#[derive(Clone)]
pub struct PgStore {
    metrics: FillsMetrics,
}

impl PgStore {
    pub async fn connect(
        _url: &str,
        _opts: StoreOptions,
        metrics: FillsMetrics,
    ) -> anyhow::Result<PgStore> {
        let _ = metrics;
        anyhow::bail!("PostgreSQL store not implemented yet")
    }
    pub fn metrics(&self) -> &FillsMetrics {
        &self.metrics
    }
    pub async fn apply_events(
        &self,
        _source: &str,
        _events: Vec<Parsed>,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        anyhow::bail!("todo")
    }
    pub(crate) async fn apply_batch(
        &self,
        _source: &str,
        _events: Vec<Parsed>,
        _extra: Extra,
    ) -> anyhow::Result<Vec<EventOutcome>> {
        anyhow::bail!("todo")
    }
    pub async fn apply_http_batch(
        &self,
        _c: &str,
        _k: &str,
        _h: &str,
        _e: Vec<Parsed>,
        _b: AnswerFn,
    ) -> anyhow::Result<HttpOutcome> {
        anyhow::bail!("todo")
    }
    pub async fn get_stored_answer(
        &self,
        _c: &str,
        _k: &str,
    ) -> anyhow::Result<Option<StoredAnswer>> {
        anyhow::bail!("todo")
    }
    pub async fn consumer_position(&self, _s: &str, _c: &str) -> anyhow::Result<Option<u64>> {
        anyhow::bail!("todo")
    }
    pub async fn positions(&self, _a: Option<Vec<String>>) -> anyhow::Result<Vec<PositionRow>> {
        anyhow::bail!("todo")
    }
    pub async fn held_busts(&self) -> anyhow::Result<Vec<HeldBust>> {
        anyhow::bail!("todo")
    }
    pub async fn dead_letters(&self) -> anyhow::Result<Vec<DeadLetterRow>> {
        anyhow::bail!("todo")
    }
    pub async fn delete_expired_chunk(
        &self,
        _t: SweepTable,
        _c: i64,
        _l: usize,
    ) -> anyhow::Result<usize> {
        anyhow::bail!("todo")
    }
    pub async fn count_rows(&self, _t: SweepTable) -> anyhow::Result<u64> {
        anyhow::bail!("todo")
    }
}
