//! `tiered._kernel`: the per-message loops of rocketmq-tiered, called from Python on whole
//! batches (buffers in, buffers out, the GIL released while they run).
//!
//! The plain-Rust modules hold the logic and their own tests (`cargo test`); the `python`
//! feature adds the PyO3 glue that setuptools-rust builds into the extension.

pub mod bounds;
pub mod decode;
pub mod files;
pub mod gather;
pub mod java;
pub mod json_layout;
pub mod index_file;
pub mod keys;
pub mod par;
pub mod tags;
pub mod tails;
pub mod unit;
pub mod walk;

#[cfg(feature = "python")]
mod python {
    use pyo3::buffer::{Element, PyBuffer};
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    /// A C-contiguous buffer's items, valid while `buf` is held (the exporter cannot resize it).
    fn items<'a, T: Element>(buf: &'a PyBuffer<T>, name: &str) -> PyResult<&'a [T]> {
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("{name} must be a contiguous buffer")));
        }
        // SAFETY: the buffer is C-contiguous, holds item_count() items of T (checked by
        // PyBuffer::get) and stays exported, unmoved and unresized while `buf` lives.
        Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, buf.item_count()) })
    }

    fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
        // SAFETY: plain integers, read as their bytes (native order, as numpy's frombuffer reads)
        unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
    }

    /// `index_items(data, starts, sizes, prefix_hash) -> (msg, hash, slow, inconsistent)`: the
    /// key index items of the units `(starts[i], sizes[i])` of `data` (int64 buffers), keys
    /// hashed as `topic#key` from `prefix_hash` (`String.hashCode` of `topic + "#"`, unsigned).
    /// `msg` (int64), `hash` (int32) and `slow` (int64: units whose keys are not valid UTF-8)
    /// come back as bytes in native order; `inconsistent` counts units not indexed.
    #[pyfunction]
    fn index_items<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        prefix_hash: u32,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, usize)> {
        let (data, starts, sizes) =
            (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
        let (d, s, z) = (items(&data, "data")?, items(&starts, "starts")?, items(&sizes, "sizes")?);
        if s.len() != z.len() {
            return Err(PyValueError::new_err(format!(
                "starts ({}) and sizes ({}) must have one entry per unit",
                s.len(),
                z.len()
            )));
        }
        let out = py.detach(|| crate::keys::index_items(d, s, z, prefix_hash));
        Ok((
            PyBytes::new(py, as_bytes(&out.msg)),
            PyBytes::new(py, as_bytes(&out.hash)),
            PyBytes::new(py, as_bytes(&out.slow)),
            out.inconsistent,
        ))
    }

    /// `index_columns(data, starts, sizes, prefix_hash, topic_id, queue_id, flat_offsets,
    /// timestamps) -> (hash, topic_ids, queue_ids, offsets, sizes, timestamps, key_counts, msg,
    /// slow, inconsistent)`: `index_items` with the columns of an index batch (see
    /// `keys::index_columns`; `flat_offsets` and `timestamps` per unit), all as bytes in native
    /// order: int32 hash, topic_ids, queue_ids and sizes, int64 the rest.
    #[pyfunction]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn index_columns<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        prefix_hash: u32,
        topic_id: i32,
        queue_id: i32,
        flat_offsets: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<Bound<'py, PyBytes>>, usize)> {
        let (data, starts, sizes) =
            (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
        let (offsets, times) = (PyBuffer::<i64>::get(flat_offsets)?, PyBuffer::<i64>::get(timestamps)?);
        let (d, s, z) = (items(&data, "data")?, items(&starts, "starts")?, items(&sizes, "sizes")?);
        let (o, t) = (items(&offsets, "flat_offsets")?, items(&times, "timestamps")?);
        same_length(&[("starts", s.len()), ("sizes", z.len()), ("flat_offsets", o.len()), ("timestamps", t.len())])?;
        let cols = py.detach(|| crate::keys::index_columns(d, s, z, prefix_hash, o, t));
        let n = cols.items.hash.len();
        let mut out = column_bytes(py, &cols);
        let ids = [as_bytes(&vec![topic_id; n]), as_bytes(&vec![queue_id; n])].map(|b| PyBytes::new(py, b));
        out.splice(1..1, ids);
        Ok((out, cols.items.inconsistent))
    }

    /// An index batch's columns as bytes in native order: hash, offsets, sizes, timestamps,
    /// key_counts, msg, slow.
    fn column_bytes<'py>(py: Python<'py>, cols: &crate::keys::Columns) -> Vec<Bound<'py, PyBytes>> {
        let bytes = |b: &[u8]| PyBytes::new(py, b);
        vec![
            bytes(as_bytes(&cols.items.hash)),
            bytes(as_bytes(&cols.offsets)),
            bytes(as_bytes(&cols.sizes)),
            bytes(as_bytes(&cols.timestamps)),
            bytes(as_bytes(&cols.key_counts)),
            bytes(as_bytes(&cols.items.msg)),
            bytes(as_bytes(&cols.items.slow)),
        ]
    }

    /// `index_columns_many(datas, bounds, starts, sizes, prefixes, flat_offsets, timestamps) ->
    /// (hash, offsets, sizes, timestamps, key_counts, msg, slow, inconsistent)`: `index_columns`
    /// of many batches at once (`keys::index_columns_many`): batch `b` is units `bounds[b]` to
    /// `bounds[b + 1]` (int64, one more than `datas`), its bytes `datas[b]`, its keys hashed from
    /// `prefixes[b]` (uint32); `msg`, `slow` and `key_counts` number the units of all batches.
    #[pyfunction]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn index_columns_many<'py>(
        py: Python<'py>,
        datas: Vec<Bound<'py, PyAny>>,
        bounds: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        prefixes: &Bound<'py, PyAny>,
        flat_offsets: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<Bound<'py, PyBytes>>, usize)> {
        let (bounds, prefixes) = (PyBuffer::<i64>::get(bounds)?, PyBuffer::<u32>::get(prefixes)?);
        let (starts, sizes) = (PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
        let (offsets, times) = (PyBuffer::<i64>::get(flat_offsets)?, PyBuffer::<i64>::get(timestamps)?);
        let (b, p) = (items(&bounds, "bounds")?, items(&prefixes, "prefixes")?);
        let (s, z) = (items(&starts, "starts")?, items(&sizes, "sizes")?);
        let (o, t) = (items(&offsets, "flat_offsets")?, items(&times, "timestamps")?);
        same_length(&[("starts", s.len()), ("sizes", z.len()), ("flat_offsets", o.len()), ("timestamps", t.len())])?;
        same_length(&[("datas", datas.len()), ("prefixes", p.len()), ("bounds less one", b.len().saturating_sub(1))])?;
        let ascending = b.first() == Some(&0) && b.windows(2).all(|w| w[0] <= w[1]);
        if !ascending || b.last() != Some(&(s.len() as i64)) {
            return Err(PyValueError::new_err(format!(
                "bounds must ascend from 0 to the {} units, one more than the {} batches",
                s.len(),
                datas.len()
            )));
        }
        let buffers = datas.iter().map(PyBuffer::<u8>::get).collect::<PyResult<Vec<_>>>()?;
        let slices = buffers.iter().map(|d| items(d, "datas")).collect::<PyResult<Vec<_>>>()?;
        let bounds: Vec<usize> = b.iter().map(|&x| x as usize).collect();
        let cols = py.detach(|| crate::keys::index_columns_many(&slices, &bounds, s, z, p, o, t));
        Ok((column_bytes(py, &cols), cols.items.inconsistent))
    }

    /// A writable C-contiguous buffer's bytes (a read-only one is refused).
    fn bytes_mut<'a>(buf: &'a PyBuffer<u8>, name: &str) -> PyResult<&'a mut [u8]> {
        if buf.readonly() || !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("{name} must be a writable contiguous buffer")));
        }
        // SAFETY: writable and C-contiguous (checked), item_count() bytes, exported and unmoved
        // while `buf` lives; no other slice of it is made in this call
        Ok(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut u8, buf.item_count()) })
    }

    fn same_length(what: &[(&str, usize)]) -> PyResult<()> {
        let n = what[0].1;
        match what.iter().find(|(_, l)| *l != n) {
            None => Ok(()),
            Some((name, l)) => Err(PyValueError::new_err(format!(
                "{name} has {l} entries where {} has {n}: one entry per unit",
                what[0].0
            ))),
        }
    }

    /// `check_units(data, starts, sizes, queue_offsets, physical_offsets=None) -> int`: the
    /// index of the first unit whose header disagrees with its consumequeue unit, or the
    /// number of units when all agree.
    #[pyfunction]
    #[pyo3(signature = (data, starts, sizes, queue_offsets, physical_offsets=None))]
    fn check_units(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        starts: &Bound<'_, PyAny>,
        sizes: &Bound<'_, PyAny>,
        queue_offsets: &Bound<'_, PyAny>,
        physical_offsets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (data, starts, sizes) =
            (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
        let queue_offsets = PyBuffer::<i64>::get(queue_offsets)?;
        let physical = physical_offsets.map(PyBuffer::<i64>::get).transpose()?;
        let (d, s, z) = (items(&data, "data")?, items(&starts, "starts")?, items(&sizes, "sizes")?);
        let q = items(&queue_offsets, "queue_offsets")?;
        let p = physical.as_ref().map(|b| items(b, "physical_offsets")).transpose()?;
        let mut lengths = vec![("starts", s.len()), ("sizes", z.len()), ("queue_offsets", q.len())];
        lengths.extend(p.map(|p| ("physical_offsets", p.len())));
        same_length(&lengths)?;
        Ok(py.detach(|| crate::unit::check_units(d, s, z, q, p)))
    }

    /// `check_batch(data, sizes, first_queue_offset, physical_offsets=None) -> (good, starts,
    /// timestamps, first_time, last_time)`: `check_units` and `store_timestamps` of units held
    /// back to back in `data` in one pass (see `unit::check_batch`); `starts` and `timestamps`
    /// (of the `good` units) come back as int64 bytes in native order.
    #[pyfunction]
    #[pyo3(signature = (data, sizes, first_queue_offset, physical_offsets=None))]
    #[allow(clippy::type_complexity)]
    fn check_batch<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        first_queue_offset: i64,
        physical_offsets: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>, i64, i64)> {
        let (data, sizes) = (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(sizes)?);
        let physical = physical_offsets.map(PyBuffer::<i64>::get).transpose()?;
        let (d, z) = (items(&data, "data")?, items(&sizes, "sizes")?);
        let p = physical.as_ref().map(|b| items(b, "physical_offsets")).transpose()?;
        if let Some(p) = p {
            same_length(&[("sizes", z.len()), ("physical_offsets", p.len())])?;
        }
        let out = py.detach(|| crate::unit::check_batch(d, z, first_queue_offset, p));
        Ok((
            out.good,
            PyBytes::new(py, as_bytes(&out.starts)),
            PyBytes::new(py, as_bytes(&out.timestamps)),
            out.first_time,
            out.last_time,
        ))
    }

    /// `check_batches(datas, sizes, counts, first_queue_offsets, physical_offsets=None) ->
    /// (good, starts, timestamps, first_times, last_times)`: `check_batch` of each of many
    /// batches (`unit::check_batches`: batch `i` holds `counts[i]` units in `datas[i]`, their
    /// sizes and physical offsets the next `counts[i]` of the joined columns). Every result
    /// comes back as int64 bytes in native order: `good`, `first_times` and `last_times` one per
    /// batch; `starts` and `timestamps` one per unit, joined (a timestamp past its batch's
    /// `good` units is 0).
    #[pyfunction]
    #[pyo3(signature = (datas, sizes, counts, first_queue_offsets, physical_offsets=None))]
    #[allow(clippy::type_complexity)]
    fn check_batches<'py>(
        py: Python<'py>,
        datas: Vec<Bound<'py, PyAny>>,
        sizes: &Bound<'py, PyAny>,
        counts: &Bound<'py, PyAny>,
        first_queue_offsets: &Bound<'py, PyAny>,
        physical_offsets: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
    )> {
        let (sizes, counts) = (PyBuffer::<i64>::get(sizes)?, PyBuffer::<i64>::get(counts)?);
        let firsts = PyBuffer::<i64>::get(first_queue_offsets)?;
        let physical = physical_offsets.map(PyBuffer::<i64>::get).transpose()?;
        let (z, c, q) = (items(&sizes, "sizes")?, items(&counts, "counts")?, items(&firsts, "first_queue_offsets")?);
        let p = physical.as_ref().map(|b| items(b, "physical_offsets")).transpose()?;
        same_length(&[("datas", datas.len()), ("counts", c.len()), ("first_queue_offsets", q.len())])?;
        if let Some(p) = p {
            same_length(&[("sizes", z.len()), ("physical_offsets", p.len())])?;
        }
        let counts: Vec<usize> = c.iter().map(|&n| usize::try_from(n)).collect::<Result<_, _>>().map_err(|_| {
            PyValueError::new_err("counts must not be negative")
        })?;
        if counts.iter().sum::<usize>() != z.len() {
            return Err(PyValueError::new_err(format!("counts add up to {}, not the {} sizes", counts.iter().sum::<usize>(), z.len())));
        }
        let buffers = datas.iter().map(PyBuffer::<u8>::get).collect::<PyResult<Vec<_>>>()?;
        let slices = buffers.iter().map(|b| items(b, "datas")).collect::<PyResult<Vec<_>>>()?;
        let checked = py.detach(|| crate::unit::check_batches(&slices, z, &counts, q, p));
        let mut good = Vec::with_capacity(checked.len());
        let (mut first, mut last) = (Vec::with_capacity(checked.len()), Vec::with_capacity(checked.len()));
        let (mut starts, mut times) = (Vec::with_capacity(z.len()), Vec::with_capacity(z.len()));
        for (b, &n) in checked.iter().zip(&counts) {
            good.push(b.good as i64);
            first.push(b.first_time);
            last.push(b.last_time);
            starts.extend_from_slice(&b.starts);
            times.extend_from_slice(&b.timestamps);
            times.resize(times.len() + n - b.timestamps.len(), 0);
        }
        let out = |v: &Vec<i64>| PyBytes::new(py, as_bytes(v));
        Ok((out(&good), out(&starts), out(&times), out(&first), out(&last)))
    }

    /// `rewrite_batches(datas, starts, offsets, counts)`: `rewrite_physical_offsets` of each
    /// of many batches (batch `i`'s units are the next `counts[i]` of `starts` and `offsets`),
    /// in place (every `datas[i]` writable; a buffer is written while no other is borrowed).
    #[pyfunction]
    fn rewrite_batches(
        datas: Vec<Bound<'_, PyAny>>,
        starts: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        counts: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (starts, offsets) = (PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(offsets)?);
        let counts = PyBuffer::<i64>::get(counts)?;
        let (s, o, c) = (items(&starts, "starts")?, items(&offsets, "offsets")?, items(&counts, "counts")?);
        same_length(&[("starts", s.len()), ("offsets", o.len())])?;
        same_length(&[("datas", datas.len()), ("counts", c.len())])?;
        if c.iter().any(|&n| n < 0) || c.iter().sum::<i64>() != s.len() as i64 {
            return Err(PyValueError::new_err(format!("counts must be non-negative and add up to the {} starts", s.len())));
        }
        let mut at = 0usize;
        for (data, &n) in datas.iter().zip(c) {
            let n = n as usize;
            let buffer = PyBuffer::<u8>::get(data)?;
            let d = bytes_mut(&buffer, "datas")?;
            crate::unit::rewrite_physical_offsets(d, &s[at..at + n], &o[at..at + n]).map_err(|i| {
                PyValueError::new_err(format!("unit {i} at {} lies outside the {} bytes", s[at + i], d.len()))
            })?;
            at += n;
        }
        Ok(())
    }

    /// `encode_units(offsets, sizes, tags_codes) -> bytes`: consumequeue units (20 bytes each,
    /// big-endian) of three equally long int64 columns.
    #[pyfunction]
    fn encode_units<'py>(
        py: Python<'py>,
        offsets: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        tags_codes: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (o, z, t) =
            (PyBuffer::<i64>::get(offsets)?, PyBuffer::<i64>::get(sizes)?, PyBuffer::<i64>::get(tags_codes)?);
        let (o, z, t) = (items(&o, "offsets")?, items(&z, "sizes")?, items(&t, "tags_codes")?);
        same_length(&[("offsets", o.len()), ("sizes", z.len()), ("tags_codes", t.len())])?;
        match py.detach(|| crate::unit::encode_units(o, z, t)) {
            Ok(units) => Ok(PyBytes::new(py, &units)),
            Err(i) => Err(PyValueError::new_err(format!(
                "sizes must fit in a signed 32-bit int: unit {i} has {}",
                z[i]
            ))),
        }
    }

    /// `store_timestamps(data, starts) -> bytes`: the store timestamp of each unit (int64).
    #[pyfunction]
    fn store_timestamps<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (data, starts) = (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?);
        let (d, s) = (items(&data, "data")?, items(&starts, "starts")?);
        match py.detach(|| crate::unit::store_timestamps(d, s)) {
            Ok(t) => Ok(PyBytes::new(py, as_bytes(&t))),
            Err(i) => Err(PyValueError::new_err(format!(
                "unit {i} at {} has no header inside the {} bytes read",
                s[i],
                d.len()
            ))),
        }
    }

    /// `rewrite_physical_offsets(data, starts, offsets)`: write `offsets[i]` into the physical
    /// offset field of unit `i`, in place (`data` writable).
    #[pyfunction]
    fn rewrite_physical_offsets(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        starts: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (data, starts) = (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?);
        let offsets = PyBuffer::<i64>::get(offsets)?;
        let (d, s, o) = (bytes_mut(&data, "data")?, items(&starts, "starts")?, items(&offsets, "offsets")?);
        same_length(&[("starts", s.len()), ("offsets", o.len())])?;
        py.detach(|| crate::unit::rewrite_physical_offsets(d, s, o)).map_err(|i| {
            PyValueError::new_err(format!("unit {i} at {} lies outside the {} bytes", s[i], d.len()))
        })
    }

    /// `link_items(table, slots, hashes, topic_ids, queue_ids, offsets, sizes, timestamps,
    /// rows, first, begin_timestamp) -> (items, new_slots, end_timestamp)`: put rows `rows`
    /// of the columns as index items `first ..`, chained through the big-endian slot table
    /// `table` (writable, updated in place); the items come back as bytes.
    #[pyfunction]
    #[allow(clippy::too_many_arguments)]
    fn link_items<'py>(
        py: Python<'py>,
        table: &Bound<'py, PyAny>,
        slots: u32,
        hashes: &Bound<'py, PyAny>,
        topic_ids: &Bound<'py, PyAny>,
        queue_ids: &Bound<'py, PyAny>,
        offsets: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
        rows: &Bound<'py, PyAny>,
        first: i64,
        begin_timestamp: i64,
    ) -> PyResult<(Bound<'py, PyBytes>, u64, i64)> {
        let table = PyBuffer::<u8>::get(table)?;
        let (h, t, q) = (PyBuffer::<i32>::get(hashes)?, PyBuffer::<i32>::get(topic_ids)?, PyBuffer::<i32>::get(queue_ids)?);
        let (o, z, ts) = (PyBuffer::<i64>::get(offsets)?, PyBuffer::<i32>::get(sizes)?, PyBuffer::<i64>::get(timestamps)?);
        let rows = PyBuffer::<i64>::get(rows)?;
        let cols = crate::index_file::Rows {
            hashes: items(&h, "hashes")?,
            topic_ids: items(&t, "topic_ids")?,
            queue_ids: items(&q, "queue_ids")?,
            offsets: items(&o, "offsets")?,
            sizes: items(&z, "sizes")?,
            timestamps: items(&ts, "timestamps")?,
        };
        let (tb, r) = (bytes_mut(&table, "table")?, items(&rows, "rows")?);
        let linked = py
            .detach(|| crate::index_file::link_items(tb, slots, &cols, r, first, begin_timestamp))
            .map_err(PyValueError::new_err)?;
        Ok((PyBytes::new(py, &linked.items), linked.new_slots, linked.end_timestamp))
    }

    /// `gather_plan(offsets, sizes, bases, scratch, gap_bytes) -> (buffers, iov, ranges, owners,
    /// owner_bounds)`: a new (unzeroed) bytearray per request, sized for its units, and the
    /// scatter-read plan that fills them (`gather::plan`; `offsets[r]` and `sizes[r]` int64
    /// buffers, `bases` the commitlog files' first offsets, `scratch` a writable buffer of at
    /// least `gap_bytes`): `iov` as `struct iovec`s, `ranges` as five int64 per range, the
    /// owners as int64, all bytes in native order.
    #[pyfunction]
    #[allow(clippy::type_complexity)]
    fn gather_plan<'py>(
        py: Python<'py>,
        offsets: Vec<Bound<'py, PyAny>>,
        sizes: Vec<Bound<'py, PyAny>>,
        bases: &Bound<'py, PyAny>,
        scratch: &Bound<'py, PyAny>,
        gap_bytes: i64,
    ) -> PyResult<(
        Vec<Bound<'py, pyo3::types::PyByteArray>>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
    )> {
        if offsets.len() != sizes.len() {
            return Err(PyValueError::new_err("offsets and sizes must have one buffer per request"));
        }
        let offs = offsets.iter().map(PyBuffer::<i64>::get).collect::<PyResult<Vec<_>>>()?;
        let lens = sizes.iter().map(PyBuffer::<i64>::get).collect::<PyResult<Vec<_>>>()?;
        let o = offs.iter().map(|b| items(b, "offsets")).collect::<PyResult<Vec<_>>>()?;
        let z = lens.iter().map(|b| items(b, "sizes")).collect::<PyResult<Vec<_>>>()?;
        for (a, b) in o.iter().zip(&z) {
            same_length(&[("offsets", a.len()), ("sizes", b.len())])?;
        }
        let bases = PyBuffer::<i64>::get(bases)?;
        let scratch = PyBuffer::<u8>::get(scratch)?;
        let scratch_bytes = bytes_mut(&scratch, "scratch")?;
        if (scratch_bytes.len() as i64) < gap_bytes {
            return Err(PyValueError::new_err("scratch must hold at least gap_bytes"));
        }
        let mut buffers = Vec::with_capacity(z.len());
        let mut addrs = Vec::with_capacity(z.len());
        for sz in &z {
            let total: i64 = sz.iter().sum();
            let len = pyo3::ffi::Py_ssize_t::try_from(total)
                .map_err(|_| PyValueError::new_err(format!("{total} bytes is not a buffer size")))?;
            // SAFETY: as in `uninitialized`: a new bytearray of `len` unzeroed bytes
            let buffer: Bound<'py, pyo3::types::PyByteArray> = unsafe {
                let ptr = pyo3::ffi::PyByteArray_FromStringAndSize(std::ptr::null(), len);
                Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked()
            };
            addrs.push(buffer.data() as u64);
            buffers.push(buffer);
        }
        let (b, scratch_at) = (items(&bases, "bases")?, scratch_bytes.as_ptr() as u64);
        let plan = py.detach(|| crate::gather::plan(&o, &z, &addrs, scratch_at, b, gap_bytes));
        let flat_ranges: Vec<i64> = plan.ranges.iter().flatten().copied().collect();
        let flat_iov: Vec<u64> = plan.iov.iter().flatten().copied().collect();
        Ok((
            buffers,
            PyBytes::new(py, as_bytes(&flat_iov)),
            PyBytes::new(py, as_bytes(&flat_ranges)),
            PyBytes::new(py, as_bytes(&plan.owners)),
            PyBytes::new(py, as_bytes(&plan.owner_bounds)),
        ))
    }

    /// `read_pieces(fd, position, iov, iov_max, split) -> int`: `preadv` from `position` into
    /// the pieces of `iov` (`struct iovec`s as bytes, from `gather_plan`), `iov_max` a call,
    /// the second half by a second thread when `split`, all without the GIL; the bytes read
    /// (fewer than asked at the end of the file). The caller keeps every piece's buffer alive
    /// and unresized until it returns.
    #[pyfunction]
    fn read_pieces(
        py: Python<'_>,
        fd: i32,
        position: i64,
        iov: &Bound<'_, PyAny>,
        iov_max: usize,
        split: bool,
    ) -> PyResult<u64> {
        let raw = PyBuffer::<u8>::get(iov)?;
        let bytes = items(&raw, "iov")?;
        if bytes.len() % 16 != 0 {
            return Err(PyValueError::new_err("iov must hold whole 16-byte iovecs"));
        }
        let pieces: Vec<[u64; 2]> = bytes
            .chunks_exact(16)
            .map(|c| {
                let (b, l) = c.split_at(8);
                [u64::from_ne_bytes(b.try_into().unwrap()), u64::from_ne_bytes(l.try_into().unwrap())]
            })
            .collect();
        // SAFETY: the pieces are the buffers gather_plan made for the caller, which keeps them
        // pinned (exported) while this runs
        py.detach(|| unsafe { crate::gather::read_pieces(fd, position, &pieces, iov_max, split) })
            .map_err(|e| match e.raw_os_error() {
                Some(code) => pyo3::exceptions::PyOSError::new_err((code, e.to_string())),
                None => pyo3::exceptions::PyOSError::new_err(e.to_string()),
            })
    }

    /// `uninitialized(size) -> bytearray`: a bytearray whose bytes are not zeroed first, for a
    /// buffer that a read fills completely.
    #[pyfunction]
    fn uninitialized(py: Python<'_>, size: usize) -> PyResult<Bound<'_, pyo3::types::PyByteArray>> {
        let len = pyo3::ffi::Py_ssize_t::try_from(size)
            .map_err(|_| PyValueError::new_err(format!("{size} bytes is too large")))?;
        // SAFETY: a NULL source makes CPython allocate `len` bytes without copying; the result
        // is a new reference (or NULL with an exception set, which from_owned_ptr_or_err takes)
        unsafe {
            let ptr = pyo3::ffi::PyByteArray_FromStringAndSize(std::ptr::null(), len);
            Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked())
        }
    }

    /// `crc_mismatches(data, starts) -> bytes`: the indexes (int64) of the units whose body
    /// does not match their BODYCRC.
    #[pyfunction]
    fn crc_mismatches<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (data, starts) = (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?);
        let (d, s) = (items(&data, "data")?, items(&starts, "starts")?);
        let bad = py.detach(|| crate::unit::crc_mismatches(d, s));
        Ok(PyBytes::new(py, as_bytes(&bad)))
    }

    /// `tags_in(data, starts, sizes, wanted) -> bytes`: per unit 1 when its `TAGS` is one of
    /// `wanted` (UTF-8 bytes), 0 when not, 2 when the caller must decode it (`TAGS` not valid
    /// UTF-8, or field lengths that do not add up).
    #[pyfunction]
    fn tags_in<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        starts: &Bound<'py, PyAny>,
        sizes: &Bound<'py, PyAny>,
        wanted: Vec<Vec<u8>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (data, starts, sizes) =
            (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
        let (d, s, z) = (items(&data, "data")?, items(&starts, "starts")?, items(&sizes, "sizes")?);
        same_length(&[("starts", s.len()), ("sizes", z.len())])?;
        let verdicts = py.detach(|| crate::tags::tags_in(d, s, z, &wanted));
        Ok(PyBytes::new(py, &verdicts))
    }

    /// `walk_commitlog(data) -> (consumed, messages, stop, queues)`: the whole messages at the
    /// start of `data` (see `walk::walk`): bytes and messages walked, why it stopped (`more`,
    /// `unwritten`, `blank`, `torn`) and `[(topic, queue id, max queue offset + 1, where its
    /// first message walked starts in data, that message's store timestamp)]`, sorted.
    #[pyfunction]
    #[allow(clippy::type_complexity)]
    fn walk_commitlog<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<(usize, usize, &'static str, Vec<(Bound<'py, PyBytes>, i32, i64, usize, i64)>)> {
        let data = PyBuffer::<u8>::get(data)?;
        let d = items(&data, "data")?;
        let (consumed, messages, stop, mut found) = py.detach(|| {
            let w = crate::walk::walk(d);
            let found: Vec<(&[u8], i32, i64, usize, i64)> =
                w.queues.into_iter().map(|((t, q), m)| (t, q, m.end, m.first, m.first_time)).collect();
            (w.consumed, w.messages, w.stop, found)
        });
        found.sort_unstable();
        let stop = match stop {
            crate::walk::Stop::More => "more",
            crate::walk::Stop::Unwritten => "unwritten",
            crate::walk::Stop::Blank => "blank",
            crate::walk::Stop::Torn => "torn",
        };
        let queues = found.into_iter().map(|(t, q, o, at, ts)| (PyBytes::new(py, t), q, o, at, ts)).collect();
        Ok((consumed, messages, stop, queues))
    }

    /// `queue_bounds(dirs, file_size, commitlog_min_offset, hints, threads) -> (mins, maxs,
    /// bytes)`: the local min and max offset of the queue in each consumequeue directory of
    /// `dirs` and the bytes of its units from the hint to the max (-1: not read from the hint)
    /// (`bounds::queue_bounds`; `hints`: int64, one per directory, <= 0 for none;
    /// `commitlog_min_offset` < 0 for none), as int64 bytes in native order: -1 and -1 for a
    /// missing directory, -2 and -2 for a queue the caller must read itself.
    #[pyfunction]
    fn queue_bounds<'py>(
        py: Python<'py>,
        dirs: Vec<String>,
        file_size: u64,
        commitlog_min_offset: i64,
        hints: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let hints = PyBuffer::<i64>::get(hints)?;
        let h = items(&hints, "hints")?;
        same_length(&[("dirs", dirs.len()), ("hints", h.len())])?;
        let found =
            py.detach(|| crate::bounds::bounds_many(&dirs, file_size, commitlog_min_offset, h, threads));
        let (mut mins, mut maxs) = (Vec::with_capacity(found.len()), Vec::with_capacity(found.len()));
        let mut tails = Vec::with_capacity(found.len());
        for b in found {
            let (lo, hi, tail) = match b {
                crate::bounds::Bounds::Found(lo, hi, tail) => (lo, hi, tail),
                crate::bounds::Bounds::Missing => (-1, -1, -1),
                crate::bounds::Bounds::Other => (-2, -2, -1),
            };
            mins.push(lo);
            maxs.push(hi);
            tails.push(tail);
        }
        Ok((
            PyBytes::new(py, as_bytes(&mins)),
            PyBytes::new(py, as_bytes(&maxs)),
            PyBytes::new(py, as_bytes(&tails)),
        ))
    }

    /// `queue_tails(paths, file_sizes, positions, cap, threads) -> (counts, units)`: the valid
    /// units of each consumequeue file of `paths` (of `file_sizes[i]` bytes) from unit
    /// `positions[i]` on (`tails::tail`; int64 buffers): `counts`, int64 bytes in native order,
    /// how many (-1: left to the caller); `units`, the first `cap` of each queue's, one after
    /// the other (min(count, cap) units of 20 bytes each, as the file holds them).
    #[pyfunction]
    fn queue_tails<'py>(
        py: Python<'py>,
        paths: Vec<String>,
        file_sizes: &Bound<'py, PyAny>,
        positions: &Bound<'py, PyAny>,
        cap: u64,
        threads: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let (sizes, at) = (PyBuffer::<i64>::get(file_sizes)?, PyBuffer::<i64>::get(positions)?);
        let (sizes, at) = (items(&sizes, "file_sizes")?, items(&at, "positions")?);
        same_length(&[("paths", paths.len()), ("file_sizes", sizes.len()), ("positions", at.len())])?;
        if let Some(i) = (0..at.len()).find(|&i| at[i] < 0 || sizes[i] < 0) {
            return Err(PyValueError::new_err(format!(
                "queue {i}: position {} and file size {} cannot be negative", at[i], sizes[i]
            )));
        }
        let (counts, units) = py.detach(|| {
            let sizes: Vec<u64> = sizes.iter().map(|&s| s as u64).collect();
            let at: Vec<u64> = at.iter().map(|&p| p as u64).collect();
            let found = crate::tails::tails_many(&paths, &sizes, &at, cap, threads);
            let mut counts = Vec::with_capacity(found.len());
            let mut units = Vec::new();
            for t in found {
                match t {
                    crate::tails::Tail::Found(n, kept) => {
                        counts.push(n as i64);
                        units.extend_from_slice(&kept);
                    }
                    crate::tails::Tail::Unknown => counts.push(-1),
                }
            }
            (counts, units)
        });
        Ok((PyBytes::new(py, as_bytes(&counts)), PyBytes::new(py, &units)))
    }

    /// `append_files(paths, positions, datas, threads) -> (status, value, made)`: each of
    /// `datas` (buffers) appended at `positions[i]` (int64) to the file `paths[i]` -- existing,
    /// or at position 0 made with its missing directories -- not synced (`files::append_many`).
    /// `status`, `value` and `made`, int64 bytes in native order: 0 and the bytes written; 1 (no
    /// such file) and 0; 2 (the file holds `value` bytes, not the position: nothing written); 3
    /// (an I/O error, perhaps after a part was written) and its errno. `made`: how many of the
    /// file's ancestors gained an entry (the new file's, each new directory's), else 0.
    #[pyfunction]
    fn append_files<'py>(
        py: Python<'py>,
        paths: Vec<String>,
        positions: &Bound<'py, PyAny>,
        datas: Vec<Bound<'py, PyAny>>,
        threads: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let at = PyBuffer::<i64>::get(positions)?;
        let at = items(&at, "positions")?;
        same_length(&[("paths", paths.len()), ("positions", at.len()), ("datas", datas.len())])?;
        if let Some(i) = (0..at.len()).find(|&i| at[i] < 0) {
            return Err(PyValueError::new_err(format!("append {i}: position {} is negative", at[i])));
        }
        let buffers = datas.iter().map(PyBuffer::<u8>::get).collect::<PyResult<Vec<_>>>()?;
        let slices = buffers.iter().map(|b| items(b, "datas")).collect::<PyResult<Vec<_>>>()?;
        let (status, value, made) = py.detach(|| {
            let at: Vec<u64> = at.iter().map(|&p| p as u64).collect();
            let done = crate::files::append_many(&paths, &at, &slices, threads);
            let mut status = Vec::with_capacity(done.len());
            let mut value = Vec::with_capacity(done.len());
            let mut made = Vec::with_capacity(done.len());
            for (d, data) in done.into_iter().zip(&slices) {
                let (s, v, m) = match d {
                    crate::files::Appended::Done(m) => (0i64, data.len() as i64, i64::from(m)),
                    crate::files::Appended::Missing => (1, 0, 0),
                    crate::files::Appended::Mismatch(size) => (2, size as i64, 0),
                    crate::files::Appended::Failed(errno) => (3, i64::from(errno), 0),
                };
                status.push(s);
                value.push(v);
                made.push(m);
            }
            (status, value, made)
        });
        let out = |v: &Vec<i64>| PyBytes::new(py, as_bytes(v));
        Ok((out(&status), out(&value), out(&made)))
    }

    /// `dirs_exist(paths, threads) -> bytes`: 1 where `paths[i]` is a directory, else 0, one
    /// byte each (`files::dirs_exist`).
    #[pyfunction]
    fn dirs_exist<'py>(py: Python<'py>, paths: Vec<String>, threads: usize) -> Bound<'py, PyBytes> {
        let found = py.detach(|| crate::files::dirs_exist(&paths, threads));
        let bytes: Vec<u8> = found.into_iter().map(u8::from).collect();
        PyBytes::new(py, &bytes)
    }

    /// `fastjson_layout(json) -> bytes`: the metadata JSON in fastjson's layout
    /// (`json_layout::fastjson_layout`).
    #[pyfunction]
    fn fastjson_layout<'py>(py: Python<'py>, json: &[u8]) -> Bound<'py, PyBytes> {
        let out = py.detach(|| crate::json_layout::fastjson_layout(json));
        PyBytes::new(py, &out)
    }

    /// `quote_bare_keys(json) -> bytes`: fastjson's bare integer map keys quoted
    /// (`json_layout::quote_bare_keys`).
    #[pyfunction]
    fn quote_bare_keys<'py>(py: Python<'py>, json: &[u8]) -> Bound<'py, PyBytes> {
        let out = py.detach(|| crate::json_layout::quote_bare_keys(json));
        PyBytes::new(py, &out)
    }

    #[pymodule]
    fn _kernel(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_function(wrap_pyfunction!(index_items, m)?)?;
        m.add_function(wrap_pyfunction!(index_columns, m)?)?;
        m.add_function(wrap_pyfunction!(index_columns_many, m)?)?;
        m.add_function(wrap_pyfunction!(check_units, m)?)?;
        m.add_function(wrap_pyfunction!(check_batch, m)?)?;
        m.add_function(wrap_pyfunction!(check_batches, m)?)?;
        m.add_function(wrap_pyfunction!(rewrite_batches, m)?)?;
        m.add_function(wrap_pyfunction!(encode_units, m)?)?;
        m.add_function(wrap_pyfunction!(store_timestamps, m)?)?;
        m.add_function(wrap_pyfunction!(rewrite_physical_offsets, m)?)?;
        m.add_function(wrap_pyfunction!(link_items, m)?)?;
        m.add_function(wrap_pyfunction!(uninitialized, m)?)?;
        m.add_function(wrap_pyfunction!(gather_plan, m)?)?;
        m.add_function(wrap_pyfunction!(read_pieces, m)?)?;
        m.add_function(wrap_pyfunction!(crc_mismatches, m)?)?;
        m.add_function(wrap_pyfunction!(tags_in, m)?)?;
        m.add_function(wrap_pyfunction!(walk_commitlog, m)?)?;
        m.add_function(wrap_pyfunction!(queue_bounds, m)?)?;
        m.add_function(wrap_pyfunction!(queue_tails, m)?)?;
        m.add_function(wrap_pyfunction!(append_files, m)?)?;
        m.add_function(wrap_pyfunction!(dirs_exist, m)?)?;
        m.add_function(wrap_pyfunction!(fastjson_layout, m)?)?;
        m.add_function(wrap_pyfunction!(quote_bare_keys, m)?)?;
        crate::decode::python::register(m)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
