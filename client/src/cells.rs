//! Several gateway groups, one client: cells (docs/design/0005-cells.md).
//!
//! A **cell** is one complete gateway group (its own raft group, cluster
//! id, supervisors and sandboxes). Nothing crosses cells but this client's
//! choices: which cell a new sandbox goes to, which cell an id names, and
//! read-only fan-out.
//!
//! - **The cell map** ([`CellMap`]) is a TOML file of `[[cell]]` tables:
//!   `name`, `cluster_id`, `endpoints`, `ca_file` or `insecure = true`,
//!   `token_file` (optional) and `admits` (default true: the cell takes new
//!   sandboxes). Relative paths are read from the map's directory. The
//!   first cell is the **default**: a bare sandbox id names it, so a
//!   deployment that had one group keeps its ids when it adds a second.
//! - **Ids**: a sandbox is `<cell>/<id>` to a caller ([`CellId`]); inside a
//!   cell the id is bare, so no group changes. Sandbox ids never hold `/`.
//! - **The cluster id is checked** before the first call to a cell
//!   ([`CellError::WrongCluster`]): a map that points a name at the wrong
//!   group fails loudly instead of writing into it.
//! - **Placement** ([`Cells::create_sandbox`]): with no cell named, the
//!   sandbox goes to an admitting cell chosen by rendezvous hashing of its
//!   sandbox id weighted by each cell's free slots ([`Headroom`]): a burst
//!   of launches spreads in proportion to headroom, and the same id over
//!   the same headroom always picks the same cell. A cell that does not
//!   answer is skipped. A caller-named id is first looked up in every cell,
//!   so a retried launch lands where the first attempt did; if a cell
//!   cannot be asked, the launch is refused ([`CellError::LookupIncomplete`])
//!   rather than risk a second sandbox: name the cell to go ahead.
//! - **Fan-out reads** ([`Cells::list_sandboxes`], [`Cells::headrooms`]):
//!   every cell asked at once, each answer labelled with its cell and
//!   linearizable on its own; no cross-cell snapshot is promised, and a
//!   cell that fails is reported beside the others' answers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use futures::future::join_all;
use proto::pool_admin::{CreateSandboxRequest, Sandbox};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use crate::error::Error;
use crate::pool::Headroom;
use crate::{new_request_id, Client, ClientBuilder, Written};

/// The largest cell map read, in bytes.
pub const MAX_MAP_BYTES: u64 = 1 << 20;
/// The most cells a map may list.
pub const MAX_CELLS: usize = 64;
/// The most endpoints one cell may list.
pub const MAX_ENDPOINTS: usize = 16;

/// What went wrong with a cell map or a call across cells.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// The cell map cannot be read or is not valid; names the file and the
    /// entry to fix.
    #[error("cell map {path}: {reason}")]
    Map {
        /// The map's file.
        path: PathBuf,
        /// What to fix.
        reason: String,
    },
    /// A cell name the map does not list.
    #[error("unknown cell {name:?}: the cell map lists {known}")]
    UnknownCell {
        /// The name asked for.
        name: String,
        /// The names the map lists, comma-separated.
        known: String,
    },
    /// A sandbox id that is neither `<cell>/<id>` nor a bare id.
    #[error("invalid sandbox id {0:?}: expected <cell>/<id> or a bare id of the default cell")]
    InvalidId(String),
    /// The cell's gateways belong to another cluster than the map says.
    #[error("cell {cell}: its gateways belong to cluster {found}, the cell map says {expected}: fix the map's cluster_id or endpoints")]
    WrongCluster {
        /// The cell.
        cell: String,
        /// The map's `cluster_id`.
        expected: String,
        /// What the gateways answered.
        found: String,
    },
    /// No admitting cell answered with free slots.
    #[error("no cell can take the sandbox: {0}")]
    NoCell(String),
    /// A caller-named sandbox id could not be looked up in every cell, so
    /// placing it might create a second sandbox of a retried launch.
    #[error("cannot tell whether sandbox {id:?} already exists: {source}; retry, or name the cell to create it in")]
    LookupIncomplete {
        /// The sandbox id.
        id: String,
        /// The cell that did not answer.
        cell: String,
        /// Its failure.
        #[source]
        source: Box<CellError>,
    },
    /// A call to one cell failed.
    #[error("cell {cell}: {source}")]
    Call {
        /// The cell.
        cell: String,
        /// The client's error (boxed: it is large).
        #[source]
        source: Box<Error>,
    },
}

/// One `[[cell]]` table of the map, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellEntry {
    /// The cell's name: the prefix of its sandboxes' ids.
    pub name: String,
    /// The group's cluster id (`openshell-pool raft status` prints it).
    pub cluster_id: String,
    /// Its gateways, `host:port`.
    pub endpoints: Vec<String>,
    /// The CA that signed its gateways' certificates.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Plaintext, for gateways started with `--insecure`.
    #[serde(default)]
    pub insecure: bool,
    /// A file holding the bearer token for this cell.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Whether new sandboxes may be placed here (default true).
    #[serde(default = "admits_by_default")]
    pub admits: bool,
}

fn admits_by_default() -> bool {
    true
}

impl CellEntry {
    /// The bearer token of `token_file`, if the cell has one.
    ///
    /// # Errors
    /// [`CellError::Map`] (naming `map_path` and the cell) when the file
    /// cannot be read.
    pub fn token(&self, map_path: &Path) -> Result<Option<String>, CellError> {
        self.token_file
            .as_deref()
            .map(|file| {
                proto::secret::read_secret_file("token_file", file).map_err(|e| CellError::Map {
                    path: map_path.to_path_buf(),
                    reason: format!("cell {}: {e}", self.name),
                })
            })
            .transpose()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    cell: Vec<CellEntry>,
}

/// A validated cell map: at least one cell, the first the default.
#[derive(Clone, Debug)]
pub struct CellMap {
    cells: Vec<CellEntry>,
}

impl CellMap {
    /// Reads and validates the map at `path` (at most [`MAX_MAP_BYTES`]);
    /// relative `ca_file` and `token_file` paths are taken from the map's
    /// directory.
    ///
    /// # Errors
    /// [`CellError::Map`] naming the file and what to fix.
    pub fn load(path: &Path) -> Result<CellMap, CellError> {
        use std::io::Read;
        let fail = |reason: String| CellError::Map {
            path: path.to_path_buf(),
            reason,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_MAP_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if text.len() as u64 > MAX_MAP_BYTES {
            return Err(fail(format!("larger than {MAX_MAP_BYTES} bytes")));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        CellMap::parse(&text, base).map_err(fail)
    }

    /// Parses and validates a map's text; relative paths are joined to
    /// `base`.
    ///
    /// # Errors
    /// What to fix, naming the cell.
    pub fn parse(text: &str, base: &Path) -> Result<CellMap, String> {
        let file: MapFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut cells = file.cell;
        if cells.is_empty() {
            return Err("lists no [[cell]]".into());
        }
        if cells.len() > MAX_CELLS {
            return Err(format!("lists {} cells, at most {MAX_CELLS}", cells.len()));
        }
        let mut names = BTreeSet::new();
        let mut clusters = BTreeSet::new();
        for (i, cell) in cells.iter_mut().enumerate() {
            let at = format!("cell {} ({:?})", i + 1, cell.name);
            proto::ids::check_id("name", &cell.name).map_err(|e| format!("{at}: {e}"))?;
            if !names.insert(cell.name.clone()) {
                return Err(format!("{at}: the name is listed twice"));
            }
            if cell.cluster_id.trim().is_empty() {
                return Err(format!(
                    "{at}: cluster_id is empty (`openshell-pool raft status` prints it)"
                ));
            }
            if !clusters.insert(cell.cluster_id.clone()) {
                return Err(format!(
                    "{at}: cluster_id {} is another cell's too",
                    cell.cluster_id
                ));
            }
            if cell.endpoints.is_empty() || cell.endpoints.len() > MAX_ENDPOINTS {
                return Err(format!(
                    "{at}: endpoints must list 1 to {MAX_ENDPOINTS} host:port"
                ));
            }
            if let Some(bad) = cell.endpoints.iter().find(|e| !is_host_port(e)) {
                return Err(format!("{at}: endpoint {bad:?} is not host:port"));
            }
            match (&cell.ca_file, cell.insecure) {
                (Some(_), true) => {
                    return Err(format!("{at}: ca_file and insecure = true exclude each other"))
                }
                (None, false) => {
                    return Err(format!(
                        "{at}: no transport security: set ca_file, or insecure = true for gateways started with --insecure"
                    ))
                }
                _ => {}
            }
            for file in [&mut cell.ca_file, &mut cell.token_file]
                .into_iter()
                .flatten()
            {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        Ok(CellMap { cells })
    }

    /// The cells, the default first.
    pub fn cells(&self) -> &[CellEntry] {
        &self.cells
    }
}

/// `host:port` with a port number.
fn is_host_port(endpoint: &str) -> bool {
    endpoint
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

/// A sandbox id as a caller writes it: `<cell>/<id>`, or a bare id of the
/// default cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellId<'a> {
    /// The cell named, `None` for a bare id.
    pub cell: Option<&'a str>,
    /// The id inside the cell.
    pub id: &'a str,
}

impl<'a> CellId<'a> {
    /// Splits `text` at its one `/`.
    ///
    /// # Errors
    /// [`CellError::InvalidId`] for more than one `/` or an empty part.
    pub fn parse(text: &'a str) -> Result<CellId<'a>, CellError> {
        match text.split_once('/') {
            None if !text.is_empty() => Ok(CellId {
                cell: None,
                id: text,
            }),
            Some((cell, id)) if !cell.is_empty() && !id.is_empty() && !id.contains('/') => {
                Ok(CellId {
                    cell: Some(cell),
                    id,
                })
            }
            _ => Err(CellError::InvalidId(text.to_string())),
        }
    }
}

/// One cell: its map entry and a client of its gateways.
pub struct Cell {
    entry: CellEntry,
    client: Client,
    checked: OnceCell<()>,
}

impl Cell {
    /// The cell's name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The cell's entry in the map.
    pub fn entry(&self) -> &CellEntry {
        &self.entry
    }

    /// Whether new sandboxes may be placed here.
    pub fn admits(&self) -> bool {
        self.entry.admits
    }

    /// The client of this cell's gateways, once their cluster id matched
    /// the map's.
    ///
    /// # Errors
    /// [`CellError::WrongCluster`], or [`CellError::Call`] when no gateway
    /// answered the check.
    pub async fn client(&self) -> Result<&Client, CellError> {
        self.checked
            .get_or_try_init(|| async {
                let status = self
                    .client
                    .cluster_status(true)
                    .await
                    .map_err(|e| self.failed(e))?;
                if status.cluster_id == self.entry.cluster_id {
                    Ok(())
                } else {
                    Err(CellError::WrongCluster {
                        cell: self.entry.name.clone(),
                        expected: self.entry.cluster_id.clone(),
                        found: status.cluster_id,
                    })
                }
            })
            .await?;
        Ok(&self.client)
    }

    /// `call` on this cell's client once its cluster id matched, its error
    /// labelled with the cell: every call across cells goes through here.
    ///
    /// # Errors
    /// As [`Cell::client`], or `call`'s error as [`CellError::Call`].
    pub async fn ask<'c, T, Fut>(
        &'c self,
        call: impl FnOnce(&'c Client) -> Fut,
    ) -> Result<T, CellError>
    where
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let client = self.client().await?;
        call(client).await.map_err(|e| self.failed(e))
    }

    fn failed(&self, source: Error) -> CellError {
        CellError::Call {
            cell: self.entry.name.clone(),
            source: Box::new(source),
        }
    }

    /// `<cell>/<id>`.
    pub fn qualify(&self, id: &str) -> String {
        format!("{}/{id}", self.entry.name)
    }
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell")
            .field("name", &self.entry.name)
            .field("cluster_id", &self.entry.cluster_id)
            .field("endpoints", &self.entry.endpoints)
            .finish()
    }
}

/// One cell's answer to a fan-out read.
#[derive(Debug)]
pub struct CellAnswer<T> {
    /// The cell.
    pub cell: String,
    /// Its answer, or why it gave none.
    pub answer: Result<T, CellError>,
}

/// Every cell of a map, with a client each.
pub struct Cells {
    cells: Vec<Cell>,
}

impl Cells {
    /// A client per cell; `configure` sets what the map does not (role,
    /// deadlines, ...) on each cell's builder before the map's endpoints,
    /// security and token.
    ///
    /// # Errors
    /// [`CellError::Map`] for a token file that cannot be read;
    /// [`CellError::Call`] for a client that cannot be built (a CA file
    /// that cannot be read, say).
    pub fn new(
        map: &CellMap,
        map_path: &Path,
        configure: impl Fn(ClientBuilder) -> ClientBuilder,
    ) -> Result<Cells, CellError> {
        Cells::with_clients(map, |entry| {
            let builder = configure(Client::builder()).endpoints(entry.endpoints.clone());
            let builder = match &entry.ca_file {
                Some(ca) => builder.ca_file(ca.clone()),
                None => builder.insecure(),
            };
            builder
                .token_opt(entry.token(map_path)?)
                .build()
                .map_err(|source| CellError::Call {
                    cell: entry.name.clone(),
                    source: Box::new(source),
                })
        })
    }

    /// The cells of `map` over clients `client_of` builds, one per cell
    /// (from [`CellEntry`]'s endpoints, security and [`CellEntry::token`]).
    ///
    /// # Errors
    /// The first error of `client_of`.
    pub fn with_clients<E>(
        map: &CellMap,
        mut client_of: impl FnMut(&CellEntry) -> Result<Client, E>,
    ) -> Result<Cells, E> {
        let mut cells = Vec::with_capacity(map.cells.len());
        for entry in &map.cells {
            cells.push(Cell {
                entry: entry.clone(),
                client: client_of(entry)?,
                checked: OnceCell::new(),
            });
        }
        Ok(Cells { cells })
    }

    /// The cells, the default first.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// The cell called `name`.
    ///
    /// # Errors
    /// [`CellError::UnknownCell`].
    pub fn cell(&self, name: &str) -> Result<&Cell, CellError> {
        self.cells
            .iter()
            .find(|c| c.entry.name == name)
            .ok_or_else(|| CellError::UnknownCell {
                name: name.to_string(),
                known: self
                    .cells
                    .iter()
                    .map(|c| c.entry.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The cell and the bare id that `id` (`<cell>/<id>` or bare) names.
    ///
    /// # Errors
    /// [`CellError::InvalidId`], [`CellError::UnknownCell`].
    pub fn resolve<'a>(&self, id: &'a str) -> Result<(&Cell, &'a str), CellError> {
        let parsed = CellId::parse(id)?;
        let cell = match parsed.cell {
            Some(name) => self.cell(name)?,
            None => &self.cells[0],
        };
        Ok((cell, parsed.id))
    }

    /// Every cell's headroom, asked at once.
    pub async fn headrooms(&self) -> Vec<CellAnswer<Headroom>> {
        self.fan_out(|client| async move { client.headroom().await })
            .await
    }

    /// Every cell's sandboxes, asked at once; ids stay bare inside each
    /// answer (qualify them with [`Cell::qualify`]).
    pub async fn list_sandboxes(&self) -> Vec<CellAnswer<Vec<Sandbox>>> {
        self.fan_out(|client| async move { client.list_sandboxes().await })
            .await
    }

    async fn fan_out<'s, T, F, Fut>(&'s self, call: F) -> Vec<CellAnswer<T>>
    where
        F: Fn(&'s Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let asks = self.cells.iter().map(|cell| {
            let call = &call;
            async move {
                CellAnswer {
                    cell: cell.entry.name.clone(),
                    answer: cell.ask(call).await,
                }
            }
        });
        join_all(asks).await
    }

    /// The sandbox `id` names, `None` when its cell holds none.
    ///
    /// # Errors
    /// [`CellError`].
    pub async fn get_sandbox(&self, id: &str) -> Result<Option<Sandbox>, CellError> {
        let (cell, bare) = self.resolve(id)?;
        cell.ask(|client| client.get_sandbox(bare)).await
    }

    /// Deletes the sandbox `id` names.
    ///
    /// # Errors
    /// [`CellError`].
    pub async fn delete_sandbox(&self, id: &str) -> Result<Written<Sandbox>, CellError> {
        let (cell, bare) = self.resolve(id)?;
        cell.ask(|client| client.delete_sandbox(bare)).await
    }

    /// Creates a sandbox in the cell `cell` names, or, when `None`, where
    /// placement puts it (the module's doc). An empty `sandbox_id` is
    /// drawn here (`sb-` and 24 hex digits) so that placement and every
    /// retry see the same id. Answers the cell with the write.
    ///
    /// # Errors
    /// [`CellError`]; [`CellError::LookupIncomplete`] when a caller-named id
    /// could not be looked up in every cell.
    pub async fn create_sandbox(
        &self,
        mut request: CreateSandboxRequest,
        cell: Option<&str>,
    ) -> Result<(&Cell, Written<Sandbox>), CellError> {
        let named = !request.sandbox_id.is_empty();
        if !named {
            let drawn = new_request_id().map_err(|e| self.cells[0].failed(e))?;
            request.sandbox_id = format!("sb-{}", &drawn[..24.min(drawn.len())]);
        }
        let target = match cell {
            Some(name) => self.cell(name)?,
            None => match self.holder(&request.sandbox_id, named).await? {
                Some(holder) => holder,
                None => self.place(&request.sandbox_id).await?,
            },
        };
        let written = target.ask(|client| client.create_sandbox(request)).await?;
        Ok((target, written))
    }

    /// The cell that already holds `id`, when the caller named it (a
    /// retried launch); `None` for a drawn id.
    async fn holder(&self, id: &str, named: bool) -> Result<Option<&Cell>, CellError> {
        if !named {
            return Ok(None);
        }
        let found = join_all(
            self.cells
                .iter()
                .map(|cell| async move { (cell, cell.ask(|c| c.get_sandbox(id)).await) }),
        )
        .await;
        let mut holder = None;
        for (cell, got) in found {
            match got {
                Ok(Some(_)) => holder = holder.or(Some(cell)),
                Ok(None) => {}
                Err(source) => {
                    return Err(CellError::LookupIncomplete {
                        id: id.to_string(),
                        cell: cell.entry.name.clone(),
                        source: Box::new(source),
                    })
                }
            }
        }
        Ok(holder)
    }

    /// The admitting cell for `id`: rendezvous hashing weighted by free
    /// slots over the cells that answered with some.
    async fn place(&self, id: &str) -> Result<&Cell, CellError> {
        let admitting: Vec<&Cell> = self.cells.iter().filter(|c| c.admits()).collect();
        if admitting.is_empty() {
            return Err(CellError::NoCell(
                "the cell map marks no cell admits = true".into(),
            ));
        }
        let answers = join_all(
            admitting
                .iter()
                .map(|cell| async move { (*cell, cell.ask(Client::headroom).await) }),
        )
        .await;
        let mut why = Vec::new();
        let mut best: Option<(f64, &Cell)> = None;
        for (cell, headroom) in answers {
            match headroom {
                Ok(h) if h.free_slots > 0 => {
                    let score = rendezvous_score(cell.name(), id, h.free_slots);
                    if best.is_none_or(|(top, _)| score > top) {
                        best = Some((score, cell));
                    }
                }
                Ok(_) => why.push(format!("{}: no free slot", cell.name())),
                Err(e) => why.push(e.to_string()),
            }
        }
        best.map(|(_, cell)| cell)
            .ok_or_else(|| CellError::NoCell(why.join("; ")))
    }
}

/// Weighted rendezvous (highest random weight) score of `cell` for `key`:
/// `weight / -ln(u)`, `u` in (0, 1) drawn from SHA-256 of the two, so a
/// cell wins in proportion to its weight and a key's choice moves only
/// when the weights do.
fn rendezvous_score(cell: &str, key: &str, weight: u64) -> f64 {
    let mut hasher = Sha256::new();
    hasher.update(cell.as_bytes());
    hasher.update([0]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let mut top = [0u8; 8];
    top.copy_from_slice(&digest[..8]);
    // 53 bits, as a float in (0, 1).
    let bits = u64::from_be_bytes(top) >> 11;
    let u = (bits as f64 + 0.5) / (1u64 << 53) as f64;
    weight as f64 / -u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
[[cell]]
name = "eu-1"
cluster_id = "c-eu-1"
endpoints = ["10.0.0.1:7001", "10.0.0.2:7001"]
ca_file = "eu-1/ca.pem"
token_file = "/etc/openshell/eu-1.token"

[[cell]]
name = "eu-2"
cluster_id = "c-eu-2"
endpoints = ["gw.eu-2.example:7001"]
insecure = true
admits = false
"#;

    #[test]
    fn a_map_lists_cells_in_order_with_paths_from_its_directory() {
        let map = CellMap::parse(TWO, Path::new("/etc/cells")).unwrap();
        let cells = map.cells();
        assert_eq!(cells.len(), 2);
        assert_eq!(cells[0].name, "eu-1", "the first cell is the default");
        assert_eq!(
            cells[0].ca_file.as_deref(),
            Some(Path::new("/etc/cells/eu-1/ca.pem"))
        );
        assert_eq!(
            cells[0].token_file.as_deref(),
            Some(Path::new("/etc/openshell/eu-1.token")),
            "absolute paths are kept"
        );
        assert!(cells[0].admits, "admits by default");
        assert!(!cells[1].admits);
    }

    #[test]
    fn each_mistake_in_a_map_is_named() {
        let cell = |body: &str| format!("[[cell]]\n{body}\n");
        let ok = "name = \"a\"\ncluster_id = \"c1\"\nendpoints = [\"h:1\"]\ninsecure = true";
        let cases = [
            (String::new(), "missing field `cell`"),
            ("cell = []".to_string(), "lists no [[cell]]"),
            (cell(&ok.replace("\"a\"", "\"eu/1\"")), "invalid name"),
            (
                format!("{}{}", cell(ok), cell(&ok.replace("c1", "c2"))),
                "listed twice",
            ),
            (cell(&ok.replace("\"c1\"", "\" \"")), "cluster_id is empty"),
            (
                format!("{}{}", cell(ok), cell(&ok.replace("\"a\"", "\"b\""))),
                "is another cell's too",
            ),
            (cell(&ok.replace("[\"h:1\"]", "[]")), "endpoints must list"),
            (cell(&ok.replace("h:1", "h")), "is not host:port"),
            (cell(&ok.replace("h:1", "h:99999")), "is not host:port"),
            (
                cell(&ok.replace("insecure = true", "")),
                "no transport security",
            ),
            (
                cell(&format!("{ok}\nca_file = \"ca.pem\"")),
                "exclude each other",
            ),
            (
                cell(&format!("{ok}\nadmit = true")),
                "unknown field `admit`",
            ),
        ];
        for (text, want) in cases {
            let err = CellMap::parse(&text, Path::new(".")).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err:?} should say {want:?}");
        }
        let many: String = (0..=MAX_CELLS)
            .map(|i| {
                cell(
                    &ok.replace("\"a\"", &format!("\"a{i}\""))
                        .replace("c1", &format!("c{i}")),
                )
            })
            .collect();
        let err = CellMap::parse(&many, Path::new(".")).unwrap_err();
        assert!(err.contains("at most 64"), "{err}");
    }

    #[test]
    fn an_id_names_its_cell_or_the_default() {
        assert_eq!(
            CellId::parse("eu-2/sb-1").unwrap(),
            CellId {
                cell: Some("eu-2"),
                id: "sb-1"
            }
        );
        assert_eq!(
            CellId::parse("sb-1").unwrap(),
            CellId {
                cell: None,
                id: "sb-1"
            }
        );
        for bad in ["", "/sb-1", "eu-2/", "eu-2/sb/1"] {
            assert!(
                matches!(CellId::parse(bad), Err(CellError::InvalidId(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn placement_follows_free_slots_and_is_stable_for_an_id() {
        let mut wins = 0u32;
        for i in 0..4000 {
            let key = format!("sb-{i}");
            let a = rendezvous_score("a", &key, 100);
            let b = rendezvous_score("b", &key, 300);
            assert_eq!(
                a,
                rendezvous_score("a", &key, 100),
                "the same score every time"
            );
            if a > b {
                wins += 1;
            }
        }
        // "a" holds a quarter of the free slots: about 1000 of 4000.
        assert!((850..1150).contains(&wins), "a won {wins} of 4000");
        // Doubling every weight changes no choice.
        for i in 0..200 {
            let key = format!("sb-{i}");
            let once = rendezvous_score("a", &key, 100) > rendezvous_score("b", &key, 300);
            let twice = rendezvous_score("a", &key, 200) > rendezvous_score("b", &key, 600);
            assert_eq!(once, twice, "{key}");
        }
    }
}
