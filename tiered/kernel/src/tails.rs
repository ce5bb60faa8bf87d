//! The new units of many queues, each read on from where its last max offset was found, by the
//! name of the consumequeue file that holds that place: what a dispatch pass asks of the
//! queues the commitlog says moved, before it plans their steps.
//!
//! The answer per queue is the reader's scan from its hint (`LocalSource._scan_from`): the
//! units valid from the position on (offset >= 0, size > 0), up to the first invalid one,
//! and the first `cap` of them as read, for the plan that follows. A file that is missing or
//! not of the expected size, a read that comes short, an I/O error, or a file valid to its end
//! (only a listing can tell whether the next file has started) is [`Tail::Unknown`]: the
//! caller's own reader decides, and names the problem.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::bounds::{first_invalid, read_at, unit_at, valid, UNIT};

/// One queue's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// The number of valid units from the position, and the first `cap` of them (bytes).
    Found(u64, Vec<u8>),
    /// Left to the caller.
    Unknown,
}

/// The valid units of the consumequeue file `path` (of `file_size` bytes) from unit `pos` on.
pub fn tail(path: &Path, file_size: u64, pos: u64, cap: u64) -> Tail {
    try_tail(path, file_size, pos, cap).unwrap_or(Tail::Unknown)
}

fn try_tail(path: &Path, file_size: u64, pos: u64, cap: u64) -> io::Result<Tail> {
    let per_file = file_size / UNIT;
    if file_size == 0 || file_size % UNIT != 0 || pos >= per_file || cap == 0 {
        return Ok(Tail::Unknown);
    }
    let file = File::open(path)?;
    if file.metadata()?.len() != file_size {
        return Ok(Tail::Unknown);
    }
    let n = cap.min(per_file - pos);
    let head = read_at(&file, n * UNIT, pos * UNIT)?;
    if head.len() as u64 != n * UNIT {
        return Ok(Tail::Unknown);
    }
    if !valid(unit_at(&head, 0)) {
        return Ok(Tail::Found(0, Vec::new()));
    }
    let k = first_invalid(&head) as u64;
    let kept = head[..(k * UNIT) as usize].to_vec();
    if k < n {
        return Ok(Tail::Found(k, kept));
    }
    // valid to the end of the first read: on in chunks growing 4x
    let (mut at, mut chunk) = (pos + n, 4 * cap);
    while at < per_file {
        let m = chunk.min(per_file - at);
        let data = read_at(&file, m * UNIT, at * UNIT)?;
        if data.len() as u64 != m * UNIT {
            return Ok(Tail::Unknown);
        }
        let j = first_invalid(&data) as u64;
        if j < m {
            return Ok(Tail::Found(at + j - pos, kept));
        }
        at += m;
        chunk *= 4;
    }
    Ok(Tail::Unknown)
}

/// [`tail`] of each of `paths` (with `file_sizes[i]` and `positions[i]`), on up to `threads`
/// threads, in order.
pub fn tails_many(
    paths: &[String],
    file_sizes: &[u64],
    positions: &[u64],
    cap: u64,
    threads: usize,
) -> Vec<Tail> {
    let one = |i: usize| tail(Path::new(&paths[i]), file_sizes[i], positions[i], cap);
    crate::par::in_order(paths.len(), threads, one, Tail::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n as i64 {
            out.extend_from_slice(&(i * 100).to_be_bytes());
            out.extend_from_slice(&100i32.to_be_bytes());
            out.extend_from_slice(&i.to_be_bytes());
        }
        out
    }

    struct File(std::path::PathBuf);
    impl File {
        fn new(valid: usize, per_file: u64) -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            let p = std::env::temp_dir().join(format!("cq-tail-{}-{n}", std::process::id()));
            let mut data = units(valid);
            data.resize((per_file * UNIT) as usize, 0);
            std::fs::write(&p, data).unwrap();
            File(p)
        }
    }
    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn counts_the_valid_units_from_the_position() {
        for per_file in [1u64, 5, 100, 5000] {
            for valid in [0usize, 1, 2, 4, 5, 6, 99, 100, 101, 2000, 4999, 5000] {
                let valid = valid.min(per_file as usize);
                let f = File::new(valid, per_file);
                for pos in [0u64, 1, 3, 50, 4998] {
                    if pos >= per_file {
                        assert_eq!(tail(&f.0, per_file * UNIT, pos, 4), Tail::Unknown);
                        continue;
                    }
                    let got = tail(&f.0, per_file * UNIT, pos, 4);
                    if valid as u64 == per_file && pos <= valid as u64 {
                        assert_eq!(got, Tail::Unknown, "full file: only a listing can tell");
                        continue;
                    }
                    let k = (valid as u64).saturating_sub(pos);
                    let kept = k.min(4) as usize;
                    let from = (pos * UNIT) as usize;
                    let want = units(valid)[from.min(valid * 20)..][..kept * 20].to_vec();
                    assert_eq!(
                        got,
                        Tail::Found(k, want),
                        "per_file {per_file} valid {valid} pos {pos}"
                    );
                }
            }
        }
    }

    #[test]
    fn unusual_files_are_left_to_the_caller() {
        let f = File::new(3, 10);
        assert_eq!(tail(&f.0, 400, 1, 8), Tail::Unknown); // another size
        assert_eq!(tail(&f.0.with_extension("gone"), 200, 1, 8), Tail::Unknown);
        assert_eq!(tail(&f.0, 201, 1, 8), Tail::Unknown); // not whole units
        assert_eq!(tail(&f.0, 200, 1, 8), Tail::Found(2, units(3)[20..].to_vec()));
    }

    #[test]
    fn many_on_threads_keep_their_order() {
        let files: Vec<_> = (0..700).map(|i| File::new(i % 10, 10)).collect();
        let paths: Vec<String> = files.iter().map(|f| f.0.to_string_lossy().into()).collect();
        let sizes = vec![200u64; paths.len()];
        let positions: Vec<u64> = (0..paths.len() as u64).map(|i| i % 3).collect();
        let got = tails_many(&paths, &sizes, &positions, 2, 3);
        for (i, t) in got.iter().enumerate() {
            let k = ((i % 10) as u64).saturating_sub(i as u64 % 3);
            match t {
                Tail::Found(n, kept) => {
                    assert_eq!(*n, k);
                    assert_eq!(kept.len() as u64, k.min(2) * UNIT);
                }
                Tail::Unknown => panic!("queue {i}"),
            }
        }
    }
}
