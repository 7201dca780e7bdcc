//! Scenario: a runtime caught in `execve` is never taken for gone (issue
//! 27: a Jepsen pool run saw the leader's launcher fail a sandbox 2.5 ms
//! after spawning its runtime, "runtime exited: no output", while the
//! runtime went on to serve).
//!
//! The driver spawns `ip netns exec <ns> <runtime> ...`, which execs the
//! runtime under the same pid. `/proc/<pid>/cmdline` read in two `read`
//! calls (what `std::fs::read` does: a 32-byte probe first) can take its
//! first 32 bytes from `ip`'s arguments and then meet the new image with no
//! arguments mapped yet (end of file): "ip netns exec <ns> /tm", which
//! names neither the runtime nor its sandbox, so the process looked gone.
//!
//! - given: a namespace, and a link named like the runtime to `/bin/sh`
//! - when: 300 times, `ip netns exec <ns> <link> -c "sleep 0.2" x
//!   --sandbox-id <id>` is spawned and its liveness observed in a tight
//!   loop for 30 ms
//! - then: while the process runs, it is never observed gone

mod common;

use std::time::{Duration, Instant};

use common::Shared;
use sandbox_driver::process::entry::{liveness, Liveness};

#[test]
fn a_runtime_in_execve_is_never_observed_gone() {
    if !testkit::is_root() {
        eprintln!("skipping t04: needs root (ip netns)");
        return;
    }
    let (shared, _) = Shared::new("t04", 2);
    let runtime_file = "openshell-sandbox-runtime";
    let link = shared.dir.path().join(runtime_file);
    std::os::unix::fs::symlink("/bin/sh", &link).expect("symlink");
    let sandbox = format!("sb-t04-{}", std::process::id());
    let mut false_gone = 0;
    let mut observations = 0;
    for _ in 0..300 {
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &shared.name])
            .arg(&link)
            .args(["-c", "sleep 0.2", "x", "--sandbox-id", &sandbox])
            .spawn()
            .expect("spawn ip netns exec");
        let pid = i32::try_from(child.id()).expect("pid");
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(30) {
            observations += 1;
            if liveness(pid, &sandbox, runtime_file.as_ref()) == Liveness::Gone
                && child.try_wait().expect("try_wait").is_none()
            {
                false_gone += 1;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    eprintln!("{observations} observations, {false_gone} of a running process as gone");
    assert_eq!(
        false_gone, 0,
        "a running process was observed gone {false_gone} times in {observations}"
    );
}
