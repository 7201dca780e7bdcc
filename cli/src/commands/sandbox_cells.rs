//! `sandbox ...` with `--cells FILE`: placement, `<cell>/<id>` ids and the
//! list of every cell ([`crate::cells`]).

use proto::pool_admin::Sandbox;
use serde_json::Value;

use super::sandbox::{create_request, sandbox_json, sandbox_rows};
use super::{emit, sandbox};
use crate::cells::CellGateways;
use crate::{CliError, Output, SandboxCommand};

/// `id` with its cell: as given when it names one, else in `cell` (the
/// `--cell` flag) when given, else bare (the default cell's).
fn in_cell(id: &str, cell: Option<&str>) -> String {
    match cell {
        Some(cell) if !id.contains('/') => format!("{cell}/{id}"),
        _ => id.to_string(),
    }
}

/// `s` as one cell's record: its id `<cell>/<id>`, and a `cell` field.
fn labelled(cell: &str, s: &Sandbox) -> (Value, Sandbox) {
    let qualified = Sandbox {
        id: format!("{cell}/{}", s.id),
        ..s.clone()
    };
    let mut value = sandbox_json(&qualified);
    if let Value::Object(map) = &mut value {
        map.insert("cell".into(), Value::String(cell.to_string()));
    }
    (value, qualified)
}

fn print_one(output: Output, cell: &str, s: &Sandbox) {
    let (value, qualified) = labelled(cell, s);
    emit(output, value, || {
        sandbox_rows(std::slice::from_ref(&qualified))
    });
}

/// `sandbox ...` across the cells of `cg`; `cell` is `--cell`.
///
/// # Errors
/// What the call failed on, prefixed with its cell; for `list`, the first
/// cell that did not answer, after the others' rows were printed.
pub async fn sandbox_cells(
    cg: &CellGateways,
    cell: Option<&str>,
    output: Output,
    command: SandboxCommand,
) -> Result<(), CliError> {
    let explain = |e| cg.explain(e);
    match command {
        SandboxCommand::Create { id, command } => {
            let request = create_request(id, &command)?;
            let (at, written) = cg
                .cells
                .create_sandbox(request, cell)
                .await
                .map_err(explain)?;
            print_one(output, at.name(), &written.value);
        }
        SandboxCommand::Delete { id } => {
            let id = in_cell(&id, cell);
            let (at, _) = cg.cells.resolve(&id).map_err(explain)?;
            let written = cg.cells.delete_sandbox(&id).await.map_err(explain)?;
            print_one(output, at.name(), &written.value);
        }
        SandboxCommand::Get { id } => {
            let id = in_cell(&id, cell);
            let (at, _) = cg.cells.resolve(&id).map_err(explain)?;
            let s = cg
                .cells
                .get_sandbox(&id)
                .await
                .map_err(explain)?
                .ok_or_else(|| CliError::NotFound(format!("sandbox {id} does not exist")))?;
            print_one(output, at.name(), &s);
        }
        SandboxCommand::List {
            watch: false,
            interval: None,
        } => {
            let answers = match cell {
                Some(name) => {
                    let gw = cg.gateway(name).await?;
                    let list = gw.ask(gw.client().list_sandboxes()).await?;
                    vec![(name.to_string(), list)]
                }
                None => {
                    let (got, failed) = cg.split(cg.cells.list_sandboxes().await);
                    print_list(output, &got);
                    return failed.into_iter().next().map_or(Ok(()), Err);
                }
            };
            print_list(output, &answers);
        }
        SandboxCommand::Exec {
            id,
            command,
            timeout_ms,
        } => {
            let id = in_cell(&id, cell);
            let (at, bare) = cg.cells.resolve(&id).map_err(explain)?;
            let exec = SandboxCommand::Exec {
                id: bare.to_string(),
                command,
                timeout_ms,
            };
            return sandbox(cg.checked(at).await?, output, exec).await;
        }
        list @ SandboxCommand::List { .. } => {
            let name = cell.ok_or_else(|| cg.name_one("sandbox list --watch"))?;
            return sandbox(cg.gateway(name).await?, output, list).await;
        }
    }
    Ok(())
}

fn print_list(output: Output, answers: &[(String, Vec<Sandbox>)]) {
    let (values, rows): (Vec<Value>, Vec<Sandbox>) = answers
        .iter()
        .flat_map(|(cell, list)| list.iter().map(move |s| labelled(cell, s)))
        .unzip();
    emit(output, Value::Array(values), || sandbox_rows(&rows));
}
