//! `fencing._native.SqlGuard`: the statements and the verdict of the Rust
//! transaction guard (`fencing_sql::GuardStatements`), for `fencing.sql` to
//! run on the caller's own connection (psycopg, PyMySQL, sqlite3,
//! SQLAlchemy). Nothing of the guard is written a second time in Python.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

use fencing_tokens::Error;
use fencing_tokens::sql::{Dialect, GuardParam, GuardStatements, ParamStyle, Tables};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors;
use crate::lease::token_from;

/// The guard's statements for one dialect, table prefix and parameter
/// style, and the verdict on their answers.
#[pyclass(frozen, module = "fencing._native")]
pub(crate) struct SqlGuard {
    inner: GuardStatements,
    style: ParamStyle,
}

fn invalid(message: String) -> PyErr {
    errors::to_py(&Error::invalid_input(message))
}

#[pymethods]
impl SqlGuard {
    /// `dialect`: "postgres", "mysql" or "sqlite"; `paramstyle`: PEP 249's
    /// "format" (`%s`), "qmark" (`?`) or "named" (`:p1`).
    #[new]
    #[pyo3(signature = (dialect, paramstyle, table_prefix = "fencing_"))]
    fn new(dialect: &str, paramstyle: &str, table_prefix: &str) -> PyResult<Self> {
        let dialect = match dialect {
            "postgres" => Dialect::Postgres,
            "mysql" => Dialect::MySql,
            "sqlite" => Dialect::Sqlite,
            other => {
                return Err(invalid(format!(
                    "dialect {other:?}: expected \"postgres\", \"mysql\" or \"sqlite\""
                )));
            }
        };
        let style = match paramstyle {
            "format" => ParamStyle::Format,
            "qmark" => ParamStyle::Qmark,
            "named" => ParamStyle::Named,
            other => {
                return Err(invalid(format!(
                    "paramstyle {other:?}: expected \"format\", \"qmark\" or \"named\""
                )));
            }
        };
        let tables = Tables::from_prefix(table_prefix).map_err(|e| errors::to_py(&e))?;
        Ok(Self {
            inner: GuardStatements::new(dialect, &tables, style),
            style,
        })
    }

    /// "postgres", "mysql" or "sqlite".
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.dialect().name()
    }

    /// The fencing upsert, to run first in the transaction.
    #[getter]
    fn upsert(&self) -> &str {
        self.inner.upsert()
    }

    /// Reads the domain's mark, when the upsert reported none.
    #[getter]
    fn select_mark(&self) -> &str {
        self.inner.select_mark()
    }

    /// The upsert's parameters: a tuple, or a dict in the named style.
    /// `InvalidInput` for a bad domain or token, `TokenOutOfRange` above
    /// 2**63 - 1.
    fn upsert_params<'py>(
        &self,
        py: Python<'py>,
        domain: &str,
        token: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let token = token_from(token)?;
        let params = self
            .inner
            .upsert_params(domain, token)
            .map_err(|e| errors::to_py(&e))?;
        let values = params
            .into_iter()
            .map(|p| match p {
                GuardParam::Text(text) => text.into_bound_py_any(py),
                GuardParam::Integer(n) => n.into_bound_py_any(py),
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.bind(py, values)
    }

    /// The select's parameters (the domain): a tuple, or a dict.
    fn select_params<'py>(&self, py: Python<'py>, domain: &str) -> PyResult<Bound<'py, PyAny>> {
        self.bind(py, vec![domain.into_bound_py_any(py)?])
    }

    /// The mark a MySQL upsert reported, from the cursor's `lastrowid`
    /// (kept unsigned by the server: a negative mark comes back as its
    /// two's complement).
    #[staticmethod]
    fn mark_from_insert_id(insert_id: u64) -> i64 {
        GuardStatements::mark_from_insert_id(insert_id)
    }

    /// `None` if the transaction may go on; raises `StaleToken` (roll
    /// back), `BackendError` for a negative (foreign) mark, or
    /// `UnsafeConfiguration` if the upsert wrote nothing unexplained.
    #[pyo3(signature = (domain, token, written, read = None))]
    fn verdict(
        &self,
        domain: &str,
        token: &Bound<'_, PyAny>,
        written: Option<i64>,
        read: Option<i64>,
    ) -> PyResult<()> {
        let token = token_from(token)?;
        self.inner
            .verdict(domain, token, written, read)
            .map_err(|e| errors::to_py(&e))
    }

    fn __repr__(&self) -> String {
        format!(
            "SqlGuard(dialect={:?}, paramstyle={:?})",
            self.inner.dialect().name(),
            self.style
        )
    }
}

impl SqlGuard {
    fn bind<'py>(
        &self,
        py: Python<'py>,
        values: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.style == ParamStyle::Named {
            let dict = PyDict::new(py);
            for (n, value) in values.into_iter().enumerate() {
                dict.set_item(format!("p{}", n + 1), value)?;
            }
            Ok(dict.into_any())
        } else {
            Ok(PyTuple::new(py, values)?.into_any())
        }
    }
}

/// The SQLite files this process opened a store or an issuer on, through
/// the wheel's own copy of SQLite.
static SQLITE_FILES: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The file a `sqlite:` URL names, as sqlx opens it (percent-decoded); `None`
/// for another scheme. The query (fencing's and sqlx's options) does not
/// move the file. An in-memory database names no file that exists, so it is
/// never noted.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    use fencing_tokens::sql::sqlx::sqlite::SqliteConnectOptions;
    if !url.starts_with("sqlite:") {
        return None;
    }
    let path = url.split(['?', '#']).next()?;
    let options: SqliteConnectOptions = path.parse().ok()?;
    Some(options.get_filename().to_path_buf())
}

/// Opens a store or an issuer with `open`, and notes the SQLite file `url`
/// names once it is open (and so exists).
pub(crate) async fn noting_sqlite_file<T>(
    url: &str,
    open: impl Future<Output = fencing_tokens::Result<T>>,
) -> fencing_tokens::Result<T> {
    let file = sqlite_file(url);
    let opened = open.await?;
    if let Some(path) = file.and_then(|p| p.canonicalize().ok()) {
        SQLITE_FILES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path);
    }
    Ok(opened)
}

/// Whether this process opened a store or an issuer on the SQLite file at
/// `path` through the wheel's SQLite: Python's `sqlite3` is another copy
/// of SQLite, and two copies in one process release each other's POSIX
/// locks when either closes the file.
#[pyfunction]
pub(crate) fn sqlite_file_in_use(path: PathBuf) -> bool {
    path.canonicalize().is_ok_and(|path| {
        SQLITE_FILES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&path)
    })
}
