//! Positional appends to many files at once: what a wide dispatch round asks of a posix tier --
//! thousands of small appends, each to its own segment file, none kept open. An append at a
//! position past 0 goes to an existing file: it is opened write-only, its size checked against
//! the position the caller expects, the bytes written there, and the file closed. An append at 0
//! makes the file (and its missing directories) unless it exists, empty. Nothing is synced (the
//! caller makes the round durable at once).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One append's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Every byte written. The count is how many of the file's ancestors (its directory, that
    /// one's parent, ...) gained an entry this call made: the new file's and each new
    /// directory's (0: nothing was made).
    Done(u32),
    /// No such file (an append past position 0).
    Missing,
    /// The file holds this many bytes, not the position asked for: nothing written.
    Mismatch(u64),
    /// An I/O error (its errno; bytes may have been written in part).
    Failed(i32),
}

/// Append `data` at `position` to the file `path` (made, with its directories, at position 0).
pub fn append_at(path: &Path, position: u64, data: &[u8]) -> Appended {
    match try_append(path, position, data) {
        Ok(done) => done,
        Err(e) if e.kind() == io::ErrorKind::NotFound && position > 0 => Appended::Missing,
        Err(e) => Appended::Failed(e.raw_os_error().unwrap_or(libc_eio())),
    }
}

fn libc_eio() -> i32 {
    5 // EIO
}

fn try_append(path: &Path, position: u64, data: &[u8]) -> io::Result<Appended> {
    let (file, made, fresh) =
        if position == 0 { create(path)? } else { (OpenOptions::new().write(true).open(path)?, 0, false) };
    if !fresh {
        let size = file.metadata()?.len();
        if size != position {
            return Ok(Appended::Mismatch(size));
        }
    } // (a file this call made holds nothing: position 0)
    file.write_all_at(data, position)?;
    Ok(Appended::Done(made))
}

/// `path` opened for writing, made new when absent (its missing directories first), how many
/// of its ancestors gained an entry (see [`Appended::Done`]) and whether this call made it.
fn create(path: &Path) -> io::Result<(File, u32, bool)> {
    let depth = make_parents(path)?;
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => Ok((file, depth + 1, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let file = OpenOptions::new().write(true).open(path)?;
            Ok((file, if depth > 0 { depth + 1 } else { 0 }, false))
        }
        Err(e) => Err(e),
    }
}

/// Make the missing directories above `path`; returns how high the highest one made here is (1:
/// the file's own directory; 0: none made here -- another thread may make one meanwhile). A
/// `mkdir` first, a parent only when it says the parent is missing (no look at what exists).
fn make_parents(path: &Path) -> io::Result<u32> {
    let mut todo: Vec<&Path> = path.parent().into_iter().filter(|d| !d.as_os_str().is_empty()).collect();
    let mut depth = 0;
    while let Some(&dir) = todo.last() {
        match std::fs::create_dir(dir) {
            Ok(()) => {
                depth = depth.max(todo.len() as u32);
                todo.pop();
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                todo.pop();
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match dir.parent() {
                Some(up) if !up.as_os_str().is_empty() => todo.push(up),
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    Ok(depth)
}

/// Whether each of `paths` is a directory, on up to `threads` threads, in order (a dispatch
/// round asks it of the thousands of queues the commitlog shows moving).
pub fn dirs_exist(paths: &[String], threads: usize) -> Vec<bool> {
    crate::par::in_order(paths.len(), threads, |i| Path::new(&paths[i]).is_dir(), false)
}

/// [`append_at`] of each `(paths[i], positions[i], datas[i])` on up to `threads` threads, in order.
/// A file named twice gets its appends one after the other as listed: the call then runs on one
/// thread (the threads take ranges of the items, which would race for it).
pub fn append_many(paths: &[String], positions: &[u64], datas: &[&[u8]], threads: usize) -> Vec<Appended> {
    let one = |i: usize| append_at(Path::new(&paths[i]), positions[i], datas[i]);
    let mut seen = std::collections::HashSet::with_capacity(paths.len());
    let threads = if paths.iter().all(|p| seen.insert(p.as_str())) { threads } else { 1 };
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
    fn a_file_named_twice_gets_its_appends_in_order() {
        let d = Dir::new();
        let paths: Vec<String> = (0..800).map(|i| d.0.join(format!("f{}", i % 400)).to_string_lossy().into()).collect();
        for p in &paths[..400] {
            std::fs::write(p, b"a").unwrap();
        }
        // the first 400 append at 1, the second 400 (the same files, on another range) at 2
        let positions: Vec<u64> = (0..800).map(|i| if i < 400 { 1 } else { 2 }).collect();
        let datas: Vec<&[u8]> = (0..800).map(|i| if i < 400 { &b"b"[..] } else { &b"c"[..] }).collect();
        for _ in 0..20 {
            let got = append_many(&paths, &positions, &datas, 4);
            assert!(got.iter().all(|g| matches!(g, Appended::Done(0))), "{got:?}");
            for p in &paths[..400] {
                assert_eq!(std::fs::read(p).unwrap(), b"abc");
                std::fs::write(p, b"a").unwrap();
            }
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
            if i % 5 == 4 && positions[i] == 0 {
                assert_eq!(got[i], Appended::Done(1), "made at position 0");
                assert_eq!(now.unwrap(), bodies[i]);
            } else if i % 5 == 4 {
                assert_eq!(got[i], Appended::Missing);
                assert_eq!(now, None, "no file is made past position 0");
            } else if i % 3 == 0 {
                assert_eq!(got[i], Appended::Mismatch((i % 7) as u64));
                assert_eq!(now.unwrap(), vec![b'a'; i % 7]);
            } else {
                assert_eq!(got[i], Appended::Done(0));
                assert_eq!(now.unwrap(), [vec![b'a'; i % 7], bodies[i].clone()].concat());
            }
        }
    }

    #[test]
    fn an_append_at_zero_makes_the_file_and_its_directories() {
        let d = Dir::new();
        let at = |rel: &str| d.0.join(rel).to_string_lossy().into_owned();
        std::fs::create_dir_all(d.0.join("t/0")).unwrap();
        std::fs::write(at("t/0/full"), b"xyz").unwrap();
        std::fs::write(at("t/0/empty"), b"").unwrap();
        let paths = vec![
            at("t/0/new"),       // its directory exists: the file's entry alone
            at("t/1/CL/0"),      // two directories made
            at("t/1/CQ/0"),      // one more (t/1 was made just before)
            at("u/2/CL/0"),      // three
            at("t/0/full"),      // exists, not empty: nothing written
            at("t/0/empty"),     // exists, empty: written, nothing made
            at("t/0/new/below"), // a file where a directory is needed
        ];
        let datas: Vec<&[u8]> = vec![b"a", b"bb", b"c", b"dddd", b"e", b"f", b"g"];
        let got = append_many(&paths, &[0; 7], &datas, 1);
        assert_eq!(got[..6], [Appended::Done(1), Appended::Done(3), Appended::Done(2), Appended::Done(4),
                              Appended::Mismatch(3), Appended::Done(0)]);
        assert!(matches!(got[6], Appended::Failed(_)), "{:?}", got[6]);
        for (p, want) in [(0, &b"a"[..]), (1, b"bb"), (2, b"c"), (3, b"dddd"), (4, b"xyz"), (5, b"f")] {
            assert_eq!(std::fs::read(&paths[p]).unwrap(), want);
        }
        // side by side on threads: every file made once, with its bytes
        let many: Vec<String> = (0..300).map(|i| at(&format!("m/{}/{}/f", i % 7, i))).collect();
        let bodies: Vec<Vec<u8>> = (0..300).map(|i| vec![b'z'; 1 + i % 5]).collect();
        let slices: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
        let done = append_many(&many, &[0; 300], &slices, 3);
        for i in 0..300 {
            assert!(matches!(done[i], Appended::Done(n) if (2..=4).contains(&n)), "{i}: {:?}", done[i]);
            assert_eq!(std::fs::read(&many[i]).unwrap(), bodies[i]);
        }
    }

    #[test]
    fn tells_directories_from_files_and_absent_paths() {
        let d = Dir::new();
        std::fs::create_dir_all(d.0.join("t/0")).unwrap();
        std::fs::write(d.0.join("t/f"), b"x").unwrap();
        let paths: Vec<String> = (0..600)
            .map(|i| ["t/0", "t/f", "t/1", "u/0"][i % 4])
            .map(|rel| d.0.join(rel).to_string_lossy().into_owned())
            .collect();
        let got = dirs_exist(&paths, 3);
        assert_eq!(got, (0..600).map(|i| i % 4 == 0).collect::<Vec<_>>());
    }
}
