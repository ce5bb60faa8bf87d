//! One job per item of a batch spread over a few threads, the answers kept in item order: what
//! the kernel's per-queue and per-file calls (`bounds`, `tails`, `files`) share.

/// `one(i)` for each `i` in `0..n` on up to `threads` threads (at least 256 items a thread),
/// in order; a thread that panicked answers `failed` for each of its items.
pub fn in_order<T: Send + Clone>(n: usize, threads: usize, one: impl Fn(usize) -> T + Sync, failed: T) -> Vec<T> {
    let threads = threads.clamp(1, 8).min(n.div_ceil(256).max(1));
    if threads == 1 {
        return (0..n).map(one).collect();
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let range = t * per..((t + 1) * per).min(n);
                let one = &one;
                (range.len(), s.spawn(move || range.map(one).collect::<Vec<_>>()))
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|(len, part)| part.join().unwrap_or_else(|_| vec![failed.clone(); len]))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_in_order_and_a_panicking_part_answers_failed() {
        let got = super::in_order(1000, 3, |i| i * 2, usize::MAX);
        assert_eq!(got, (0..1000).map(|i| i * 2).collect::<Vec<_>>());
        let got = super::in_order(1000, 2, |i| if i == 999 { panic!("boom") } else { i }, usize::MAX);
        assert_eq!(got[..500], (0..500).collect::<Vec<_>>()[..]);
        assert!(got[500..].iter().all(|&v| v == usize::MAX));
    }
}
