//! A scripted supervisor speaking the real SupervisorHost stream protocol:
//! it attaches to one gateway (failing over to the next when the stream
//! breaks), sends HostStatus every interval, and acknowledges every
//! assignment term after `ack_delay` (standing in for the grant handshake
//! with the sandbox runtime).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::{
    gateway_message, supervisor_message, HostHello, HostStatus, SandboxInstanceAssignment,
    SupervisorMessage, TermAck,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// What the fake supervisor saw.
#[derive(Default)]
pub struct Seen {
    /// sandbox id -> latest assignment.
    pub assignments: BTreeMap<String, SandboxInstanceAssignment>,
    /// Gateways it attached to, in order.
    pub attached_to: Vec<String>,
    /// The incarnation the pool granted (HelloAccepted); sent back as the
    /// known incarnation when it re-attaches.
    pub incarnation: u64,
}

/// A running fake supervisor; dropping it stops it.
pub struct FakeSupervisor {
    pub member: String,
    pub seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeSupervisor {
    pub fn start(
        member: &str,
        incarnation: u64,
        capacity: u32,
        gateways: Vec<String>,
        ack_delay: Duration,
    ) -> Self {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(
            member.to_string(),
            incarnation,
            capacity,
            gateways,
            ack_delay,
            seen.clone(),
            stop.clone(),
        ));
        FakeSupervisor {
            member: member.to_string(),
            seen,
            stop,
            task,
        }
    }

    /// Sandboxes currently assigned to it.
    pub fn sandboxes(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .assignments
            .keys()
            .cloned()
            .collect()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

impl Drop for FakeSupervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn run(
    member: String,
    incarnation: u64,
    capacity: u32,
    gateways: Vec<String>,
    ack_delay: Duration,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
) {
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let gateway = gateways[next % gateways.len()].clone();
        next += 1;
        let _ = attach_once(&member, incarnation, capacity, &gateway, ack_delay, &seen).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn attach_once(
    member: &str,
    incarnation: u64,
    capacity: u32,
    gateway: &str,
    ack_delay: Duration,
    seen: &Arc<Mutex<Seen>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // `incarnation` names the fake's process (its process id); the pool
    // assigns the incarnation itself (docs/design/0002).
    let known = seen.lock().unwrap_or_else(|p| p.into_inner()).incarnation;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{gateway}"))?
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await?;
    let mut client = SupervisorHostClient::new(channel);
    let (tx, rx) = mpsc::channel::<SupervisorMessage>(64);
    tx.send(SupervisorMessage {
        message: Some(supervisor_message::Message::Hello(HostHello {
            member_id: member.into(),
            member_uid: format!("uid-{member}"),
            advertise_address: format!("127.0.0.1:1{incarnation:04}"),
            capacity,
            credential: String::new(),
            process_id: incarnation,
            known_incarnation: known,
            ..HostHello::default()
        })),
    })
    .await?;
    let mut inbound = client.attach(ReceiverStream::new(rx)).await?.into_inner();
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .attached_to
        .push(gateway.to_string());
    let pinger = {
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let status = SupervisorMessage {
                    message: Some(supervisor_message::Message::Status(HostStatus::default())),
                };
                if tx.send(status).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let result = async {
        while let Some(message) = inbound.message().await? {
            let snapshot = match message.message {
                Some(gateway_message::Message::Snapshot(snapshot)) => snapshot,
                Some(gateway_message::Message::Accepted(a)) => {
                    seen.lock().unwrap_or_else(|p| p.into_inner()).incarnation = a.incarnation;
                    continue;
                }
                None => continue,
            };
            {
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                seen.assignments = snapshot
                    .assignments
                    .iter()
                    .map(|a| (a.sandbox_id.clone(), a.clone()))
                    .collect();
            }
            for a in snapshot.assignments.into_iter().filter(|a| !a.acknowledged) {
                let tx = tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ack_delay).await;
                    let ack = TermAck {
                        sandbox_id: a.sandbox_id,
                        generation: a.generation,
                        term: a.term,
                    };
                    let _ = tx
                        .send(SupervisorMessage {
                            message: Some(supervisor_message::Message::Ack(ack)),
                        })
                        .await;
                });
            }
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    }
    .await;
    pinger.abort();
    result
}
