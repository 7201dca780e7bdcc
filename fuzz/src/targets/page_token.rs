//! The object store's list page token, as a client sends it in
//! `ListRequest.page_token`, through `Objects::list` (the public path to
//! the token decoder) over a small store with and without a scope.
//! Tokens are gRPC strings: input that is not UTF-8 cannot arrive.

use std::sync::OnceLock;

use raft_store::objects::Objects;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    static STORE: OnceLock<Objects> = OnceLock::new();
    let store = STORE.get_or_init(|| crate::seeds::gateway_state().objects);
    for (object_type, scope) in [("sandbox", ""), ("sandbox", "team-a"), ("none", "")] {
        for page_size in [0, 1] {
            if let Ok(page) = store.list(object_type, scope, page_size, token) {
                let limit = if page_size == 0 { usize::MAX } else { 1 };
                assert!(page.objects.len() <= limit, "a page longer than its size");
                if let Some(next) = page.next_page_token {
                    if let Err(e) = store.list(object_type, scope, page_size, &next) {
                        panic!("the store refuses its own next_page_token {next:?}: {e}");
                    }
                }
            }
        }
    }
}
