//! The lock-free state table: one writer per feed, any number of reader
//! threads (gate.md "Speed": readers never block the writer and never see a
//! half-written quote).
//!
//! - Each slot is a seqlock whose payload is stored as `AtomicU64` words, so
//!   a reader racing the writer reads atomics (no data race, no UB) and then
//!   throws the copy away if the sequence moved.
//! - The symbol index is fixed-capacity open addressing (linear probing)
//!   from a three-word key (`Symbol::words()`) to a slot. Only the writer inserts;
//!   it fills the slot first and publishes the bucket with Release, readers
//!   probe with Acquire. Nothing is ever removed, so a probe stops at the
//!   first empty bucket.
//! - Capacity is fixed at construction; nothing allocates afterwards.
//! - The writer never waits for anyone. A reader retries while a write is
//!   in progress (a few nanoseconds, unless the writer is descheduled in
//!   the middle of one; then the reader yields its CPU every 1024 tries).
//!
//! Capabilities are split by type: [`TableWriter`] (one, not `Clone`) and
//! [`TableReader`] (`Clone + Send + Sync`). [`seq_cell`] is the same
//! seqlock for a single value (the per-feed view).
//!
//! A table lives in [`Words`]: zeroed words on the heap, or a range of a
//! [`WordStore`] (the shared-memory file of `client`, whose mapping code
//! holds the only `unsafe`). Its word layout ([`TableLayout`]) is the same
//! in both, and is the byte layout docs/shm-layout.md describes.
//!
//! No `unsafe` here: values are packed into words by their own safe code
//! ([`Plain`]).

#![forbid(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// Plain data stored in the table as `u64` words. Packing is the type's
/// own safe code (no transmute), so a copy torn by a racing writer is
/// still just integers, and is thrown away by the seqlock anyway.
pub trait Plain: Copy + Send + Sync + 'static {
    /// Number of words (at most [`MAX_WORDS`], checked at compile time).
    const WORDS: usize;
    /// Writes the value into `out` (`WORDS` long).
    fn to_words(&self, out: &mut [u64]);
    /// Reads a value back from `words` (`WORDS` long).
    fn from_words(words: &[u64]) -> Self;
}

/// Largest payload of a slot, in words.
pub const MAX_WORDS: usize = 32;

/// Words of a key.
pub const KEY_WORDS: usize = crate::wire::SYMBOL_WORDS;
/// A table key: a symbol's words (`Symbol::words`).
pub type Key = [u64; KEY_WORDS];
/// Words of an index bucket: the key, then the tag (slot + 1, 0 empty).
pub const BUCKET_WORDS: usize = KEY_WORDS + 1;

impl<const N: usize> Plain for [u64; N] {
    const WORDS: usize = N;
    #[inline]
    fn to_words(&self, out: &mut [u64]) {
        out.copy_from_slice(self);
    }
    #[inline]
    fn from_words(words: &[u64]) -> Self {
        std::array::from_fn(|i| words[i])
    }
}

impl<const N: usize> Plain for [i64; N] {
    const WORDS: usize = N;
    #[inline]
    fn to_words(&self, out: &mut [u64]) {
        for (o, v) in out.iter_mut().zip(self) {
            *o = *v as u64;
        }
    }
    #[inline]
    fn from_words(words: &[u64]) -> Self {
        std::array::from_fn(|i| words[i] as i64)
    }
}

/// Words of payload of `T` (compile-time checked layout).
struct Layout<T>(PhantomData<T>);

impl<T: Plain> Layout<T> {
    const WORDS: usize = {
        assert!(
            T::WORDS <= MAX_WORDS,
            "Plain types are at most MAX_WORDS words"
        );
        T::WORDS
    };
    /// Slot stride in words: the sequence word plus the payload. Up to a
    /// cache line it is rounded to a power of two so that a slot never
    /// straddles two lines; above, to an even count (16-byte steps), which
    /// keeps memory low (a 72-byte view takes 80 bytes, not 128).
    const STRIDE: usize = {
        let n = Self::WORDS + 1;
        if n <= 8 {
            n.next_power_of_two()
        } else {
            n.div_ceil(2) * 2
        }
    };
}

/// Memory that atomic words live in, other than the heap: a shared
/// mapping. `words()` must return the same slice every time.
pub trait WordStore: Send + Sync + 'static {
    fn words(&self) -> &[AtomicU64];
}

#[derive(Clone)]
enum Store {
    Heap(Arc<[AtomicU64]>),
    Shared(Arc<dyn WordStore>),
}

/// A range of atomic words: on the heap (starting on a cache-line
/// boundary) or in a [`WordStore`]. Cloning shares the words.
#[derive(Clone)]
pub struct Words {
    store: Store,
    start: usize,
    len: usize,
}

impl Words {
    /// `len` zeroed words on the heap, starting on a cache line (the
    /// allocation has 7 spare words; the start is chosen inside it).
    pub fn heap(len: usize) -> Words {
        let words: Arc<[AtomicU64]> = (0..len + 7).map(|_| AtomicU64::new(0)).collect();
        let misalign = (words.as_ptr() as usize % 64) / 8;
        let start = (8 - misalign) % 8;
        Words {
            store: Store::Heap(words),
            start,
            len,
        }
    }

    /// All the words of a store.
    pub fn shared(store: Arc<dyn WordStore>) -> Words {
        let len = store.words().len();
        Words {
            store: Store::Shared(store),
            start: 0,
            len,
        }
    }

    /// Words `at..at + len` of this range; `None` when outside it.
    pub fn range(&self, at: usize, len: usize) -> Option<Words> {
        let end = at.checked_add(len)?;
        (end <= self.len).then(|| Words {
            store: self.store.clone(),
            start: self.start + at,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn slice(&self) -> &[AtomicU64] {
        let all: &[AtomicU64] = match &self.store {
            Store::Heap(w) => w,
            Store::Shared(s) => s.words(),
        };
        &all[self.start..self.start + self.len]
    }
}

impl fmt::Debug for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Words")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

/// Slot stride in words of a `T` cell (sequence word plus payload,
/// rounded; see the layout doc).
pub const fn stride<T: Plain>() -> usize {
    Layout::<T>::STRIDE
}

/// Where the parts of a table of `capacity` slots of `T` lie in its words
/// (offsets in words from the table's start; every part starts on a
/// 64-byte boundary of the table):
///
/// - `[0]`: the count of published slots (`len`), alone on its line;
/// - `slots_at`: `capacity` seqlock cells of `stride` words;
/// - `keys_at`: the key of each slot, `KEY_WORDS` words each;
/// - `buckets_at`: `buckets` index buckets `[key words..., slot + 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableLayout {
    pub capacity: u32,
    pub stride: usize,
    pub buckets: u64,
    pub slots_at: usize,
    pub keys_at: usize,
    pub buckets_at: usize,
    /// Words of the whole table (a multiple of 8).
    pub words: usize,
}

const fn round8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl TableLayout {
    /// The layout of a table of `capacity` (at most `u32::MAX - 1`).
    pub fn of<T: Plain>(capacity: u32) -> TableLayout {
        let capacity = capacity.min(u32::MAX - 1);
        let stride = Layout::<T>::STRIDE;
        let buckets = (capacity as u64 * 2).next_power_of_two().max(2);
        let slots_at = 8;
        let keys_at = slots_at + round8(capacity as usize * stride);
        let buckets_at = keys_at + round8(capacity as usize * KEY_WORDS);
        let words = round8(buckets_at + buckets as usize * BUCKET_WORDS);
        TableLayout {
            capacity,
            stride,
            buckets,
            slots_at,
            keys_at,
            buckets_at,
            words,
        }
    }
}

/// A table's words do not fit its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooSmall {
    pub needed: usize,
    pub got: usize,
}

impl fmt::Display for TooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "table region holds {} words, its layout needs {}",
            self.got, self.needed
        )
    }
}

impl std::error::Error for TooSmall {}

/// Seqlock write of one cell (`cell[0]` is the sequence, `cell[1..]` the
/// payload). Only one thread may write a given cell.
#[inline]
fn seq_write<T: Plain>(cell: &[AtomicU64], value: &T) {
    let w = Layout::<T>::WORDS;
    let mut buf = [0u64; MAX_WORDS];
    value.to_words(&mut buf[..w]);
    let cell = &cell[..=w];
    let seq = cell[0].load(Ordering::Relaxed);
    // Odd: a write is in progress; readers retry.
    cell[0].store(seq.wrapping_add(1), Ordering::Relaxed);
    // Orders the odd sequence before the payload stores (Boehm's seqlock
    // writer: a release fence after the first store).
    fence(Ordering::Release);
    for (word, v) in cell[1..].iter().zip(&buf[..w]) {
        word.store(*v, Ordering::Relaxed);
    }
    cell[0].store(seq.wrapping_add(2), Ordering::Release);
}

/// Seqlock read: a copy that the writer did not change while it was taken.
#[inline]
fn seq_read<T: Plain>(cell: &[AtomicU64]) -> T {
    loop {
        if let Ok((v, _)) = seq_read_within::<T>(cell, u32::MAX) {
            return v;
        }
    }
}

/// Seqlock read giving up after `tries` attempts (`Err(tries)`), for
/// memory another process writes (a writer that never finishes must not
/// hang the reader). `Ok` carries the value and the retries it took.
#[inline]
fn seq_read_within<T: Plain>(cell: &[AtomicU64], tries: u32) -> Result<(T, u32), u32> {
    let w = Layout::<T>::WORDS;
    let cell = &cell[..=w];
    let mut buf = [0u64; MAX_WORDS];
    let mut spins = 0u32;
    loop {
        let s1 = cell[0].load(Ordering::Acquire);
        if s1 & 1 == 0 {
            for (b, word) in buf[..w].iter_mut().zip(&cell[1..]) {
                *b = word.load(Ordering::Relaxed);
            }
            // Orders the payload loads before the second sequence load.
            fence(Ordering::Acquire);
            let s2 = cell[0].load(Ordering::Relaxed);
            if s1 == s2 {
                // The unchanged even sequence: all words come from one write.
                return Ok((T::from_words(&buf[..w]), spins));
            }
        }
        spins = spins.wrapping_add(1);
        if spins >= tries {
            return Err(spins);
        }
        if spins.is_multiple_of(1024) {
            // The writer was descheduled mid-write: let it run.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Read by the (only) writer of a cell: no concurrent write can exist.
#[inline]
fn owner_read<T: Plain>(cell: &[AtomicU64]) -> T {
    let w = Layout::<T>::WORDS;
    let mut buf = [0u64; MAX_WORDS];
    for (b, word) in buf[..w].iter_mut().zip(&cell[1..=w]) {
        *b = word.load(Ordering::Relaxed);
    }
    T::from_words(&buf[..w])
}

/// The table has no free slot for a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull {
    pub capacity: u32,
}

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "state table full: all {} symbol slots are in use (raise the feed's symbol capacity)",
            self.capacity
        )
    }
}

impl std::error::Error for TableFull {}

/// A shared table's index names a slot out of range or has no empty
/// bucket: not written by this code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("symbol index is corrupt")
    }
}

impl std::error::Error for Corrupt {}

/// A seqlock cell stayed mid-write (or kept changing) for every try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("state slot kept changing while read")
    }
}

impl std::error::Error for Busy {}

struct Inner<T> {
    capacity: u32,
    /// Slots published to readers (Release after the slot and its bucket).
    len: Words,
    /// `capacity` seqlock cells of `STRIDE` words.
    slots: Words,
    /// The key of each slot, for listing (written before `len` moves).
    slot_keys: Words,
    /// Index buckets: `[key words..., slot + 1]`; `slot + 1 == 0` is empty.
    buckets: Words,
    bucket_mask: u64,
    bucket_shift: u32,
    _t: PhantomData<fn() -> T>,
}

/// Outcome of a probe.
enum Probe {
    Found(u32),
    /// Absent; the empty bucket (word index) where it would go.
    Vacant(usize),
    /// No empty bucket in the whole index, or a bucket naming a slot out
    /// of range: impossible for a table this code wrote, possible in a
    /// corrupt shared file.
    Corrupt,
}

impl<T: Plain> Inner<T> {
    fn new(region: &Words, capacity: u32) -> Result<Inner<T>, TooSmall> {
        let l = TableLayout::of::<T>(capacity);
        let part = |at: usize, len: usize| {
            region.range(at, len).ok_or(TooSmall {
                needed: l.words,
                got: region.len(),
            })
        };
        let bits = l.buckets.trailing_zeros();
        Ok(Inner {
            capacity: l.capacity,
            len: part(0, 1)?,
            slots: part(l.slots_at, l.capacity as usize * l.stride)?,
            slot_keys: part(l.keys_at, l.capacity as usize * KEY_WORDS)?,
            buckets: part(l.buckets_at, l.buckets as usize * BUCKET_WORDS)?,
            bucket_mask: l.buckets - 1,
            // `>> 64` is not allowed; a table of 1 bucket pair uses bit 63.
            bucket_shift: 64 - bits.max(1),
            _t: PhantomData,
        })
    }

    #[inline]
    fn cell(&self, slot: u32) -> &[AtomicU64] {
        let s = Layout::<T>::STRIDE;
        let start = slot as usize * s;
        &self.slots.slice()[start..start + s]
    }

    #[inline]
    fn home(&self, key: &Key) -> u64 {
        // The top bits of the hash depend on every byte of the key.
        crate::wire::hash_words(*key) >> self.bucket_shift
    }

    /// Probes for `key`, at most once around the index. Always inlined:
    /// left to LLVM, whether the check inlined it changed with the code
    /// around the call, about 30 instructions a check either way
    /// (BENCHMARKS.md, "The one-feed check without the feeds' loop").
    #[inline(always)]
    fn probe(&self, key: &Key) -> Probe {
        let b = self.buckets.slice();
        let mut i = self.home(key);
        for _ in 0..=self.bucket_mask {
            let at = (i as usize) * BUCKET_WORDS;
            let tag = b[at + KEY_WORDS].load(Ordering::Acquire);
            if tag == 0 {
                return Probe::Vacant(at);
            }
            if key
                .iter()
                .zip(&b[at..at + KEY_WORDS])
                .all(|(k, w)| w.load(Ordering::Relaxed) == *k)
            {
                return match tag - 1 < self.capacity as u64 {
                    true => Probe::Found((tag - 1) as u32),
                    false => Probe::Corrupt,
                };
            }
            i = (i + 1) & self.bucket_mask;
        }
        Probe::Corrupt
    }

    /// The key stored for `slot` (below the capacity).
    #[inline]
    fn key_of(&self, slot: u32) -> Key {
        let at = slot as usize * KEY_WORDS;
        let w = &self.slot_keys.slice()[at..at + KEY_WORDS];
        std::array::from_fn(|i| w[i].load(Ordering::Relaxed))
    }

    /// Published slots, never more than the capacity.
    #[inline]
    fn published(&self) -> u32 {
        self.len.slice()[0]
            .load(Ordering::Acquire)
            .min(self.capacity as u64) as u32
    }
}

/// Creates a table for `capacity` keys (at most `u32::MAX - 1`) on the
/// heap.
///
/// Memory: `capacity` slots of `STRIDE` words and their keys, plus an
/// index of twice the capacity rounded up to a power of two (32 bytes a
/// bucket, load <= 0.5).
pub fn table<T: Plain>(capacity: u32) -> (TableWriter<T>, TableReader<T>) {
    let words = Words::heap(TableLayout::of::<T>(capacity).words);
    table_in(&words, capacity).expect("the heap region is sized by the layout")
}

/// Creates a table in `region` (zeroed, at least
/// `TableLayout::of::<T>(capacity).words` long): a shared mapping the
/// daemon publishes.
pub fn table_in<T: Plain>(
    region: &Words,
    capacity: u32,
) -> Result<(TableWriter<T>, TableReader<T>), TooSmall> {
    let inner = Arc::new(Inner::<T>::new(region, capacity)?);
    Ok((
        TableWriter {
            inner: inner.clone(),
            len: 0,
        },
        TableReader { inner },
    ))
}

/// A reader of a table another process writes in `region`. Every access
/// stays inside the region whatever its words say.
pub fn reader_in<T: Plain>(region: &Words, capacity: u32) -> Result<TableReader<T>, TooSmall> {
    Ok(TableReader {
        inner: Arc::new(Inner::<T>::new(region, capacity)?),
    })
}

/// The one writer of a table (the feed's thread). Not `Clone`.
pub struct TableWriter<T: Plain> {
    inner: Arc<Inner<T>>,
    len: u32,
}

impl<T: Plain> TableWriter<T> {
    /// The slot of `key`, if it was inserted.
    pub fn find(&self, key: &Key) -> Option<u32> {
        match self.inner.probe(key) {
            Probe::Found(slot) => Some(slot),
            _ => None,
        }
    }

    /// Writes `value` under `key`, inserting the key on first use. Returns
    /// the slot; `TableFull` (nothing changed) when the key is new and every
    /// slot is taken.
    pub fn upsert(&mut self, key: &Key, value: &T) -> Result<u32, TableFull> {
        match self.inner.probe(key) {
            Probe::Found(slot) => {
                seq_write(self.inner.cell(slot), value);
                Ok(slot)
            }
            Probe::Vacant(bucket) => self.insert_at(bucket, key, value),
            Probe::Corrupt => Err(self.full()),
        }
    }

    /// Inserts a new key with its first value; an existing key keeps its
    /// value (and slot).
    pub fn insert(&mut self, key: &Key, value: &T) -> Result<u32, TableFull> {
        match self.inner.probe(key) {
            Probe::Found(slot) => Ok(slot),
            Probe::Vacant(bucket) => self.insert_at(bucket, key, value),
            Probe::Corrupt => Err(self.full()),
        }
    }

    fn full(&self) -> TableFull {
        TableFull {
            capacity: self.inner.capacity,
        }
    }

    fn insert_at(&mut self, bucket: usize, key: &Key, value: &T) -> Result<u32, TableFull> {
        let inner = &*self.inner;
        if self.len >= inner.capacity {
            return Err(self.full());
        }
        let slot = self.len;
        // The slot first, then the bucket (Release): a reader that finds the
        // key sees at least this first value.
        seq_write(inner.cell(slot), value);
        let at = slot as usize * KEY_WORDS;
        for (word, k) in inner.slot_keys.slice()[at..at + KEY_WORDS].iter().zip(key) {
            word.store(*k, Ordering::Relaxed);
        }
        let b = inner.buckets.slice();
        for (word, k) in b[bucket..bucket + KEY_WORDS].iter().zip(key) {
            word.store(*k, Ordering::Relaxed);
        }
        b[bucket + KEY_WORDS].store(slot as u64 + 1, Ordering::Release);
        self.len = slot + 1;
        inner.len.slice()[0].store(self.len as u64, Ordering::Release);
        Ok(slot)
    }

    /// Overwrites the value of an inserted slot.
    ///
    /// # Panics
    /// When `slot` was not returned by `insert`/`upsert`/`find` (a bug).
    #[inline]
    pub fn write(&mut self, slot: u32, value: &T) {
        assert!(slot < self.len, "slot {slot} was never inserted");
        seq_write(self.inner.cell(slot), value);
    }

    /// Prefetch hint for the cell of `slot` (ignored when not inserted).
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        if slot < self.len {
            let cell = self.inner.cell(slot);
            super::prefetch::prefetch(&cell[0]);
            super::prefetch::prefetch(&cell[cell.len() - 1]);
        }
    }

    /// The current value of an inserted slot.
    pub fn read(&self, slot: u32) -> T {
        assert!(slot < self.len, "slot {slot} was never inserted");
        owner_read(self.inner.cell(slot))
    }

    /// The key stored in `slot` (`None` when not inserted).
    pub fn key_at(&self, slot: u32) -> Option<Key> {
        (slot < self.len).then(|| self.inner.key_of(slot))
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    pub fn reader(&self) -> TableReader<T> {
        TableReader {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Plain> fmt::Debug for TableWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableWriter")
            .field("len", &self.len)
            .field("capacity", &self.inner.capacity)
            .finish()
    }
}

/// A reader of a table: cheap to clone, shareable between threads, never
/// blocks the writer.
pub struct TableReader<T: Plain> {
    inner: Arc<Inner<T>>,
}

impl<T: Plain> Clone for TableReader<T> {
    fn clone(&self) -> Self {
        TableReader {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Plain> fmt::Debug for TableReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableReader")
            .field("len", &self.len())
            .field("capacity", &self.inner.capacity)
            .finish()
    }
}

impl<T: Plain> TableReader<T> {
    /// The slot of `key`, if the writer has published it.
    #[inline]
    pub fn find(&self, key: &Key) -> Option<u32> {
        self.try_find(key).ok().flatten()
    }

    /// The slot of `key`; `Err(Corrupt)` when the index is not one this
    /// code could have written (a shared file written by someone else).
    #[inline]
    pub fn try_find(&self, key: &Key) -> Result<Option<u32>, Corrupt> {
        match self.inner.probe(key) {
            Probe::Found(slot) => Ok(Some(slot)),
            Probe::Vacant(_) => Ok(None),
            Probe::Corrupt => Err(Corrupt),
        }
    }

    /// A consistent copy of a slot, giving up after `tries` attempts
    /// (`Err(Busy)`: the slot kept changing or stayed mid-write). `Ok`
    /// also says how many retries it took.
    #[inline(always)]
    pub fn read_within(&self, slot: u32, tries: u32) -> Result<(T, u32), Busy> {
        if slot >= self.inner.capacity {
            return Err(Busy);
        }
        seq_read_within(self.inner.cell(slot), tries).map_err(|_| Busy)
    }

    /// A consistent copy of `key`'s value.
    #[inline]
    pub fn get(&self, key: &Key) -> Option<T> {
        self.find(key).map(|slot| self.read(slot))
    }

    /// A consistent copy of a published slot (`None` if not published).
    #[inline]
    pub fn get_slot(&self, slot: u32) -> Option<T> {
        (slot < self.len()).then(|| self.read(slot))
    }

    /// A consistent copy of a slot from `find` or below `len()`.
    ///
    /// # Panics
    /// When `slot >= capacity`.
    #[inline]
    pub fn read(&self, slot: u32) -> T {
        assert!(slot < self.inner.capacity, "slot {slot} out of range");
        seq_read(self.inner.cell(slot))
    }

    /// The key of a published slot.
    pub fn key_at(&self, slot: u32) -> Option<Key> {
        (slot < self.len()).then(|| self.inner.key_of(slot))
    }

    /// Published slots: `0..len()` are all readable.
    #[inline]
    pub fn len(&self) -> u32 {
        self.inner.published()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }
}

struct CellInner<T> {
    words: Words,
    _t: PhantomData<fn() -> T>,
}

/// A single seqlocked value on the heap: one [`CellWriter`], any number
/// of [`CellReader`]s.
pub fn seq_cell<T: Plain>(value: T) -> (CellWriter<T>, CellReader<T>) {
    seq_cell_in(&Words::heap(Layout::<T>::STRIDE), value)
        .expect("the heap cell is sized by the layout")
}

/// A seqlocked value in `words` (at least `stride::<T>()` long), first
/// written with `value`.
pub fn seq_cell_in<T: Plain>(
    words: &Words,
    value: T,
) -> Result<(CellWriter<T>, CellReader<T>), TooSmall> {
    let reader = cell_reader_in::<T>(words)?;
    let mut writer = CellWriter {
        inner: reader.inner.clone(),
    };
    writer.write(&value);
    Ok((writer, reader))
}

/// A reader of a seqlocked value another process writes in `words`.
pub fn cell_reader_in<T: Plain>(words: &Words) -> Result<CellReader<T>, TooSmall> {
    let s = Layout::<T>::STRIDE;
    let words = words.range(0, s).ok_or(TooSmall {
        needed: s,
        got: words.len(),
    })?;
    Ok(CellReader {
        inner: Arc::new(CellInner {
            words,
            _t: PhantomData,
        }),
    })
}

/// The one writer of a [`seq_cell`]. Not `Clone`.
pub struct CellWriter<T: Plain> {
    inner: Arc<CellInner<T>>,
}

impl<T: Plain> CellWriter<T> {
    #[inline]
    pub fn write(&mut self, value: &T) {
        seq_write(self.inner.words.slice(), value);
    }

    pub fn read(&self) -> T {
        owner_read(self.inner.words.slice())
    }

    pub fn reader(&self) -> CellReader<T> {
        CellReader {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Plain> fmt::Debug for CellWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CellWriter")
    }
}

/// A reader of a [`seq_cell`].
pub struct CellReader<T: Plain> {
    inner: Arc<CellInner<T>>,
}

impl<T: Plain> Clone for CellReader<T> {
    fn clone(&self) -> Self {
        CellReader {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Plain> fmt::Debug for CellReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CellReader")
    }
}

impl<T: Plain> CellReader<T> {
    #[inline]
    pub fn read(&self) -> T {
        seq_read(self.inner.words.slice())
    }

    /// As [`TableReader::read_within`].
    #[inline]
    pub fn read_within(&self, tries: u32) -> Result<(T, u32), Busy> {
        seq_read_within(self.inner.words.slice(), tries).map_err(|_| Busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type V = [u64; 3];

    fn v(x: u64) -> V {
        [x, x + 1, x + 2]
    }

    /// A key whose first word is `x` (an 8-byte symbol's, the rest spaces).
    fn k(x: u64) -> Key {
        [x, 0x2020_2020_2020_2020, 0x2020_2020_2020_2020]
    }

    #[test]
    fn insert_find_and_absent_keys() {
        let (mut w, r) = table::<V>(4);
        assert_eq!(r.find(&k(42)), None);
        assert_eq!(r.get(&k(42)), None);
        assert_eq!(w.insert(&k(42), &v(1)), Ok(0));
        assert_eq!(w.insert(&k(7), &v(2)), Ok(1));
        // Inserting an existing key keeps its slot and value.
        assert_eq!(w.insert(&k(42), &v(9)), Ok(0));
        assert_eq!(r.get(&k(42)), Some(v(1)));
        assert_eq!(r.get(&k(7)), Some(v(2)));
        assert_eq!(r.get(&k(8)), None);
        assert_eq!(r.len(), 2);
        assert_eq!(r.key_at(1), Some(k(7)));
        assert_eq!(r.key_at(2), None);
        w.write(1, &v(5));
        assert_eq!(r.read(1), v(5));
        assert_eq!(w.read(1), v(5));
        assert_eq!(w.upsert(&k(7), &v(6)), Ok(1));
        assert_eq!(r.get(&k(7)), Some(v(6)));
    }

    #[test]
    fn key_zero_is_an_ordinary_key() {
        // The empty-bucket marker is in the slot word, not the key.
        let (mut w, r) = table::<V>(2);
        assert_eq!(r.find(&k(0)), None);
        assert_eq!(w.insert(&k(0), &v(3)), Ok(0));
        assert_eq!(r.get(&k(0)), Some(v(3)));
        assert_eq!(r.find(&k(1)), None);
    }

    #[test]
    fn collisions_probe_past_each_other() {
        // Keys that share a home bucket: the capacity-8 table has 16
        // buckets, so the home is the top 4 bits of the key's hash; search for
        // several keys with the same home.
        let (mut w, r) = table::<V>(8);
        let home = |x: u64| crate::wire::hash_words(k(x)) >> 60;
        let same: Vec<u64> = (1..10_000u64)
            .filter(|&k| home(k) == home(1))
            .take(6)
            .collect();
        assert_eq!(same.len(), 6);
        for (i, &x) in same.iter().enumerate() {
            assert_eq!(w.insert(&k(x), &v(x)), Ok(i as u32));
        }
        for &x in &same {
            assert_eq!(r.get(&k(x)), Some(v(x)), "key {x}");
        }
        // An absent key with the same home probes the whole run.
        let absent = (10_000u64..).find(|&k| home(k) == home(1)).unwrap();
        assert_eq!(r.find(&k(absent)), None);
        // Wrap-around at the end of the bucket array.
        let last: Vec<u64> = (1..100_000u64).filter(|&k| home(k) == 15).take(2).collect();
        w.insert(&k(last[0]), &v(1)).unwrap();
        w.insert(&k(last[1]), &v(2)).unwrap();
        assert_eq!(r.get(&k(last[0])), Some(v(1)));
        assert_eq!(r.get(&k(last[1])), Some(v(2)));
    }

    #[test]
    fn full_table_refuses_new_keys_only() {
        let (mut w, r) = table::<V>(3);
        for x in 10..13 {
            w.insert(&k(x), &v(x)).unwrap();
        }
        assert_eq!(w.insert(&k(99), &v(0)), Err(TableFull { capacity: 3 }));
        assert_eq!(w.upsert(&k(99), &v(0)), Err(TableFull { capacity: 3 }));
        assert_eq!(r.find(&k(99)), None);
        assert_eq!(r.len(), 3);
        // Existing keys still update.
        assert_eq!(w.upsert(&k(11), &v(50)), Ok(1));
        assert_eq!(r.get(&k(11)), Some(v(50)));
        assert!(TableFull { capacity: 3 }
            .to_string()
            .contains("3 symbol slots"));
    }

    #[test]
    fn zero_capacity_table_refuses_everything() {
        let (mut w, r) = table::<V>(0);
        assert!(w.insert(&k(1), &v(1)).is_err());
        assert_eq!(r.find(&k(1)), None);
        assert!(r.is_empty());
    }

    #[test]
    fn many_keys_all_found() {
        let n = 100_000u32;
        let (mut w, r) = table::<[u64; 12]>(n);
        for i in 0..n as u64 {
            // ASCII-like keys, as symbols are.
            let key = u64::from_be_bytes(*format!("S{i:07}").as_bytes().first_chunk().unwrap());
            w.insert(&k(key), &[i; 12]).unwrap();
        }
        for i in (0..n as u64).step_by(97) {
            let key = u64::from_be_bytes(*format!("S{i:07}").as_bytes().first_chunk().unwrap());
            assert_eq!(r.get(&k(key)), Some([i; 12]));
        }
        assert_eq!(r.get(&k(u64::from_be_bytes(*b"NOTTHERE"))), None);
        assert!(w.insert(&k(1), &[0; 12]).is_err());
    }

    #[test]
    fn keys_that_differ_after_the_first_word_are_distinct() {
        // 20-byte symbols sharing their first 8 bytes (CME spreads).
        let (mut w, r) = table::<V>(4);
        let a = crate::wire::Symbol::parse("ESM6-ESU6").unwrap().words();
        let b = crate::wire::Symbol::parse("ESM6-ESU7").unwrap().words();
        let c = crate::wire::Symbol::parse("ESM6-ESU6-ESZ6-ESH7X")
            .unwrap()
            .words();
        let short = crate::wire::Symbol::parse("ESM6-ESU").unwrap().words();
        assert_eq!(a[0], b[0]);
        for (i, key) in [a, b, c].iter().enumerate() {
            assert_eq!(w.insert(key, &v(i as u64)), Ok(i as u32));
        }
        assert_eq!(r.get(&a), Some(v(0)));
        assert_eq!(r.get(&b), Some(v(1)));
        assert_eq!(r.get(&c), Some(v(2)));
        assert_eq!(r.get(&short), None);
        assert_eq!(r.key_at(2), Some(c));
    }

    #[test]
    fn seq_cell_reads_last_write() {
        let (mut w, r) = seq_cell::<[i64; 2]>([1, 2]);
        assert_eq!(r.read(), [1, 2]);
        w.write(&[3, -4]);
        assert_eq!(r.clone().read(), [3, -4]);
        assert_eq!(w.read(), [3, -4]);
    }

    #[test]
    fn words_start_on_a_cache_line() {
        for len in [1, 2, 9, 100] {
            let w = Words::heap(len);
            assert_eq!(w.slice().as_ptr() as usize % 64, 0);
            assert_eq!(w.slice().len(), len);
        }
    }

    #[test]
    fn layout_strides() {
        assert_eq!(Layout::<[u64; 1]>::STRIDE, 2);
        assert_eq!(Layout::<[u64; 3]>::STRIDE, 4);
        assert_eq!(Layout::<[u64; 7]>::STRIDE, 8);
        assert_eq!(Layout::<[u64; 8]>::STRIDE, 10);
        assert_eq!(Layout::<[u64; 9]>::STRIDE, 10);
        assert_eq!(Layout::<[u64; 12]>::STRIDE, 14);
    }

    fn _reader_is_send_sync_clone<T: Plain>() {
        fn check<X: Send + Sync + Clone>() {}
        fn send<X: Send>() {}
        check::<TableReader<T>>();
        check::<CellReader<T>>();
        send::<TableWriter<T>>();
        send::<CellWriter<T>>();
    }
}
