//! `fuzz-afl <target>`: the AFL++ harness (persistent mode) of one target of
//! `fuzz::TARGETS`; `fuzz-afl --list` names them. Built by `cargo afl build`
//! with the `afl` feature (scripts/fuzz.sh); run under `cargo afl fuzz`.

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    if name == "--list" || name.is_empty() {
        for t in fuzz::TARGETS {
            println!("{}\t{}", t.name, t.what);
        }
        return;
    }
    let Some(target) = fuzz::find(&name) else {
        eprintln!("fuzz-afl: no target {name:?} (fuzz-afl --list)");
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
