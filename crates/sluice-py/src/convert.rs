//! Values between Python and JSON: a call's arguments in, an outcome's body out.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Deeper than this is refused rather than recursed into (a list that
/// contains itself would otherwise never end).
const MAX_DEPTH: usize = 128;

/// A Python value as JSON: `None`, `bool`, `int`, `float`, `str`, and
/// `dict` (with `str` keys), `list` and `tuple` of those. Anything else is a
/// `ValueError` naming where it is, e.g. `args["when"]`.
pub(crate) fn to_json(value: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
    to_json_at(value, path, 0)
}

fn to_json_at(value: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "{path}: nested more than {MAX_DEPTH} levels deep"
        )));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: in Python, True is an int.
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(number) = value.extract::<i64>() {
            return Ok(Value::from(number));
        }
        if let Ok(number) = value.extract::<u64>() {
            return Ok(Value::from(number));
        }
        return Err(PyValueError::new_err(format!(
            "{path}: the integer does not fit in 64 bits"
        )));
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        return Number::from_f64(float.value())
            .map(Value::Number)
            .ok_or_else(|| {
                PyValueError::new_err(format!("{path}: NaN and infinities are not JSON"))
            });
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Value::String(text.to_cow()?.into_owned()));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut object = Map::new();
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(PyValueError::new_err(format!(
                    "{path}: a key is not a str: {}",
                    key.repr()?
                )));
            };
            let key = key.to_cow()?.into_owned();
            let inner = format!("{path}[{key:?}]");
            let item = to_json_at(&item, &inner, depth + 1)?;
            object.insert(key, item);
        }
        return Ok(Value::Object(object));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (index, item) in value.try_iter()?.enumerate() {
            items.push(to_json_at(&item?, &format!("{path}[{index}]"), depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    Err(PyValueError::new_err(format!(
        "{path}: a {} is not JSON (use None, bool, int, float, str, list or dict)",
        value.get_type().name()?
    )))
}

/// A JSON value as Python: objects become `dict`, arrays `list`.
pub(crate) fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any().unbind(),
        Value::Number(number) => {
            if let Some(n) = number.as_i64() {
                n.into_pyobject(py)?.into_any().unbind()
            } else if let Some(n) = number.as_u64() {
                n.into_pyobject(py)?.into_any().unbind()
            } else {
                number
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(object) => {
            let dict = PyDict::new(py);
            for (key, item) in object {
                dict.set_item(key, to_py(py, item)?)?;
            }
            dict.into_any().unbind()
        }
    })
}
