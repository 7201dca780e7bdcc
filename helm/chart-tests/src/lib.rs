//! Offline proofs of the Helm chart `helm/openshell-gateway`: the helpers its
//! tests share. No Kubernetes cluster and no `helm` binary are involved.
//!
//! # Layout
//!
//! - [`Tools`]: the Python venv with Helm's library (`helm-python-sdk`) and
//!   `kubernetes-validate`; [`Tools::render`] runs `render.py` (values in,
//!   rendered objects out), [`Tools::validate`] checks objects against the
//!   Kubernetes 1.30 schemas.
//! - [`Rendered`]: the objects of one render, looked up by kind and name.
//! - [`Pod`]: one pod of a rendered StatefulSet or Deployment made concrete
//!   the way the kubelet would: its projected volume written as files under
//!   a temporary root, its env resolved (downward API, ConfigMap keys), its
//!   `$(VAR)` arguments expanded, and the absolute mount paths rewritten to
//!   that root, so the real binaries can check the configuration.
//!
//! Tests: `tests/t01_render.rs` (render, lint, schemas, fields, what a
//! replica change touches), `tests/t02_golden.rs` (the gateway TOML,
//! `UPDATE_GOLDEN=1` rewrites `golden/`), `tests/t03_binaries_accept.rs`
//! (`--check-config` of both binaries), `tests/t04_runtime_pod.rs` (the
//! sandbox driver's Pod built from the rendered template),
//! `tests/t05_upgrade.rs` (upgrades keep Secrets and voters; `lookup`
//! answered from a previous render by [`chart_with_fake_lookup`]). See
//! helm/README.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// The venv `scripts/test-deps.sh` installs the Python tools into.
pub const VENV: &str = "/opt/openshell-test-venv";

/// How to install the tools, for the failure message.
pub const INSTALL: &str =
    "bash scripts/test-deps.sh (as root), or: python3 -m venv /opt/openshell-test-venv && \
     /opt/openshell-test-venv/bin/pip install helm-python-sdk==0.2.2 kubernetes-validate==1.37.0";

/// The release namespace every test renders into.
pub const NAMESPACE: &str = "openshell";

/// The release name every test renders with.
pub const RELEASE: &str = "rel";

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../openshell-gateway")
}

/// `render.py`, next to this crate's manifest.
pub fn render_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("render.py")
}

/// The Python interpreter with `helm_python` and the `kubernetes-validate`
/// command.
pub struct Tools {
    /// A Python that imports `helm_python` and `yaml`.
    pub python: PathBuf,
    /// The `kubernetes-validate` executable.
    pub validate: PathBuf,
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn find_tools() -> Result<Tools, String> {
    let python = std::env::var_os("OPENSHELL_HELM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(VENV).join("bin/python"));
    let ok = Command::new(&python)
        .args(["-c", "import helm_python, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Err(format!(
            "{} cannot import helm_python (PyPI helm-python-sdk 0.2.2); install it: {INSTALL}",
            python.display()
        ));
    }
    let validate = std::env::var_os("OPENSHELL_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(VENV).join("bin/kubernetes-validate"));
    if !validate.exists() {
        return Err(format!(
            "kubernetes-validate not found at {}; install it: {INSTALL}",
            validate.display()
        ));
    }
    Ok(Tools { python, validate })
}

/// The tools, or `None` when they are missing and this is not root (the
/// test is then skipped and counted in `$OPENSHELL_SKIP_LOG`, like
/// sandbox-driver's t11). As root (CI, scripts/test.sh) a missing tool
/// fails the test with the command that installs it.
pub fn tools(test: &str) -> Option<Tools> {
    match find_tools() {
        Ok(t) => Some(t),
        Err(why) if !is_root() => {
            eprintln!("skipped: {test}: {why}");
            if let Some(path) = std::env::var_os("OPENSHELL_SKIP_LOG") {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                {
                    let _ = writeln!(f, "{test} (helm-python-sdk or kubernetes-validate missing)");
                }
            }
            None
        }
        Err(why) => panic!("{why}"),
    }
}

/// One offline render of the chart.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// Every object, hooks included, in template order.
    pub objects: Vec<Value>,
    /// The rendered NOTES.txt.
    pub notes: String,
    /// `helm lint --strict` report, when asked for.
    pub lint: Option<Value>,
}

impl Tools {
    fn run_render(&self, request: Value) -> Result<Value, String> {
        let mut child = Command::new(&self.python)
            .arg(render_script())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", self.python.display()));
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin
                .write_all(request.to_string().as_bytes())
                .expect("write render request");
        }
        let out = child.wait_with_output().expect("render.py output");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(serde_json::from_slice(&out.stdout).expect("render.py prints JSON"))
    }

    fn rendered(&self, request: Value) -> Rendered {
        let out = self
            .run_render(request.clone())
            .unwrap_or_else(|e| panic!("render of {request} failed: {e}"));
        Rendered {
            objects: out["objects"].as_array().cloned().unwrap_or_default(),
            notes: out["notes"].as_str().unwrap_or_default().to_string(),
            lint: out.get("lint").cloned(),
        }
    }

    /// Renders the chart with `values` (over values.yaml) as release
    /// [`RELEASE`] in [`NAMESPACE`]; panics on a render error.
    pub fn render(&self, values: Value) -> Rendered {
        self.rendered(json!({"values": values, "name": RELEASE, "namespace": NAMESPACE}))
    }

    /// As [`Tools::render`], plus `helm lint --strict --kube-version v1.30.0`.
    pub fn render_and_lint(&self, values: Value) -> Rendered {
        self.rendered(
            json!({"values": values, "name": RELEASE, "namespace": NAMESPACE, "lint": true}),
        )
    }

    /// The error of a render that must fail (schema or a template's `fail`).
    pub fn render_error(&self, values: Value) -> String {
        match self.run_render(json!({"values": values, "name": RELEASE, "namespace": NAMESPACE})) {
            Ok(_) => panic!("rendering {values} succeeded; expected an error"),
            Err(e) => e,
        }
    }

    /// Every object passes `kubernetes-validate --strict -k 1.30.0` (kinds
    /// of CRDs, e.g. ServiceMonitor, are left out: no schema ships for them).
    pub fn validate(&self, objects: &[Value]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            if o["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("monitoring.coreos.com/"))
            {
                continue;
            }
            let file = dir.path().join(format!("{i:03}.json"));
            std::fs::write(&file, serde_json::to_vec_pretty(o).expect("json")).expect("write");
            files.push(file);
        }
        let out = Command::new(&self.validate)
            .args(["--strict", "-k", "1.30.0"])
            .args(&files)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.validate.display()));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kubernetes-validate refused rendered objects:\n{text}"
        );
    }
}

impl Rendered {
    /// The object of `kind` named `name` (panics naming what there is).
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", self.names()))
    }

    /// `kind/name` of every object.
    pub fn names(&self) -> Vec<String> {
        self.objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    /// A ConfigMap's key.
    pub fn config_map_key(&self, name: &str, key: &str) -> String {
        self.get("ConfigMap", name)["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("ConfigMap {name} has no key {key}"))
            .to_string()
    }

    /// A Secret's key, decoded.
    pub fn secret_key(&self, name: &str, key: &str) -> Vec<u8> {
        let b64 = self.get("Secret", name)["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("Secret {name} has no key {key}"));
        b64decode(b64)
    }

    /// The rendered gateway TOML.
    pub fn gateway_toml(&self) -> String {
        self.config_map_key(&format!("{}-config", fullname()), "gateway.toml")
    }
}

/// `<release>-openshell-gateway`, the chart's object name prefix.
pub fn fullname() -> String {
    format!("{RELEASE}-openshell-gateway")
}

/// Standard base64 (padding optional); panics on other characters.
pub fn b64decode(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {s}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// One pod of a rendered workload, made concrete under a temporary root.
pub struct Pod {
    /// The root its absolute mount paths are rewritten to.
    pub root: tempfile::TempDir,
    /// The container's command and arguments, `$(VAR)` expanded and paths
    /// rewritten.
    pub argv: Vec<String>,
    /// The container's environment (resolved, paths rewritten).
    pub env: BTreeMap<String, String>,
}

/// Mount paths rewritten to the temporary root.
const ROOTED: [&str; 2] = ["/etc/openshell", "/var/lib/openshell"];

fn reroot(s: &str, root: &Path) -> String {
    let mut s = s.to_string();
    for p in ROOTED {
        s = s.replace(p, &format!("{}{p}", root.display()));
    }
    s
}

impl Pod {
    /// Pod `pod_name` of `workload` (a StatefulSet or Deployment of
    /// `rendered`), its first container; `pod_name` and `pod_ip` fill the
    /// downward API (the uid is `uid-<pod_name>`).
    pub fn new(rendered: &Rendered, workload: &Value, pod_name: &str, pod_ip: &str) -> Pod {
        let root = tempfile::tempdir().expect("tempdir");
        let spec = &workload["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let mount_path = mount["mountPath"].as_str().expect("mountPath");
            let dir = PathBuf::from(reroot(mount_path, root.path()));
            std::fs::create_dir_all(&dir).expect("mount dir");
            let volume = volumes
                .iter()
                .find(|v| v["name"] == mount["name"])
                .cloned()
                .unwrap_or(Value::Null);
            for source in volume["projected"]["sources"]
                .as_array()
                .into_iter()
                .flatten()
            {
                write_source(rendered, source, &dir, root.path());
            }
        }
        let mut env = BTreeMap::new();
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().expect("env name").to_string();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else if let Some(field) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                match field {
                    "metadata.name" => pod_name.to_string(),
                    "metadata.namespace" => NAMESPACE.to_string(),
                    "metadata.uid" => format!("uid-{pod_name}"),
                    "status.podIP" => pod_ip.to_string(),
                    other => panic!("fieldRef {other} not handled"),
                }
            } else if let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object() {
                rendered.config_map_key(
                    r["name"].as_str().expect("name"),
                    r["key"].as_str().expect("key"),
                )
            } else {
                panic!("env {e} not handled")
            };
            env.insert(name, reroot(&value, root.path()));
        }
        let mut argv: Vec<String> = Vec::new();
        for a in container["command"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(container["args"].as_array().into_iter().flatten())
        {
            let mut a = a.as_str().expect("arg").to_string();
            for (k, v) in &env {
                a = a.replace(&format!("$({k})"), v);
            }
            argv.push(reroot(&a, root.path()));
        }
        Pod { root, argv, env }
    }

    /// The path under the root of an absolute path in the pod.
    pub fn path(&self, in_pod: &str) -> PathBuf {
        PathBuf::from(reroot(in_pod, self.root.path()))
    }
}

/// Writes one projected-volume source (ConfigMap or Secret items, a
/// ServiceAccount token) under
/// `dir`; TOML files get their mount paths rewritten to `root`.
fn write_source(rendered: &Rendered, source: &Value, dir: &Path, root: &Path) {
    if let Some(path) = source["serviceAccountToken"]["path"].as_str() {
        // The kubelet's projected ServiceAccount token (a JWT); its content
        // only matters to the API server's TokenReview.
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(&path, "eyJhbGciOiJSUzI1NiJ9.e30.projected-token").expect("write token");
    }
    for (kind, obj) in [
        ("ConfigMap", &source["configMap"]),
        ("Secret", &source["secret"]),
    ] {
        let Some(name) = obj["name"].as_str() else {
            continue;
        };
        for item in obj["items"].as_array().into_iter().flatten() {
            let key = item["key"].as_str().expect("key");
            let path = dir.join(item["path"].as_str().expect("path"));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            let bytes = if kind == "Secret" {
                rendered.secret_key(name, key)
            } else {
                rendered.config_map_key(name, key).into_bytes()
            };
            let bytes = if key.ends_with(".toml") {
                reroot(&String::from_utf8(bytes).expect("utf-8"), root).into_bytes()
            } else {
                bytes
            };
            std::fs::write(&path, bytes).expect("write item");
        }
    }
}

/// A copy of the chart in which every `lookup "v1" KIND NS NAME` reads
/// `.Values.__lookup.KIND.NAME` instead of a cluster (and without
/// values.schema.json, which would refuse that key): renders of it with
/// [`lookup_values`] are upgrades over the objects given.
pub fn chart_with_fake_lookup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("openshell-gateway");
    copy_dir(&chart_dir(), &dest);
    std::fs::remove_file(dest.join("values.schema.json")).expect("remove schema");
    let templates = dest.join("templates");
    for entry in std::fs::read_dir(&templates).expect("templates") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("template");
        let rewritten: Vec<String> = text.lines().map(fake_lookup_line).collect();
        std::fs::write(&path, rewritten.join("\n") + "\n").expect("write template");
    }
    std::fs::write(
        templates.join("_fake_lookup.tpl"),
        "{{- define \"fake.lookup\" -}}\n{{- $root := index . 0 -}}\n\
         {{- toJson (dig (index . 1) (index . 2) (dict) $root.Values.__lookup) -}}\n{{- end -}}\n",
    )
    .expect("write fake lookup");
    dir
}

/// `{{- $x := lookup "v1" "Kind" NS NAME }}` ->
/// `{{- $x := include "fake.lookup" (list $ "Kind" NAME) | fromJson }}`.
fn fake_lookup_line(line: &str) -> String {
    let Some(start) = line.find("lookup \"v1\" \"") else {
        return line.to_string();
    };
    let rest = &line[start + "lookup \"v1\" ".len()..];
    let (kind, rest) = rest.split_once(' ').expect("kind");
    let (_namespace, rest) = rest.split_once(' ').expect("namespace");
    let (name, tail) = rest.rsplit_once(" }}").expect("lookup ends the action");
    format!(
        "{}include \"fake.lookup\" (list $ {kind} {name}) | fromJson }}}}{tail}",
        &line[..start]
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// `values` plus `__lookup`: the Secrets and ConfigMaps of `installed` (a
/// previous render) by kind and name, as the cluster would return them.
pub fn lookup_values(values: &Value, installed: &Rendered) -> Value {
    let mut state = json!({});
    for o in &installed.objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        if kind == "Secret" || kind == "ConfigMap" {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            state[kind][name] = o.clone();
        }
    }
    let mut values = values.clone();
    values["__lookup"] = state;
    values
}

impl Tools {
    /// Renders the chart at `chart` (e.g. [`chart_with_fake_lookup`]).
    pub fn render_chart(&self, chart: &Path, values: Value) -> Rendered {
        self.rendered(
            json!({"chart": chart, "values": values, "name": RELEASE, "namespace": NAMESPACE}),
        )
    }
}
