//! A queue's local bounds, its min and max offset, read from its consumequeue directory, for
//! many queues in one call: what `status` asks of every queue of a broker once.
//!
//! The answer is the reader's (`ConsumeQueue.min_offset` / `max_offset` over one listing): the
//! min is the first file's first unit when that unit is readable (valid, not a pre-blank fill,
//! at or above the commitlog's min offset); the max is the first invalid unit (offset < 0 or
//! size <= 0) of the last file, read from a hint when the unit before the hint is valid. Whatever
//! is not that usual case -- a name that is not 20 digits, a file of another size, a first unit
//! that is not readable, an I/O error -- is [`Bounds::Other`]: the caller's reader decides, and
//! names the problem.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes of a consumequeue unit: commitlog offset i64, size i32, tags code i64 (big-endian).
pub const UNIT: u64 = 20;
/// Units read after the hint's unit at first: a queue the tier has caught up with ends there.
pub const PROBE_UNITS: u64 = 64;
/// Without a hint the last file is read from its start in chunks growing 4x from this (5 KB:
/// a small queue in a 6 MB file costs that, not a chunk of the reader's 80 KB).
pub const FIRST_CHUNK_UNITS: u64 = 256;
/// A queue of one file whose hint is this near its start is read with one read.
pub const COMBINED_READ_UNITS: i64 = 1024;
const BLANK_FILL_SIZE: i32 = 0x7FFF_FFFF;

/// One queue's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounds {
    /// `(min offset, max offset, bytes)`: `bytes`, the sizes of the units from the hint to the
    /// max added up (what the queue holds past the hint), or -1 when the max was not read from
    /// the hint.
    Found(i64, i64, i64),
    /// No such directory.
    Missing,
    /// Not the usual case: the caller reads the queue itself.
    Other,
}

pub(crate) fn unit_at(data: &[u8], i: usize) -> (i64, i32, i64) {
    let u = &data[i * UNIT as usize..(i + 1) * UNIT as usize];
    let mut o = [0u8; 8];
    let mut s = [0u8; 4];
    let mut t = [0u8; 8];
    o.copy_from_slice(&u[0..8]);
    s.copy_from_slice(&u[8..12]);
    t.copy_from_slice(&u[12..20]);
    (
        i64::from_be_bytes(o),
        i32::from_be_bytes(s),
        i64::from_be_bytes(t),
    )
}

pub(crate) fn valid(unit: (i64, i32, i64)) -> bool {
    unit.0 >= 0 && unit.1 > 0
}

/// Index of the first invalid unit among the whole units of `data`, or their count.
pub fn first_invalid(data: &[u8]) -> usize {
    let n = data.len() / UNIT as usize;
    (0..n).find(|&i| !valid(unit_at(data, i))).unwrap_or(n)
}

/// Up to `len` bytes at `pos` (fewer only at the file's end).
pub(crate) fn read_at(file: &File, len: u64, pos: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// The sizes of units `from..to` of `data` added up.
fn sizes(data: &[u8], from: usize, to: usize) -> i64 {
    (from..to).map(|i| i64::from(unit_at(data, i).1)).sum()
}

/// The first invalid unit from `pos` on, and the sizes of the valid units read added up.
fn scan(
    file: &File,
    base: i64,
    per_file: u64,
    mut pos: u64,
    mut chunk: u64,
) -> io::Result<(i64, i64)> {
    let mut bytes = 0;
    while pos < per_file {
        let n = chunk.min(per_file - pos);
        let data = read_at(file, n * UNIT, pos * UNIT)?;
        let k = first_invalid(&data);
        bytes += sizes(&data, 0, k);
        if (k as u64) < n {
            return Ok((base + (pos + k as u64) as i64, bytes));
        }
        pos += n;
        chunk *= 4;
    }
    Ok((base + per_file as i64, bytes))
}

/// The max offset of the last file, starting at queue offset `base`, and the bytes of the units
/// from the hint to it (-1 when it was not read from the hint).
/// `head`: the file's first bytes, read already (the probe is taken from it when it holds it).
fn max_offset(
    file: &File,
    base: i64,
    per_file: u64,
    hint: i64,
    head: &[u8],
) -> io::Result<(i64, i64)> {
    if hint > base && hint <= base + per_file as i64 {
        let pos = (hint - 1 - base) as u64;
        let n = (1 + PROBE_UNITS).min(per_file - pos);
        let (from, to) = ((pos * UNIT) as usize, ((pos + n) * UNIT) as usize);
        let data = if to <= head.len() {
            head[from..to].to_vec()
        } else {
            read_at(file, n * UNIT, pos * UNIT)?
        };
        let whole = data.len() / UNIT as usize;
        if whole >= 1 && valid(unit_at(&data, 0)) {
            if whole < 2 || !valid(unit_at(&data, 1)) {
                return Ok((hint, 0));
            }
            let k = first_invalid(&data);
            let bytes = sizes(&data, 1, k);
            if (k as u64) < n {
                return Ok((base + (pos + k as u64) as i64, bytes));
            }
            let (max, more) = scan(file, base, per_file, pos + n, 4 * PROBE_UNITS)?;
            return Ok((max, bytes + more));
        }
    }
    Ok((scan(file, base, per_file, 0, FIRST_CHUNK_UNITS)?.0, -1))
}

fn is_offset_name(name: &[u8]) -> bool {
    name.len() == 20 && name.iter().all(u8::is_ascii_digit)
}

/// The bounds of the queue in `dir`, of `file_size`-byte files (a whole number of units);
/// `commitlog_min` < 0 and `hint` <= 0 mean none.
pub fn queue_bounds(dir: &Path, file_size: u64, commitlog_min: i64, hint: i64) -> Bounds {
    match try_bounds(dir, file_size, commitlog_min, hint) {
        Ok(found) => found,
        Err(_) => Bounds::Other,
    }
}

fn try_bounds(dir: &Path, file_size: u64, commitlog_min: i64, hint: i64) -> io::Result<Bounds> {
    if file_size == 0 || file_size % UNIT != 0 {
        return Ok(Bounds::Other);
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Bounds::Missing),
        Err(e) => return Err(e),
    };
    let mut files: Vec<(u64, std::path::PathBuf, u64)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        if !is_offset_name(name) {
            return Ok(Bounds::Other);
        }
        let Ok(start) = std::str::from_utf8(name).unwrap_or("x").parse::<u64>() else {
            return Ok(Bounds::Other);
        };
        let path = entry.path();
        // the stat the reader makes (it follows a symlink); a file's is made beside the
        // directory's open descriptor, without walking the path again
        let size = if entry.file_type()?.is_symlink() {
            std::fs::metadata(&path)?.len()
        } else {
            entry.metadata()?.len()
        };
        files.push((start, path, size));
    }
    files.sort();
    if files.last().is_some_and(|f| f.2 == 0) {
        files.pop();
    }
    if files
        .iter()
        .any(|f| f.2 != file_size || f.0 % file_size != 0)
    {
        return Ok(Bounds::Other);
    }
    let (Some(first), Some(last)) = (files.first(), files.last()) else {
        return Ok(Bounds::Found(0, 0, -1));
    };
    let per_file = file_size / UNIT;
    let base = (last.0 / UNIT) as i64;
    // one file, the hint near its start (a small queue): one read for the min and the max
    let ahead = hint - base + PROBE_UNITS as i64;
    let head_units = if last.1 == first.1 && hint > base && ahead <= COMBINED_READ_UNITS {
        (ahead as u64).min(per_file)
    } else {
        1
    };
    let head = File::open(&first.1)?;
    let data = read_at(&head, head_units * UNIT, 0)?;
    if data.len() < UNIT as usize {
        return Ok(Bounds::Other);
    }
    let (offset, size, tags) = unit_at(&data, 0);
    let blank = offset == 0 && size == BLANK_FILL_SIZE && tags == 0;
    if offset < 0 || size <= 0 || blank || (commitlog_min >= 0 && offset < commitlog_min) {
        return Ok(Bounds::Other);
    }
    let min = (first.0 / UNIT) as i64;
    let tail = if last.1 == first.1 {
        head
    } else {
        File::open(&last.1)?
    };
    let (max, bytes) = max_offset(
        &tail,
        base,
        per_file,
        hint,
        if head_units > 1 { &data } else { &[] },
    )?;
    Ok(Bounds::Found(min, max, bytes))
}

/// [`queue_bounds`] of each of `dirs` (with `hints[i]`), on up to `threads` threads.
pub fn bounds_many(
    dirs: &[String],
    file_size: u64,
    commitlog_min: i64,
    hints: &[i64],
    threads: usize,
) -> Vec<Bounds> {
    let one = |i: usize| queue_bounds(Path::new(&dirs[i]), file_size, commitlog_min, hints[i]);
    crate::par::in_order(dirs.len(), threads, one, Bounds::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(first_phys: i64, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n as i64 {
            out.extend_from_slice(&(first_phys + i * 100).to_be_bytes());
            out.extend_from_slice(&100i32.to_be_bytes());
            out.extend_from_slice(&i.to_be_bytes());
        }
        out
    }

    fn queue(files: &[(u64, Vec<u8>)], per_file: u64) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        for (first, content) in files {
            let mut data = content.clone();
            data.resize((per_file * UNIT) as usize, 0);
            std::fs::write(dir.path().join(format!("{:020}", first * UNIT)), data).unwrap();
        }
        dir
    }

    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let n = N.fetch_add(1, Ordering::SeqCst);
                let p = std::env::temp_dir().join(format!("cq-bounds-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    /// The min and max of a found queue.
    fn range(b: Bounds) -> Option<(i64, i64)> {
        match b {
            Bounds::Found(lo, hi, _) => Some((lo, hi)),
            _ => None,
        }
    }

    #[test]
    fn hints_give_the_same_max() {
        for valid in [0usize, 1, 2, 64, 65, 66, 999, 1000] {
            let q = queue(
                &[(1000, units(0, 1000)), (2000, units(100_000, valid))],
                1000,
            );
            let top = 2000 + valid as i64;
            for hint in [0, 1, top - 1, top, top + 1, 3000, 5000] {
                let got = queue_bounds(q.path(), 20_000, -1, hint);
                assert_eq!(range(got), Some((1000, top)), "valid {valid} hint {hint}");
                if let Bounds::Found(_, _, bytes) = got {
                    // units of 100 bytes from the hint on, when the max was read from it
                    let from_hint = hint > 2000 && hint <= top;
                    assert_eq!(bytes, if from_hint { 100 * (top - hint) } else { -1 });
                }
            }
        }
    }

    #[test]
    fn one_file_read_once_or_twice_gives_the_same_bounds() {
        for per_file in [10u64, 100, 2000] {
            for valid in [1usize, 2, 9, 10, 64, 65, 66, 99, 100, 1000, 1999, 2000] {
                let valid = valid.min(per_file as usize);
                let q = queue(&[(per_file, units(7, valid))], per_file);
                let top = (per_file as usize + valid) as i64;
                for hint in [0, top - 1, top, top + 1, top + 70, per_file as i64 * 2] {
                    let got = queue_bounds(q.path(), per_file * UNIT, 7, hint);
                    let want = Some((per_file as i64, top));
                    assert_eq!(
                        range(got),
                        want,
                        "per_file {per_file} valid {valid} hint {hint}"
                    );
                }
            }
        }
    }

    #[test]
    fn unusual_queues_are_left_to_the_caller() {
        let q = queue(&[(0, units(500, 10))], 10);
        assert_eq!(
            queue_bounds(q.path(), 200, 500, 10),
            Bounds::Found(0, 10, 0)
        );
        assert_eq!(queue_bounds(q.path(), 200, 501, 10), Bounds::Other); // below the commitlog
        assert_eq!(queue_bounds(q.path(), 400, -1, 10), Bounds::Other); // another size
        std::fs::write(q.path().join(format!("{:020}", 200)), b"").unwrap();
        assert_eq!(
            queue_bounds(q.path(), 200, -1, 4),
            Bounds::Found(0, 10, 600)
        ); // being created
        std::fs::write(q.path().join("00000000000000000400.tmp"), b"x").unwrap();
        assert_eq!(queue_bounds(q.path(), 200, -1, 10), Bounds::Other);
        assert_eq!(
            queue_bounds(&q.path().join("none"), 200, -1, 0),
            Bounds::Missing
        );
        let empty = queue(&[], 10);
        assert_eq!(
            queue_bounds(empty.path(), 200, -1, 0),
            Bounds::Found(0, 0, -1)
        );
    }

    #[test]
    fn many_on_threads_keep_their_order() {
        let qs: Vec<_> = (0..600)
            .map(|i| queue(&[(0, units(0, i % 10))], 10))
            .collect();
        let dirs: Vec<String> = qs
            .iter()
            .map(|q| q.path().to_string_lossy().into())
            .collect();
        let hints = vec![0i64; dirs.len()];
        let got = bounds_many(&dirs, 200, -1, &hints, 3);
        for (i, b) in got.iter().enumerate() {
            let n = (i % 10) as i64;
            assert_eq!(
                *b,
                if n == 0 {
                    Bounds::Other
                } else {
                    Bounds::Found(0, n, -1)
                }
            );
        }
    }
}
