//! Services, the way kube-proxy's userspace mode served them: every Service
//! port gets a virtual address on the harness's bridge link, and a TCP proxy
//! there that forwards each connection to one of the Service's endpoints
//! (ready pods matching its selector; every matching pod with
//! `publishNotReadyAddresses`), round robin. Terminating pods are no
//! endpoints, as in Kubernetes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// The endpoints of one Service port: `ip:port` of each, kept current by
/// the harness's controller loop.
#[derive(Debug, Default, Clone)]
pub struct Endpoints(Arc<Mutex<Vec<String>>>);

impl Endpoints {
    /// Replaces the endpoint list.
    pub fn set(&self, list: Vec<String>) {
        if let Ok(mut g) = self.0.lock() {
            *g = list;
        }
    }

    /// The current list.
    pub fn get(&self) -> Vec<String> {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

/// Serves `listen` (the Service's virtual `ip:port`) until the task is
/// aborted.
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    listen: String,
    endpoints: Endpoints,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(&listen).await?;
    let next = Arc::new(AtomicUsize::new(0));
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let list = endpoints.get();
            if list.is_empty() {
                continue; // dropped: no endpoint, as a Service without ready pods
            }
            let start = next.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                for k in 0..list.len() {
                    let target = &list[(start + k) % list.len()];
                    let connect = tokio::time::timeout(
                        std::time::Duration::from_secs(2),
                        TcpStream::connect(target),
                    );
                    if let Ok(Ok(mut outbound)) = connect.await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    }))
}
