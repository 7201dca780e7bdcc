//! One pod as real processes, the way the kubelet would run it: its own
//! network namespace (an address on the harness bridge), its own mount
//! namespace (ConfigMaps, Secrets, emptyDirs and volume claims mounted at
//! their `mountPath`s, `/etc/hosts` naming the Services and peers, a
//! read-only root when the container asks for one) and its own PID namespace
//! (stopping the pod kills everything it started). The container runs as its
//! `runAsUser`/`runAsGroup`, with `$(VAR)` expanded in command and args from
//! its environment (downward API values filled in).
//!
//! One container per pod (the chart's pods have one); init containers and
//! sidecars are refused rather than ignored.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, Volume};

use crate::manifest::Manifests;
use crate::token::{mint, TokenClaims};

/// Where the image keeps its binaries; the harness binds its `bin_dir`
/// there in every pod.
pub const IMAGE_BIN_DIR: &str = "/usr/local/bin";

/// Where Kubernetes mounts a pod's service account token, CA and namespace.
pub const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the harness knows of a pod before it starts.
#[derive(Debug, Clone)]
pub struct PodPlan {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// The pod's address on the bridge.
    pub ip: String,
    /// The network namespace to create.
    pub netns: String,
    /// The pod's spec, from its controller's template.
    pub spec: PodSpec,
    /// Volume claims (template name → host directory), kept across restarts
    /// of the pod like a PersistentVolumeClaim.
    pub claims: BTreeMap<String, PathBuf>,
}

/// Where pods find what they mount and run.
#[derive(Debug, Clone)]
pub struct PodContext {
    /// The harness's working directory (pod staging, logs).
    pub root: PathBuf,
    /// Where the image's binaries are (`openshell-gateway`, ...): bound at
    /// [`IMAGE_BIN_DIR`] in every pod, and a command whose file name is here
    /// runs from there.
    pub bin_dir: PathBuf,
    /// The file bound at every pod's `/etc/hosts`; the harness rewrites it
    /// in place (same inode) when pods or Services come and go.
    pub hosts: PathBuf,
    /// Extra environment of every container (the in-cluster API's address).
    pub extra_env: BTreeMap<String, String>,
    /// The in-cluster API's CA certificate (PEM), once the harness serves
    /// the API: pods that mount a service account token get it, a token
    /// naming them, and their namespace at [`SA_DIR`].
    pub api_ca: Option<Vec<u8>>,
}

/// A started pod.
#[derive(Debug)]
pub struct RunningPod {
    /// The plan it was started from.
    pub plan: PodPlan,
    /// `ip netns exec ... unshare ...`: its child is the container's
    /// process (PID 1 of the pod's PID namespace).
    child: Child,
    /// The container's environment, for probes and hooks that exec.
    env: BTreeMap<String, String>,
    /// The container's log file.
    pub log: PathBuf,
    /// `setpriv` arguments for the container's user.
    user: Vec<String>,
}

impl RunningPod {
    /// Starts `plan` in `ctx`; the network namespace must exist (the
    /// harness plugs it into the bridge first).
    ///
    /// # Errors
    /// When the spec asks for something the harness does not run, a volume's
    /// source is missing, or the process cannot start.
    pub fn start(
        ctx: &PodContext,
        manifests: &Manifests,
        plan: PodPlan,
    ) -> anyhow::Result<RunningPod> {
        let spec = &plan.spec;
        if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
            bail!(
                "pod {}: init containers are not run by the harness",
                plan.name
            );
        }
        let [container] = spec.containers.as_slice() else {
            bail!(
                "pod {}: the harness runs pods of exactly one container",
                plan.name
            );
        };
        let dir = ctx.root.join("pods").join(&plan.name);
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        let (uid, gid) = user_of(spec, container);
        let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
        let owner = (uid.unwrap_or(0), fs_group.or(gid).unwrap_or(0));
        let env = environment(ctx, manifests, &plan, container)?;
        let script_head = mount_script(ctx, manifests, &plan, container, &dir, owner)?;
        let mut script = script_head;
        let argv = command_line(ctx, container, &env)?;
        let mut user = Vec::new();
        if let Some(u) = uid {
            user.extend(["--reuid".to_string(), u.to_string()]);
            user.extend([
                "--regid".to_string(),
                gid.or(fs_group).unwrap_or(u).to_string(),
            ]);
            user.push("--clear-groups".to_string());
        }
        script.push_str("exec setpriv ");
        for a in user
            .iter()
            .chain(["--".to_string()].iter())
            .chain(argv.iter())
        {
            script.push_str(&q(Path::new(a)));
            script.push(' ');
        }
        script.push('\n');
        fs::write(dir.join("start.sh"), &script)?;
        let log = dir.join(format!("{}.log", container.name));
        let out = fs::File::create(&log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &plan.netns,
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
        ])
        .args([
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ])
        .env_clear()
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        // If the harness dies, the pod dies with it: `unshare --kill-child`
        // takes the pod's PID 1 (and so its whole PID namespace) along. The
        // signal follows the death of the spawning thread, which is the
        // harness's controller thread (it lives as long as the harness).
        // SAFETY: prctl(2) in the child before exec; async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting pod {}", plan.name))?;
        Ok(RunningPod {
            plan,
            child,
            env,
            log,
            user,
        })
    }

    /// The container's process (PID 1 of the pod), once it exists.
    pub fn container_pid(&self) -> Option<u32> {
        let unshare = self.child.id();
        // ip netns exec execs unshare, which forks the container.
        let children =
            fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Whether the pod's process has exited (and with what).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` to the container's process.
    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.container_pid() {
            let pid = i32::try_from(pid).unwrap_or(0);
            if pid > 0 {
                // SAFETY: kill(2) with a pid we read from /proc; no memory is touched.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
        }
    }

    /// The command that runs `argv` inside the pod (its namespaces, its
    /// user, its environment), as a `preStop` hook or an exec probe does;
    /// `None` before the container exists.
    pub fn exec_command(&self, argv: &[String], timeout: std::time::Duration) -> Option<Command> {
        let pid = self.container_pid()?;
        let mut cmd = Command::new("timeout");
        cmd.arg(format!("{}", timeout.as_secs().max(1)))
            .args([
                "nsenter",
                "--target",
                &pid.to_string(),
                "--net",
                "--mount",
                "--pid",
                "--",
                "setpriv",
            ])
            .args(&self.user)
            .arg("--")
            .args(argv)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Some(cmd)
    }

    /// Kills everything in the pod at once and reaps it.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.kill();
        }
    }
}

/// The part of the pod's start script that mounts: `/etc/hosts`, the
/// service account, every volume mount, a read-only root.
fn mount_script(
    ctx: &PodContext,
    manifests: &Manifests,
    plan: &PodPlan,
    container: &Container,
    dir: &Path,
    owner: (i64, i64),
) -> anyhow::Result<String> {
    let spec = &plan.spec;
    let mut script = String::from("set -e\n");
    script.push_str(&format!("mount --bind {} /etc/hosts\n", q(&ctx.hosts)));
    // The image's binaries at the image's path, whatever the pod mounts over
    // the host directory they were built in (an emptyDir at /tmp, say).
    script.push_str(&format!(
        "mount --bind {} {IMAGE_BIN_DIR}\n",
        q(&ctx.bin_dir)
    ));
    let sources = stage_volumes(manifests, plan, dir, owner)?;
    if let (true, Some(ca)) = (
        spec.automount_service_account_token != Some(false),
        &ctx.api_ca,
    ) {
        let sa = dir.join("serviceaccount");
        fs::create_dir_all(&sa)?;
        let token = mint(&claims(plan, Vec::new()));
        for (name, bytes) in [
            ("token", token.as_bytes()),
            ("ca.crt", ca.as_slice()),
            ("namespace", plan.namespace.as_bytes()),
        ] {
            fs::write(sa.join(name), bytes)?;
            chown(&sa.join(name), owner);
        }
        script.push_str(&format!(
            "mkdir -p {SA_DIR}; mount --bind {} {SA_DIR}\n",
            q(&sa)
        ));
    }
    for m in container.volume_mounts.iter().flatten() {
        let Some(src) = sources.get(&m.name) else {
            bail!("pod {}: volumeMount {} names no volume", plan.name, m.name);
        };
        let src = match &m.sub_path {
            Some(sub) if !sub.is_empty() => src.join(sub),
            _ => src.clone(),
        };
        let make = if src.is_dir() {
            "mkdir -p"
        } else {
            "mkdir -p \"$(dirname \"$T\")\"; touch"
        };
        let target = &m.mount_path;
        script.push_str(&format!(
            "T={t}; {make} \"$T\"; mount --bind {s} \"$T\"\n",
            t = q(Path::new(target)),
            s = q(&src)
        ));
        if m.read_only == Some(true) {
            script.push_str("mount -o remount,bind,ro \"$T\"\n");
        }
    }
    let read_only_root = container
        .security_context
        .as_ref()
        .and_then(|s| s.read_only_root_filesystem)
        == Some(true);
    if read_only_root {
        script.push_str("mount -o remount,bind,ro /\n");
    }
    Ok(script)
}

/// `runAsUser`/`runAsGroup`: the container's, else the pod's.
fn user_of(spec: &PodSpec, c: &Container) -> (Option<i64>, Option<i64>) {
    let pod = spec.security_context.as_ref();
    let own = c.security_context.as_ref();
    let uid = own
        .and_then(|s| s.run_as_user)
        .or(pod.and_then(|s| s.run_as_user));
    let gid = own
        .and_then(|s| s.run_as_group)
        .or(pod.and_then(|s| s.run_as_group));
    (uid, gid)
}

/// Writes every volume of the pod under `dir/vol/<name>` (claims are their
/// own directories) and returns name → source path.
fn stage_volumes(
    manifests: &Manifests,
    plan: &PodPlan,
    dir: &Path,
    owner: (i64, i64),
) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for v in plan.spec.volumes.iter().flatten() {
        let path = dir.join("vol").join(&v.name);
        let files = volume_files(plan, manifests, v)?;
        match files {
            Some((files, mode)) => {
                fs::create_dir_all(&path)?;
                for (k, bytes) in files {
                    let f = path.join(&k);
                    if let Some(parent) = f.parent() {
                        fs::create_dir_all(parent)?;
                    }
                    fs::write(&f, bytes)?;
                    fs::set_permissions(&f, fs::Permissions::from_mode(mode))?;
                    chown(&f, owner);
                }
            }
            None if v.empty_dir.is_some() => {
                fs::create_dir_all(&path)?;
                chown(&path, owner);
            }
            None if v.persistent_volume_claim.is_some() => {
                bail!("pod {}: volume {} names an existing claim; the harness makes claims only from volumeClaimTemplates", plan.name, v.name);
            }
            None => bail!(
                "pod {}: volume {} is of a kind the harness does not mount",
                plan.name,
                v.name
            ),
        }
        out.insert(v.name.clone(), path);
    }
    for (name, host) in &plan.claims {
        fs::create_dir_all(host)?;
        chown(host, owner);
        out.insert(name.clone(), host.clone());
    }
    Ok(out)
}

/// The files of a ConfigMap, Secret or projected volume, and their mode;
/// `None` for other kinds.
#[allow(clippy::type_complexity)]
fn volume_files(
    plan: &PodPlan,
    manifests: &Manifests,
    v: &Volume,
) -> anyhow::Result<Option<(BTreeMap<String, Vec<u8>>, u32)>> {
    let pick = |all: BTreeMap<String, Vec<u8>>,
                items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>| {
        match items {
            Some(items) if !items.is_empty() => items
                .iter()
                .filter_map(|i| all.get(&i.key).map(|b| (i.path.clone(), b.clone())))
                .collect(),
            _ => all,
        }
    };
    let mode = |m: Option<i32>| u32::try_from(m.unwrap_or(0o644)).unwrap_or(0o644);
    if let Some(cm) = &v.config_map {
        let files = manifests.configmap_files(&cm.name)?;
        return Ok(Some((
            pick(files, cm.items.as_ref()),
            mode(cm.default_mode),
        )));
    }
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let files = manifests.secret_files(&name)?;
        return Ok(Some((pick(files, s.items.as_ref()), mode(s.default_mode))));
    }
    if let Some(p) = &v.projected {
        let mut files = BTreeMap::new();
        for src in p.sources.iter().flatten() {
            if let Some(s) = &src.secret {
                files.extend(pick(manifests.secret_files(&s.name)?, s.items.as_ref()));
            }
            if let Some(c) = &src.config_map {
                files.extend(pick(manifests.configmap_files(&c.name)?, c.items.as_ref()));
            }
            if let Some(t) = &src.service_account_token {
                let audiences = t.audience.iter().cloned().collect();
                let token = mint(&claims(plan, audiences));
                files.insert(t.path.clone(), token.into_bytes());
            }
        }
        return Ok(Some((files, mode(p.default_mode))));
    }
    Ok(None)
}

/// What a token minted for this pod says.
fn claims(plan: &PodPlan, audiences: Vec<String>) -> TokenClaims {
    TokenClaims {
        namespace: plan.namespace.clone(),
        service_account: plan
            .spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        pod: plan.name.clone(),
        audiences,
    }
}

fn chown(path: &Path, (uid, gid): (i64, i64)) {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return;
    };
    let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
}

/// The container's environment: `env` (values, the downward API, Secret
/// and ConfigMap keys), `envFrom`, and the harness's own.
fn environment(
    ctx: &PodContext,
    manifests: &Manifests,
    plan: &PodPlan,
    c: &Container,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_string(),
        format!("{}:/usr/local/bin:/usr/bin:/bin", ctx.bin_dir.display()),
    );
    env.insert("HOSTNAME".to_string(), plan.name.clone());
    env.extend(ctx.extra_env.clone());
    for from in c.env_from.iter().flatten() {
        let files = if let Some(s) = &from.secret_ref {
            manifests.secret_files(&s.name)?
        } else if let Some(cm) = &from.config_map_ref {
            manifests.configmap_files(&cm.name)?
        } else {
            continue;
        };
        let prefix = from.prefix.clone().unwrap_or_default();
        for (k, v) in files {
            env.insert(
                format!("{prefix}{k}"),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
    }
    for e in c.env.iter().flatten() {
        let value = env_value(manifests, plan, e, &env)?;
        env.insert(e.name.clone(), value);
    }
    Ok(env)
}

fn env_value(
    manifests: &Manifests,
    plan: &PodPlan,
    e: &EnvVar,
    earlier: &BTreeMap<String, String>,
) -> anyhow::Result<String> {
    if let Some(v) = &e.value {
        return Ok(expand(v, earlier));
    }
    let Some(from) = &e.value_from else {
        return Ok(String::new());
    };
    if let Some(f) = &from.field_ref {
        return match f.field_path.as_str() {
            "metadata.name" => Ok(plan.name.clone()),
            "metadata.namespace" => Ok(plan.namespace.clone()),
            "metadata.uid" => Ok(format!("harness-{}", plan.name)),
            "status.podIP" => Ok(plan.ip.clone()),
            "spec.nodeName" => Ok("harness".to_string()),
            "spec.serviceAccountName" => {
                Ok(plan.spec.service_account_name.clone().unwrap_or_default())
            }
            other => bail!(
                "env {}: fieldRef {other} is not filled in by the harness",
                e.name
            ),
        };
    }
    let lookup = |files: BTreeMap<String, Vec<u8>>, key: &str| {
        files
            .get(key)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .with_context(|| format!("env {}: key {key} is missing", e.name))
    };
    if let Some(s) = &from.secret_key_ref {
        return lookup(manifests.secret_files(&s.name)?, &s.key);
    }
    if let Some(c) = &from.config_map_key_ref {
        return lookup(manifests.configmap_files(&c.name)?, &c.key);
    }
    bail!("env {}: a valueFrom the harness does not fill in", e.name)
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, `$$` is a
/// literal `$`, anything else stays as written.
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) if env.contains_key(&body[..end]) => {
                    out.push_str(&env[&body[..end]]);
                    rest = &body[end + 1..];
                }
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// command + args, expanded, with the program taken from the image's
/// binaries (`bin_dir`) when its file name is one of them.
fn command_line(
    ctx: &PodContext,
    c: &Container,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let mut argv: Vec<String> = c.command.iter().flatten().map(|a| expand(a, env)).collect();
    if argv.is_empty() {
        bail!(
            "container {}: no command (the harness has no image entrypoints)",
            c.name
        );
    }
    argv.extend(c.args.iter().flatten().map(|a| expand(a, env)));
    let program = Path::new(&argv[0]);
    if let Some(file) = program.file_name() {
        if ctx.bin_dir.join(file).exists() {
            argv[0] = Path::new(IMAGE_BIN_DIR).join(file).display().to_string();
        }
    }
    Ok(argv)
}

/// Single-quotes a path or word for `sh`.
fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_kubernetes() {
        let env: BTreeMap<String, String> = [("POD_NAME".to_string(), "gw-2".to_string())]
            .into_iter()
            .collect();
        assert_eq!(expand("$(POD_NAME).peer:7101", &env), "gw-2.peer:7101");
        assert_eq!(expand("$$(POD_NAME)", &env), "$(POD_NAME)");
        assert_eq!(expand("$(NOPE) $x", &env), "$(NOPE) $x");
    }
}
