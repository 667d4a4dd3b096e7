//! The bridge's Python half, `sluice/_bridge.py`, looked up once.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static BRIDGE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// `sluice._bridge.NAME`.
pub(crate) fn helper<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = BRIDGE.get_or_try_init(py, || py.import("sluice._bridge").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}
