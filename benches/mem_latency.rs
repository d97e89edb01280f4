//! What this machine's memory costs a book that does not fit in cache: the
//! floor under the ITCH per-message figure (`itch_day`), measured beside it.
//!
//!     cargo bench --bench mem_latency
//!
//! A buffer of 64-byte lines, linked into one random cycle (Sattolo's
//! shuffle, seeded), walked by `chains` independent pointer chases
//! interleaved: with 1 chain every load waits for the one before it (the
//! latency of one miss, what an unhidden order-table probe costs); with 8
//! or 16 the core overlaps the misses (the best that prefetching several
//! messages ahead can reach). Sizes: 1 MiB (in L2), 16 MiB (in L3), 128 MiB
//! (the order table and level pool of a day's book: 4,000,000 orders),
//! with 4 KiB pages and with transparent huge pages asked for
//! (`MADV_HUGEPAGE`; the kernel may refuse). Figures are thread CPU ns per
//! load, the median of 5 repetitions. Optional: MEM_LATENCY_LOADS (loads
//! per repetition, default 4,000,000).

#[path = "common/env.rs"]
mod env;
#[path = "common/thread_cpu.rs"]
mod thread_cpu;

use thread_cpu::thread_cpu_now;

const LINE: usize = 64;

/// An anonymous mapping of `bytes`, zeroed, with huge pages asked for or
/// not. Unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    bytes: usize,
}

impl Mapping {
    fn new(bytes: usize, huge: bool) -> Mapping {
        // SAFETY: a fresh private anonymous mapping; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap of {bytes} bytes failed");
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: the range is the mapping just made. A refusal only means
        // the other page size, which the report says.
        unsafe { libc::madvise(ptr, bytes, advice) };
        Mapping {
            ptr: ptr.cast(),
            bytes,
        }
    }

    /// The buffer as `u64` words: word `8 * i` of line `i` holds the index
    /// of the next line of the cycle.
    fn words(&mut self) -> &mut [u64] {
        // SAFETY: the mapping is `bytes` long, page aligned, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.bytes / 8) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// xorshift64*: a seeded generator, enough for a shuffle.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Links the lines of `words` into one random cycle (Sattolo).
fn link_cycle(words: &mut [u64], seed: u64) {
    let lines = words.len() / (LINE / 8);
    let mut order: Vec<u64> = (0..lines as u64).collect();
    let mut state = seed | 1;
    for i in (1..lines).rev() {
        let j = (next_random(&mut state) % i as u64) as usize;
        order.swap(i, j);
    }
    for k in 0..lines {
        let from = order[k] as usize;
        let to = order[(k + 1) % lines];
        words[from * (LINE / 8)] = to;
    }
}

/// `loads` loads in all over `chains` interleaved chases, starting
/// `lines / chains` apart on the cycle; returns thread CPU ns per load.
fn chase(words: &[u64], chains: usize, loads: usize) -> f64 {
    let lines = words.len() / (LINE / 8);
    let mut heads = vec![0u64; chains];
    let mut at = 0u64;
    let stride = lines / chains;
    for (c, head) in heads.iter_mut().enumerate() {
        *head = at;
        if c + 1 < chains {
            for _ in 0..stride {
                at = words[at as usize * (LINE / 8)];
            }
        }
    }
    let rounds = loads / chains;
    let start = thread_cpu_now();
    for _ in 0..rounds {
        for head in heads.iter_mut() {
            *head = words[*head as usize * (LINE / 8)];
        }
    }
    let spent = (thread_cpu_now() - start).as_nanos() as f64;
    std::hint::black_box(&heads);
    spent / (rounds * chains) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Whether the kernel backed this mapping with huge pages, from
/// `/proc/self/smaps` (`AnonHugePages` of the mapping at `ptr`).
fn huge_kib(ptr: *mut u8) -> u64 {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let want = ptr as usize;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= want && want < hi;
                    continue;
                }
            }
        }
        if inside {
            if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                return rest
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
            }
        }
    }
    0
}

fn main() {
    let loads = env::env_usize("MEM_LATENCY_LOADS", 4_000_000);
    let chain_counts = [1usize, 2, 4, 8, 16];
    println!("thread CPU ns per load, median of 5; columns: interleaved chases");
    print!("| buffer | pages |");
    for c in chain_counts {
        print!(" {c} |");
    }
    println!();
    print!("|---|---|");
    for _ in chain_counts {
        print!("---:|");
    }
    println!();
    for mib in [1usize, 16, 128] {
        for huge in [false, true] {
            let mut map = Mapping::new(mib << 20, huge);
            link_cycle(map.words(), 0x5EED ^ mib as u64);
            let backed = huge_kib(map.ptr);
            let pages = if huge {
                format!("huge asked ({} MiB backed)", backed >> 10)
            } else {
                "4 KiB".to_owned()
            };
            print!("| {mib} MiB | {pages} |");
            let words = map.words();
            for c in chain_counts {
                let ns = median((0..5).map(|_| chase(words, c, loads)).collect());
                print!(" {ns:.1} |");
            }
            println!();
        }
    }
}
