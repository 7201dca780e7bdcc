//! `backup ...`: a consistent snapshot from the leader
//! (`ClusterAdmin.Backup`) saved in the backup file format of
//! [`proto::backup`].

use proto::backup::BackupHeader;
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::BackupRequest;
use serde_json::json;

use super::emit;
use crate::{BackupCommand, CliError, Gateway, Output};

/// `backup ...`
pub async fn backup(gw: &Gateway, output: Output, command: BackupCommand) -> Result<(), CliError> {
    let BackupCommand::Save { file } = command;
    let r = gw
        .call(|c| async move {
            ClusterAdminClient::new(c)
                .max_decoding_message_size(64 * 1024 * 1024)
                .backup(BackupRequest {})
                .await
        })
        .await?
        .into_inner();
    let header = BackupHeader::for_state(
        r.cluster_id.clone(),
        r.term,
        r.index,
        r.taken_by_node,
        &r.state,
    );
    proto::backup::write(&file, &header, &r.state).map_err(|e| CliError::Local(e.to_string()))?;
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
