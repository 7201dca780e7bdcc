//! The list page token (`raft_store::page_token`, shared by object lists
//! and the pool's paginated reads), decoded directly and as a client sends
//! it in `ListRequest.page_token` through `Objects::list` over a small store
//! with and without a scope.
//! Tokens are gRPC strings: input that is not UTF-8 cannot arrive.

use std::sync::OnceLock;

use raft_store::objects::Objects;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    // The shared codec (object lists and the pool's paginated reads): a
    // token it accepts encodes back to itself.
    if let Ok(Some(last)) = raft_store::page_token::decode(token) {
        let again = raft_store::page_token::encode(&last);
        assert_eq!(
            raft_store::page_token::decode(&again)
                .ok()
                .flatten()
                .as_deref(),
            Some(last.as_str()),
            "a decoded token's key does not survive encode/decode"
        );
    }
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
