//! Background work on the keyspace: the active expiry cycle and the
//! reclaiming of flushed generations.
//!
//! Every 100 ms the cycle reads the next 20 records of the expire index
//! (which holds only keys with a TTL) from a cursor that wraps around, and
//! deletes the keys among them whose TTL has passed; while more than a
//! quarter of a sample was due it samples again, for at most 25 ms of each
//! 100 ms, as Redis's active expiry does. Keys are sampled in index order
//! rather than at random: every key with a TTL is visited within a bounded
//! number of cycles.
//!
//! After a `FLUSHDB` the same thread deletes the records of older
//! generations, 1000 records per step, between expiry cycles.

use crate::keyspace::{now_ms, Keyspace};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SAMPLE: usize = 20;
const PERIOD: Duration = Duration::from_millis(100);
const BUDGET: Duration = Duration::from_millis(25);

/// One expiry cycle from `cursor`; returns the keys deleted.
///
/// # Errors
/// Engine errors.
pub fn cycle(ks: &Keyspace, cursor: &mut Vec<u8>) -> Result<usize, sepkv::Error> {
    let start = Instant::now();
    let mut deleted = 0;
    loop {
        let now = now_ms();
        let (seen, due, next) = ks.sample_expires(cursor, SAMPLE, now)?;
        for k in &due {
            let mut t = ks.txn();
            t.get(k, now)?;
            if t.commit()? {
                deleted += 1;
            }
        }
        match next {
            Some(k) => *cursor = k,
            None => cursor.clear(),
        }
        if seen == 0 || due.len() * 4 <= seen || start.elapsed() > BUDGET || cursor.is_empty() {
            return Ok(deleted);
        }
    }
}

/// Starts the thread; it ends when `stop` is set.
pub fn spawn(ks: Arc<Keyspace>, stop: Arc<AtomicBool>, active: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut cursor = Vec::new();
        let mut reclaim = Vec::new();
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(PERIOD);
            // Errors (a poisoned database) are retried next cycle; reads
            // keep treating expired keys as absent meanwhile.
            if active {
                let _ = cycle(&ks, &mut cursor);
            }
            let start = Instant::now();
            while start.elapsed() < BUDGET && !stop.load(Ordering::Acquire) {
                match ks.reclaim_step(&mut reclaim, 1000) {
                    Ok(false) => {}
                    Ok(true) | Err(_) => break,
                }
            }
        }
    })
}
