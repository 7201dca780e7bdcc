//! `backup ...`: a consistent snapshot from the leader, streamed
//! (`ClusterAdmin.BackupStream`) and written chunk by chunk in the backup
//! file format of [`proto::backup`], so memory is bounded by one chunk
//! (at most [`proto::backup::CHUNK_BYTES`]), not by the state. The file is
//! created 0600 as `<file>.tmp`, renamed once complete; a failed save
//! leaves neither.

use proto::backup::{BackupHeader, BackupWriter};
use serde_json::json;

use super::emit;
use crate::{BackupCommand, CliError, Gateway, Output};

/// `backup ...`
pub async fn backup(gw: &Gateway, output: Output, command: BackupCommand) -> Result<(), CliError> {
    let BackupCommand::Save { file } = command;
    let local = |e: proto::backup::BackupError| CliError::Local(e.to_string());
    // Before the gateway is asked: a directory cannot become the file.
    proto::backup::check_target(&file).map_err(local)?;
    let mut stream = gw.ask(gw.client().backup_stream()).await?;
    let first = stream
        .message()
        .await?
        .ok_or_else(|| CliError::Local("the gateway sent an empty backup stream".into()))?;
    let announced = BackupHeader {
        cluster_id: first.cluster_id.clone(),
        term: first.term,
        index: first.index,
        bytes: first.bytes,
        crc32: first.crc32,
        taken_by_node: first.taken_by_node,
    };
    let mut writer = BackupWriter::create(&file, announced).map_err(local)?;
    writer.append(&first.data).map_err(local)?;
    while let Some(chunk) = stream.message().await? {
        writer.append(&chunk.data).map_err(local)?;
    }
    let header = writer.finish().map_err(local)?;
    emit(
        output,
        json!({"file": file.display().to_string(), "cluster_id": header.cluster_id, "index": header.index,
               "term": header.term, "bytes": header.bytes}),
        || {
            format!(
                "saved {} (log index {}, {} bytes)\n",
                file.display(),
                header.index,
                header.bytes
            )
        },
    );
    Ok(())
}
