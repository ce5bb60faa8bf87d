//! Positional appends to many existing files at once: what a wide dispatch round asks of a posix
//! tier -- thousands of small appends, each to its own segment file, none kept open. Each file is
//! opened write-only, its size checked against the position the caller expects, the bytes written
//! there, and the file closed; nothing is synced (the caller makes the round durable at once).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One append's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Every byte written.
    Done,
    /// No such file.
    Missing,
    /// The file holds this many bytes, not the position asked for: nothing written.
    Mismatch(u64),
    /// An I/O error (its errno; bytes may have been written in part).
    Failed(i32),
}

/// Append `data` at `position` to the existing file `path`.
pub fn append_at(path: &Path, position: u64, data: &[u8]) -> Appended {
    match try_append(path, position, data) {
        Ok(done) => done,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Appended::Missing,
        Err(e) => Appended::Failed(e.raw_os_error().unwrap_or(libc_eio())),
    }
}

fn libc_eio() -> i32 {
    5 // EIO
}

fn try_append(path: &Path, position: u64, data: &[u8]) -> io::Result<Appended> {
    let file: File = OpenOptions::new().write(true).open(path)?;
    let size = file.metadata()?.len();
    if size != position {
        return Ok(Appended::Mismatch(size));
    }
    file.write_all_at(data, position)?;
    Ok(Appended::Done)
}

/// [`append_at`] of each `(paths[i], positions[i], datas[i])` on up to `threads` threads, in order.
pub fn append_many(paths: &[String], positions: &[u64], datas: &[&[u8]], threads: usize) -> Vec<Appended> {
    let one = |i: usize| append_at(Path::new(&paths[i]), positions[i], datas[i]);
    crate::par::in_order(paths.len(), threads, one, Appended::Failed(libc_eio()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(std::path::PathBuf);
    impl Dir {
        fn new() -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            let p = std::env::temp_dir().join(format!("append-many-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn appends_where_the_file_ends_and_nowhere_else() {
        let d = Dir::new();
        let paths: Vec<String> = (0..600).map(|i| d.0.join(format!("f{i}")).to_string_lossy().into()).collect();
        for (i, p) in paths.iter().enumerate() {
            if i % 5 != 4 {
                std::fs::write(p, vec![b'a'; i % 7]).unwrap();
            }
        }
        let positions: Vec<u64> = (0..600).map(|i| if i % 3 == 0 { 1 + (i % 7) as u64 } else { (i % 7) as u64 }).collect();
        let bodies: Vec<Vec<u8>> = (0..600).map(|i| vec![b'b'; 1 + i % 11]).collect();
        let datas: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
        let got = append_many(&paths, &positions, &datas, 3);
        for i in 0..600 {
            let now = std::fs::read(&paths[i]).ok();
            if i % 5 == 4 {
                assert_eq!(got[i], Appended::Missing);
                assert_eq!(now, None, "no file is created");
            } else if i % 3 == 0 {
                assert_eq!(got[i], Appended::Mismatch((i % 7) as u64));
                assert_eq!(now.unwrap(), vec![b'a'; i % 7]);
            } else {
                assert_eq!(got[i], Appended::Done);
                assert_eq!(now.unwrap(), [vec![b'a'; i % 7], bodies[i].clone()].concat());
            }
        }
    }
}
