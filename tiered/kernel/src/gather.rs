//! The scatter-read plan of :mod:`tiered.broker.coalesce`: many queues' units, sorted by
//! physical offset, merged into ranges of one commitlog file each (through gaps of at most
//! `gap_bytes`, read into a scratch buffer) and turned into `iovec`s that land every unit at its
//! place in its own request's buffer.

/// One range to read: the commitlog file's index among `bases` (-1 before the first), its
/// physical `[begin, end)`, its `iovec`s `[first_entry, end_entry)` and the requests with units
/// in it `owners[owner_bounds[k]..owner_bounds[k + 1]]` (sorted, distinct).
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub iov: Vec<[u64; 2]>,
    pub ranges: Vec<[i64; 5]>,
    pub owners: Vec<i64>,
    pub owner_bounds: Vec<i64>,
}

/// Request `r`'s units `(offsets[r][j], sizes[r][j])` go back to back, in that order, into the
/// buffer at address `addrs[r]`; gaps into the one at `scratch` (at least `gap_bytes` long).
/// Units are read in physical order; a range ends at a gap wider than `gap_bytes`, at units
/// that overlap, and at a file boundary (`bases`: the files' first physical offsets, sorted).
pub fn plan(
    offsets: &[&[i64]],
    sizes: &[&[i64]],
    addrs: &[u64],
    scratch: u64,
    bases: &[i64],
    gap_bytes: i64,
) -> Plan {
    let mut units: Vec<(i64, i64, usize, u64)> = Vec::new();
    for (r, (o, z)) in offsets.iter().zip(sizes).enumerate() {
        let mut dst = 0u64;
        for (&off, &len) in o.iter().zip(z.iter()) {
            units.push((off, len, r, dst));
            dst = dst.wrapping_add(len as u64);
        }
    }
    units.sort_by_key(|u| u.0); // stable: equal offsets keep their request order
    let file_of = |off: i64| bases.partition_point(|&b| b <= off) as i64 - 1;
    let mut plan = Plan::default();
    let mut owners: Vec<i64> = Vec::new();
    let mut i = 0;
    while i < units.len() {
        let (begin, fi) = (units[i].0, file_of(units[i].0));
        let first_entry = plan.iov.len() as i64;
        let mut end = begin;
        let mut j = i;
        owners.clear();
        while j < units.len() {
            let (off, len, own, dst) = units[j];
            if j > i {
                let gap = off - end;
                if gap > gap_bytes || gap < 0 || file_of(off) != fi {
                    break;
                }
                if gap > 0 {
                    plan.iov.push([scratch, gap as u64]);
                }
            }
            plan.iov.push([addrs[own].wrapping_add(dst), len as u64]);
            owners.push(own as i64);
            end = off + len;
            j += 1;
        }
        owners.sort_unstable();
        owners.dedup();
        plan.owner_bounds.push(plan.owners.len() as i64);
        plan.owners.extend_from_slice(&owners);
        plan.ranges.push([fi, begin, end, first_entry, plan.iov.len() as i64]);
        i = j;
    }
    plan.owner_bounds.push(plan.owners.len() as i64);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_two_requests_interleaved_read_as_one_range_through_small_gaps() {
        // request 0: units at 0 (10 bytes) and 30 (5); request 1: at 12 (8) and 100 (4)
        let p = plan(&[&[0, 30], &[12, 100]], &[&[10, 5], &[8, 4]], &[1000, 2000], 9000, &[0], 16);
        assert_eq!(
            p.iov,
            vec![[1000, 10], [9000, 2], [2000, 8], [9000, 10], [1010, 5]]
                .into_iter()
                .chain([[2008, 4]])
                .collect::<Vec<_>>()
        );
        // the gap before 100 (65 bytes) is wider than 16: a second range
        assert_eq!(p.ranges, vec![[0, 0, 35, 0, 5], [0, 100, 104, 5, 6]]);
        assert_eq!((p.owners, p.owner_bounds), (vec![0, 1, 1], vec![0, 2, 3]));
    }

    #[test]
    fn a_range_ends_at_a_file_boundary_and_at_overlapping_units() {
        let p = plan(&[&[90, 100, 100]], &[&[10, 5, 5]], &[0], 7, &[0, 100], 1 << 20);
        assert_eq!(p.ranges.iter().map(|r| (r[0], r[1], r[2])).collect::<Vec<_>>(), vec![(0, 90, 100), (1, 100, 105), (1, 100, 105)]);
        assert_eq!(p.iov, vec![[0, 10], [10, 5], [15, 5]]);
        // before the first file
        assert_eq!(plan(&[&[5]], &[&[1]], &[0], 7, &[10], 8).ranges[0][0], -1);
        assert_eq!(plan(&[], &[], &[], 7, &[0], 8), Plan { owner_bounds: vec![0], ..Plan::default() });
    }
}

/// `struct iovec` of Linux (x86_64, aarch64): a pointer and a `size_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IoVec {
    base: *mut u8,
    len: usize,
}

extern "C" {
    fn preadv(fd: i32, iov: *const IoVec, iovcnt: i32, offset: i64) -> isize;
}

/// `preadv` the pieces `iov` (as `[base, len]` pairs) from file position `at`, `iov_max` a
/// call, until one reads short; the bytes read.
///
/// # Safety
/// Every `[base, len]` must be writable memory of `len` bytes that nothing else touches during
/// the call.
pub unsafe fn preadv_all(fd: i32, mut at: i64, iov: &[[u64; 2]], iov_max: usize) -> std::io::Result<u64> {
    let vecs: Vec<IoVec> = iov.iter().map(|e| IoVec { base: e[0] as usize as *mut u8, len: e[1] as usize }).collect();
    let mut done = 0u64;
    for part in vecs.chunks(iov_max.max(1)) {
        let want: u64 = part.iter().map(|v| v.len as u64).sum();
        let got = loop {
            // SAFETY: the caller vouches for the pieces; `part` outlives the call
            let r = unsafe { preadv(fd, part.as_ptr(), part.len() as i32, at) };
            if r >= 0 {
                break r as u64;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        done += got;
        if got != want {
            break;
        }
        at += got as i64;
    }
    Ok(done)
}

/// [`preadv_all`], the second half of the pieces (from an `iov_max` boundary) read by a second
/// thread at the same time when `split`; the bytes read by both.
///
/// # Safety
/// As [`preadv_all`].
pub unsafe fn read_pieces(fd: i32, at: i64, iov: &[[u64; 2]], iov_max: usize, split: bool) -> std::io::Result<u64> {
    if !split || iov.len() < 2 {
        // SAFETY: passed on from the caller
        return unsafe { preadv_all(fd, at, iov, iov_max) };
    }
    let half = match iov.len() / 2 / iov_max.max(1) * iov_max.max(1) {
        0 => iov.len() / 2,
        h => h,
    };
    let (first, second) = iov.split_at(half);
    let second_at = at + first.iter().map(|e| e[1] as i64).sum::<i64>();
    std::thread::scope(|s| {
        // SAFETY: passed on from the caller; the halves are disjoint pieces
        let other = s.spawn(move || unsafe { preadv_all(fd, second_at, second, iov_max) });
        let mine = unsafe { preadv_all(fd, at, first, iov_max) };
        let theirs = other.join().unwrap_or_else(|_| Err(std::io::Error::other("read thread panicked")));
        Ok(mine? + theirs?)
    })
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn pieces_land_in_their_buffers_split_or_not_and_a_short_read_stops() {
        let mut f = tempfile_in_tmp();
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&content).unwrap();
        for split in [false, true] {
            let mut a = vec![0u8; 3000];
            let mut b = vec![0u8; 4000];
            let iov = vec![[a.as_mut_ptr() as u64, 3000], [b.as_mut_ptr() as u64, 4000]];
            // SAFETY: a and b are live, writable and untouched during the call
            let done = unsafe { read_pieces(f.as_raw_fd(), 100, &iov, 1, split) }.unwrap();
            assert_eq!(done, 7000);
            assert_eq!(&a[..], &content[100..3100]);
            assert_eq!(&b[..], &content[3100..7100]);
        }
        let mut c = vec![0u8; 50];
        let iov = vec![[c.as_mut_ptr() as u64, 50]];
        // SAFETY: as above
        assert_eq!(unsafe { read_pieces(f.as_raw_fd(), 9_980, &iov, 1024, false) }.unwrap(), 20);
        assert!(unsafe { read_pieces(-1, 0, &iov, 1024, true) }.is_err());
        drop(c);
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("tiered-kernel-read-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
