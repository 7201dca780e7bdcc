//! `fuzz-seeds [DIR]`: writes the seed corpus (real encodings, see
//! `fuzz::seeds`) as `DIR/<target>/<name>` (default `fuzz/corpus`). Files
//! already there are kept: AFL++ and `afl-cmin` add their own beside them.

use std::path::PathBuf;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus")));
    for seed in fuzz::seeds::all() {
        let target_dir = dir.join(seed.target);
        let path = target_dir.join(format!("seed-{}", seed.name));
        if let Err(e) =
            std::fs::create_dir_all(&target_dir).and_then(|()| std::fs::write(&path, &seed.bytes))
        {
            eprintln!("fuzz-seeds: {}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{} ({} bytes)", path.display(), seed.bytes.len());
    }
}
