//! Items put into a local index file (spec §6.2): each item links to the previous head of its
//! slot and becomes the new head, as upstream's `IndexStoreFile.putKey` does one key at a time.
//! The slot table is the file's own (big-endian, 8 bytes a slot: head, unused); the items come
//! back as bytes to be written at the file's next item positions.

pub const ITEM_SIZE: usize = 32;
const SLOT_SIZE: usize = 8;
/// How many rows ahead [`link_items`] asks for a slot's cache line.
const PREFETCH_ROWS: usize = 16;

/// Ask the CPU for the cache line of `table[at]` (checked in bounds; a hint, nothing where the
/// target has no prefetch instruction).
#[inline(always)]
fn prefetch(table: &[u8], at: usize) {
    if let Some(byte) = table.get(at) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint that never faults, and the address is inside `table`.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = byte;
    }
}

/// The columns of the rows to put.
pub struct Rows<'a> {
    pub hashes: &'a [i32],
    pub topic_ids: &'a [i32],
    pub queue_ids: &'a [i32],
    pub offsets: &'a [i64],
    pub sizes: &'a [i32],
    pub timestamps: &'a [i64],
}

/// What putting rows did: the items' bytes, how many slots were empty before, the newest store
/// time put.
#[derive(Debug)]
pub struct Linked {
    pub items: Vec<u8>,
    pub new_slots: u64,
    pub end_timestamp: i64,
}

/// Put rows `rows[j]` (in that order) as items `first + j`, into the slot table `table` of
/// `slots` slots. Every row's hash must be non-negative modulo `slots` (the caller puts the
/// rare `Integer.MIN_VALUE` hash, whose slot lies in the header, itself). The table's heads are
/// updated in place; an error names the first row that is not, and then nothing is updated
/// (every row is checked before the first head changes).
pub fn link_items(
    table: &mut [u8],
    slots: u32,
    cols: &Rows<'_>,
    rows: &[i64],
    first: i64,
    begin_timestamp: i64,
) -> Result<Linked, String> {
    let mut out = Linked { items: Vec::with_capacity(rows.len() * ITEM_SIZE), new_slots: 0, end_timestamp: i64::MIN };
    if slots == 0 || table.len() < slots as usize * SLOT_SIZE {
        return Err(format!("a table of {} bytes cannot hold {slots} slots", table.len()));
    }
    let n = cols.hashes.len();
    if [cols.topic_ids.len(), cols.queue_ids.len(), cols.offsets.len(), cols.sizes.len(), cols.timestamps.len()].iter().any(|&l| l != n) {
        return Err("the row columns differ in length".into());
    }
    // The slots first, checked, so the loop below can prefetch the head it will need a few rows
    // ahead: a head is a random 4 bytes of a table of tens of megabytes, a cache and TLB miss
    // each, and waiting for them one at a time would take most of the loop's time.
    let mut at_of = Vec::with_capacity(rows.len());
    for &r in rows {
        let r = usize::try_from(r).ok().filter(|&r| r < n).ok_or_else(|| format!("row {r} is not in the batch of {n}"))?;
        let hash = cols.hashes[r];
        let slot = i64::from(hash) % i64::from(slots); // Java's %: the sign of the dividend
        let Ok(slot) = usize::try_from(slot) else {
            return Err(format!("row {r}: hash {hash} has its slot in the header"));
        };
        at_of.push((r, slot * SLOT_SIZE));
    }
    for (j, &(r, at)) in at_of.iter().enumerate() {
        if let Some(&(_, ahead)) = at_of.get(j + PREFETCH_ROWS) {
            prefetch(table, ahead);
        }
        let hash = cols.hashes[r];
        let head: [u8; 4] = table[at..at + 4].try_into().expect("4 bytes");
        let old = i32::from_be_bytes(head);
        if old <= 0 {
            out.new_slots += 1;
        }
        let index = first + j as i64;
        let time_diff = (cols.timestamps[r].wrapping_sub(begin_timestamp) / 1000) as i32;
        out.items.extend(hash.to_be_bytes());
        out.items.extend(cols.topic_ids[r].to_be_bytes());
        out.items.extend(cols.queue_ids[r].to_be_bytes());
        out.items.extend(cols.offsets[r].to_be_bytes());
        out.items.extend(cols.sizes[r].to_be_bytes());
        out.items.extend(time_diff.to_be_bytes());
        out.items.extend(old.max(0).to_be_bytes());
        table[at..at + 4].copy_from_slice(&(index as i32).to_be_bytes());
        out.end_timestamp = out.end_timestamp.max(cols.timestamps[r]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(items: &[u8], j: usize) -> (i32, i64, i32, i32) {
        let it = &items[j * ITEM_SIZE..(j + 1) * ITEM_SIZE];
        let i32_at = |a: usize| i32::from_be_bytes(it[a..a + 4].try_into().unwrap());
        (i32_at(0), i64::from_be_bytes(it[12..20].try_into().unwrap()), i32_at(24), i32_at(28))
    }

    #[test]
    fn items_chain_through_their_slots() {
        let mut table = vec![0u8; 4 * SLOT_SIZE];
        table[0..4].copy_from_slice(&9i32.to_be_bytes()); // slot 0 already heads item 9
        let hashes = [4, 1, 8, 5];
        let cols = Rows { hashes: &hashes, topic_ids: &[1; 4], queue_ids: &[2; 4], offsets: &[10, 11, 12, 13], sizes: &[5; 4], timestamps: &[2500, 3999, 1000, -1500] };
        let got = link_items(&mut table, 4, &cols, &[0, 1, 2, 3], 10, 1000).unwrap();
        // slot 0: 9 <- 10 (hash 4) <- 12 (hash 8); slot 1: 11 (hash 1) <- 13 (hash 5)
        assert_eq!(item(&got.items, 0), (4, 10, 1, 9));
        assert_eq!(item(&got.items, 1), (1, 11, 2, 0));
        assert_eq!(item(&got.items, 2), (8, 12, 0, 10));
        assert_eq!(item(&got.items, 3), (5, 13, -2, 11)); // (int) (-2500 / 1000): truncated
        assert_eq!(i32::from_be_bytes(table[0..4].try_into().unwrap()), 12);
        assert_eq!(i32::from_be_bytes(table[8..12].try_into().unwrap()), 13);
        assert_eq!((got.new_slots, got.end_timestamp), (1, 3999));
    }

    #[test]
    fn rows_outside_the_batch_and_header_slots_are_refused() {
        let mut table = vec![0u8; 3 * SLOT_SIZE];
        let cols = Rows { hashes: &[i32::MIN], topic_ids: &[0], queue_ids: &[0], offsets: &[0], sizes: &[0], timestamps: &[0] };
        assert!(link_items(&mut table, 3, &cols, &[1], 1, 0).unwrap_err().contains("not in the batch"));
        assert!(link_items(&mut table, 3, &cols, &[0], 1, 0).unwrap_err().contains("header"));
        assert!(link_items(&mut table, 9, &cols, &[0], 1, 0).unwrap_err().contains("cannot hold"));
    }

    #[test]
    fn a_bad_row_late_in_the_batch_changes_no_head() {
        let mut table = vec![0u8; 4 * SLOT_SIZE];
        let hashes = [1, 2, 3];
        let cols = Rows { hashes: &hashes, topic_ids: &[0; 3], queue_ids: &[0; 3], offsets: &[0; 3], sizes: &[0; 3], timestamps: &[0; 3] };
        assert!(link_items(&mut table, 4, &cols, &[0, 1, 7], 1, 0).unwrap_err().contains("row 7"));
        assert!(table.iter().all(|&b| b == 0));
    }

    #[test]
    fn chains_hold_across_many_more_rows_than_are_prefetched() {
        // 40 rows over 3 slots: each item must point at the previous row of its own slot
        let slots = 3u32;
        let n = 40usize;
        let hashes: Vec<i32> = (0..n as i32).map(|i| i * 7 + 1).collect();
        let offsets: Vec<i64> = (0..n as i64).collect();
        let cols = Rows { hashes: &hashes, topic_ids: &vec![0; n], queue_ids: &vec![0; n], offsets: &offsets, sizes: &vec![1; n], timestamps: &vec![0; n] };
        let rows: Vec<i64> = (0..n as i64).collect();
        let mut table = vec![0u8; slots as usize * SLOT_SIZE];
        let got = link_items(&mut table, slots, &cols, &rows, 1, 0).unwrap();
        let mut last = [0i32; 3];
        for j in 0..n {
            let slot = (hashes[j] % 3) as usize;
            assert_eq!(item(&got.items, j).3, last[slot], "row {j}");
            last[slot] = 1 + j as i32;
        }
        for slot in 0..3 {
            let at = slot * SLOT_SIZE;
            assert_eq!(i32::from_be_bytes(table[at..at + 4].try_into().unwrap()), last[slot]);
        }
        assert_eq!(got.new_slots, 3);
    }
}
