//! `--cells FILE`: the CLI over several gateway groups (cells,
//! docs/design/0005-cells.md), through `openshell-client`'s
//! [`Cells`](openshell_client::Cells).
//!
//! - `sandbox create` places the sandbox (or puts it in `--cell`);
//!   `sandbox get`, `delete` and `exec` take `<cell>/<id>` (a bare id is the
//!   default cell's, the map's first); `sandbox list` asks every cell
//!   (`--cell`: one) and labels each row with its cell. Ids are printed
//!   `<cell>/<id>`.
//! - Every other command talks to one group: the one `--cell` names.
//! - Each cell's cluster id is checked against the map before its first
//!   call: a map that points a name at the wrong group fails loudly.

use std::path::Path;

use openshell_client::cells::{Cell, CellAnswer, CellError};
use openshell_client::{CellMap, Cells};
use proto::tls::ClientTls;

use crate::{CliError, Gateway};

/// The cells of a map, each with the CLI's client of its gateways.
pub struct CellGateways {
    /// Placement, ids and fan-out.
    pub cells: Cells,
    /// The CLI's view of each cell, in the map's order (to explain a
    /// failed call in the same words as without a map).
    gateways: Vec<Gateway>,
}

impl CellGateways {
    /// Reads the map at `path` and sets up a client per cell.
    ///
    /// # Errors
    /// [`CliError::Local`] naming the map and what to fix.
    pub fn load(path: &Path) -> Result<CellGateways, CliError> {
        let map = CellMap::load(path).map_err(|e| CliError::Local(e.to_string()))?;
        let mut gateways = Vec::new();
        let cells = Cells::with_clients(&map, |entry| {
            let local = |what: &str, e: &dyn std::fmt::Display| {
                CliError::Local(format!(
                    "--cells {}: cell {}: {what}: {e}",
                    path.display(),
                    entry.name
                ))
            };
            let tls = entry
                .ca_file
                .as_deref()
                .map(|ca| ClientTls::load(ca, None).map_err(|e| local("ca_file", &e)))
                .transpose()?;
            let token = entry
                .token(path)
                .map_err(|e| CliError::Local(e.to_string()))?
                .map(Into::into);
            let gateway = Gateway::new(entry.endpoints.clone(), token, tls)?;
            let client = gateway.client().clone();
            gateways.push(gateway);
            Ok::<_, CliError>(client)
        })?;
        Ok(CellGateways { cells, gateways })
    }

    /// The CLI's client of the cell called `name` (every cell of the map
    /// has one).
    fn gateway_of(&self, name: &str) -> Result<&Gateway, CliError> {
        self.cells
            .cells()
            .iter()
            .zip(&self.gateways)
            .find(|(c, _)| c.name() == name)
            .map(|(_, gw)| gw)
            .ok_or_else(|| CliError::Usage(format!("the cell map lists no cell {name:?}")))
    }

    /// The CLI's client of the cell `name`, once its cluster id matched.
    ///
    /// # Errors
    /// As [`CellGateways::explain`].
    pub async fn gateway(&self, name: &str) -> Result<&Gateway, CliError> {
        let cell = self.cells.cell(name).map_err(|e| self.explain(e))?;
        self.checked(cell).await
    }

    /// The CLI's client of `cell`, once its cluster id matched.
    ///
    /// # Errors
    /// As [`CellGateways::explain`].
    pub async fn checked(&self, cell: &Cell) -> Result<&Gateway, CliError> {
        cell.client().await.map_err(|e| self.explain(e))?;
        self.gateway_of(cell.name())
    }

    /// What a failed call across cells means for the user: a call one cell
    /// failed is explained as without a map, prefixed with the cell.
    pub fn explain(&self, e: CellError) -> CliError {
        match e {
            CellError::Map { .. } => CliError::Local(e.to_string()),
            CellError::UnknownCell { .. } | CellError::InvalidId(_) => {
                CliError::Usage(e.to_string())
            }
            CellError::WrongCluster { .. } | CellError::NoCell(_) => {
                CliError::Refused(e.to_string())
            }
            CellError::LookupIncomplete { .. } => CliError::Unavailable(e.to_string()),
            CellError::Call { cell, source } => match self.gateway_of(&cell) {
                Ok(gw) => prefixed(&cell, gw.explain(*source)),
                Err(_) => CliError::Refused(format!("cell {cell}: {source}")),
            },
        }
    }

    /// The usage error of a single-group command given a map without
    /// `--cell`.
    pub fn name_one(&self, command: &str) -> CliError {
        let names: Vec<&str> = self.cells.cells().iter().map(Cell::name).collect();
        CliError::Usage(format!(
            "{command} talks to one gateway group: name it with --cell (the cell map lists {})",
            names.join(", ")
        ))
    }

    /// Each cell's answer, or the first failure after the answers were
    /// kept: the caller prints what it got, then fails.
    pub fn split<T>(&self, answers: Vec<CellAnswer<T>>) -> (Vec<(String, T)>, Vec<CliError>) {
        let mut got = Vec::new();
        let mut failed = Vec::new();
        for CellAnswer { cell, answer } in answers {
            match answer {
                Ok(value) => got.push((cell, value)),
                Err(e) => failed.push(self.explain(e)),
            }
        }
        (got, failed)
    }
}

/// `e` with "cell NAME: " in front of its words (the exit code kept).
fn prefixed(cell: &str, e: CliError) -> CliError {
    let at = |m: String| format!("cell {cell}: {m}");
    match e {
        CliError::Unreachable(m) => {
            CliError::Unavailable(at(format!("no gateway reachable at {m}")))
        }
        CliError::Unavailable(m) => CliError::Unavailable(at(m)),
        CliError::Tls(m) => CliError::Tls(at(m)),
        CliError::Unauthorized(m) => CliError::Unauthorized(at(m)),
        CliError::NotFound(m) => CliError::NotFound(at(m)),
        CliError::NoLeader(m) => CliError::NoLeader(at(m)),
        CliError::NoQuorum(m) => CliError::NoQuorum(at(m)),
        CliError::Refused(m) => CliError::Refused(at(m)),
        CliError::Local(m) => CliError::Local(at(m)),
        CliError::Usage(m) => CliError::Usage(at(m)),
        CliError::ReplicasDiffer(m) => CliError::ReplicasDiffer(at(m)),
        CliError::ExitStatus(code) => CliError::ExitStatus(code),
    }
}
