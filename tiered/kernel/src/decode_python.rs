//! The PyO3 glue of `decode`: `decode_units` and the buffers it returns (`Owned`: Rust-owned
//! memory exported through the buffer protocol, read-only, so Arrow wraps it without a copy).

use std::ffi::{c_int, c_void};

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{Bounds, Nested, Strings, COLUMNS, PROPERTIES};

enum Values {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A read-only buffer of values the kernel made (bytes, int32 or int64 in native order).
#[pyclass(frozen, module = "tiered._kernel")]
pub struct Owned {
    values: Values,
}

impl Owned {
    fn bytes(&self) -> &[u8] {
        fn raw<T: Copy>(v: &[T]) -> &[u8] {
            // SAFETY: plain integers, read as their bytes
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match &self.values {
            Values::U8(v) => v,
            Values::I32(v) => raw(v),
            Values::I64(v) => raw(v),
        }
    }
}

#[pymethods]
impl Owned {
    fn __len__(&self) -> usize {
        self.bytes().len()
    }

    /// # Safety
    /// `view` is CPython's to fill (the buffer protocol).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("a null view"));
        }
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the kernel's buffers are read-only"));
        }
        let data = slf.get().bytes();
        let (ptr, len) = (data.as_ptr(), data.len());
        // SAFETY: `view` is valid (CPython's); the values never move or change while the
        // object lives (frozen, no method mutates them), and the view holds a reference
        // to it; the format is a static C string.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & pyo3::ffi::PyBUF_FORMAT == pyo3::ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & pyo3::ffi::PyBUF_ND == pyo3::ffi::PyBUF_ND { &mut (*view).len } else { std::ptr::null_mut() };
            (*view).strides =
                if flags & pyo3::ffi::PyBUF_STRIDES == pyo3::ffi::PyBUF_STRIDES { &mut (*view).itemsize } else { std::ptr::null_mut() };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }
}

fn owned(py: Python<'_>, values: Values) -> PyResult<Bound<'_, Owned>> {
    Bound::new(py, Owned { values })
}

fn items<'a, T: Element>(buf: &'a PyBuffer<T>, name: &str) -> PyResult<&'a [T]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{name} must be a contiguous buffer")));
    }
    // SAFETY: C-contiguous, item_count() items of T (checked by PyBuffer::get), exported
    // and unmoved while `buf` lives
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, buf.item_count()) })
}

fn strings<'py>(py: Python<'py>, s: Strings) -> PyResult<Bound<'py, PyAny>> {
    let valid = s.valid.map(|v| owned(py, Values::U8(v))).transpose()?;
    Ok((owned(py, Values::I32(s.offsets))?, owned(py, Values::U8(s.data))?, valid, s.nulls)
        .into_pyobject(py)?
        .into_any())
}

fn nested<'py>(py: Python<'py>, n: Nested, map: bool) -> PyResult<Bound<'py, PyAny>> {
    let offsets = owned(py, Values::I32(n.offsets))?;
    let values = strings(py, n.values)?;
    Ok(if map { (offsets, strings(py, n.keys)?, values).into_pyobject(py)?.into_any() } else { (offsets, values).into_pyobject(py)?.into_any() })
}

/// `decode_units(data, starts, sizes, first_queue_offset, flat_offsets, bounds, columns) ->
/// (verdicts, queue_offsets, columns, compressed)`: see `decode::decode`. `bounds` is
/// `(q_lo, q_hi, t_lo, t_hi)`; `verdicts` (uint8) and `queue_offsets` (int64) have one
/// entry per unit, `compressed` (int64) the rows whose body is compressed; `columns` maps
/// each asked column to its buffers: `(values,)` fixed-width (little-endian), `(offsets,
/// data, validity or None, nulls)` strings, `(offsets, strings)` keys, `(offsets, key
/// strings, value strings)` properties.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn decode_units<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    starts: &Bound<'py, PyAny>,
    sizes: &Bound<'py, PyAny>,
    first_queue_offset: i64,
    flat_offsets: &Bound<'py, PyAny>,
    bounds: (i64, i64, i64, i64),
    columns: Vec<String>,
) -> PyResult<(Bound<'py, Owned>, Bound<'py, Owned>, Bound<'py, PyDict>, Bound<'py, Owned>)> {
    let (data, starts, sizes) =
        (PyBuffer::<u8>::get(data)?, PyBuffer::<i64>::get(starts)?, PyBuffer::<i64>::get(sizes)?);
    let flat = PyBuffer::<i64>::get(flat_offsets)?;
    let (d, s, z, f) = (items(&data, "data")?, items(&starts, "starts")?, items(&sizes, "sizes")?, items(&flat, "flat_offsets")?);
    if z.len() != s.len() || f.len() != s.len() {
        return Err(PyValueError::new_err(format!(
            "starts ({}), sizes ({}) and flat_offsets ({}) must have one entry per unit",
            s.len(),
            z.len(),
            f.len()
        )));
    }
    let mut want: Vec<&str> = Vec::with_capacity(columns.len());
    for c in &columns {
        match COLUMNS.iter().chain([&PROPERTIES]).find(|k| **k == c.as_str()) {
            Some(k) => want.push(k),
            None => {
                return Err(PyValueError::new_err(format!(
                    "column {c:?} is not one the kernel decodes: choose from {}, {PROPERTIES}",
                    COLUMNS.join(", ")
                )))
            }
        }
    }
    let (q_lo, q_hi, t_lo, t_hi) = bounds;
    let b = Bounds { q_lo, q_hi, t_lo, t_hi };
    let out = py.detach(|| super::decode(d, s, z, first_queue_offset, f, b, &want)).map_err(|e| {
        PyValueError::new_err(format!("a column of {} bytes: read less than 2 GiB at once", e.0))
    })?;
    let cols = PyDict::new(py);
    for (c, values) in out.fixed {
        cols.set_item(COLUMNS[c], (owned(py, Values::U8(values))?,))?;
    }
    for (c, s) in out.strings {
        cols.set_item(COLUMNS[c], strings(py, s)?)?;
    }
    if let Some(k) = out.keys {
        cols.set_item("keys", nested(py, k, false)?)?;
    }
    if let Some(p) = out.properties {
        cols.set_item(PROPERTIES, nested(py, p, true)?)?;
    }
    Ok((
        owned(py, Values::U8(out.verdicts))?,
        owned(py, Values::I64(out.queue_offsets))?,
        cols,
        owned(py, Values::I64(out.compressed))?,
    ))
}

/// Add `decode_units` and `Owned` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Owned>()?;
    m.add_function(wrap_pyfunction!(decode_units, m)?)
}
