use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;

use crate::{Error, Result};

/// Environment variable naming the kubeconfig of an already running control plane (for example
/// `.cluster/kubeconfig` after `make light-cluster-up`, or the one `make test` starts for the whole run).
/// When it is set, no control plane is started.
pub const KUBECONFIG_ENV: &str = "LEADERGROUP_KUBECONFIG";

/// Environment variable naming the kubeconfig of the real cluster (kubelets, containerd,
/// kube-proxy: `controlplane/realcluster.sh`) the end-to-end tests run on. `make e2e` starts that
/// cluster and sets it; the end-to-end tests fail without it (see [`e2e_cluster`]).
pub const E2E_KUBECONFIG_ENV: &str = "LEADERGROUP_E2E_KUBECONFIG";

/// Environment variable naming the bin folder of the control plane the tests run against, in
/// place of `controlplane/build.sh`'s: `make it-oldest` points it at `controlplane/build-oldest.sh`'s,
/// so that the clusters a test starts for itself run the oldest supported kube-apiserver too.
pub const BIN_DIR_ENV: &str = "LEADERGROUP_BIN_DIR";

/// Exit status of `build.sh` under `LEADERGROUP_NO_BUILD=1` when a binary is missing.
const NOT_BUILT: i32 = 3;

/// The control plane the tests of this process talk to.
///
/// It holds paths and a client configuration only, never a [`kube::Client`]: libtest gives every
/// `#[tokio::test]` its own runtime, and a client is bound to the runtime it was built on, so a
/// shared one would die with the first test. [`ControlPlane::client`] builds a fresh one per call
/// (cheap: no connection is opened until the first request).
#[derive(Debug)]
pub struct ControlPlane {
    kubeconfig_path: PathBuf,
    bin_dir: PathBuf,
    config: kube::Config,
    server: String,
    ca_data: String,
    /// The cluster folder when this process started the control plane (stopped by its watchdog
    /// when the process exits); `None` when attached through [`KUBECONFIG_ENV`].
    owned_dir: Option<PathBuf>,
}

static CONTROL_PLANE: OnceCell<ControlPlane> = OnceCell::const_new();
static E2E_CLUSTER: OnceCell<ControlPlane> = OnceCell::const_new();

/// The real cluster of the end-to-end tests: the one [`E2E_KUBECONFIG_ENV`] names. Never started
/// here (it needs root, builds images and takes its own teardown): without the variable this
/// fails with [`Error::E2eClusterMissing`], which says to run `make e2e`.
pub async fn e2e_cluster() -> Result<&'static ControlPlane> {
    E2E_CLUSTER
        .get_or_try_init(|| async {
            let path = std::env::var_os(E2E_KUBECONFIG_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| Error::E2eClusterMissing {
                    detail: format!("{E2E_KUBECONFIG_ENV} is not set"),
                })?;
            if !path.is_file() {
                return Err(Error::E2eClusterMissing {
                    detail: format!("{E2E_KUBECONFIG_ENV}={} does not exist", path.display()),
                });
            }
            let bin_dir = bin_dir(&repo_root(), &[]).await?;
            ControlPlane::load(path, bin_dir, None).await
        })
        .await
}

/// A cluster that something else started (the benchmark's own real cluster, for one): the
/// kubeconfig at `kubeconfig`, with the pinned tools of `controlplane/build.sh` (never built here).
/// Owned by the caller, not shared like [`e2e_cluster`]; never stopped here.
pub async fn attach(kubeconfig: PathBuf) -> Result<ControlPlane> {
    let bin_dir = bin_dir(&repo_root(), &[]).await?;
    ControlPlane::load(kubeconfig, bin_dir, None).await
}

/// The control plane of this test process: the one [`KUBECONFIG_ENV`] names, or else one started
/// on first use in `<target>/testenv/<pid>` by `controlplane/cluster.sh` (about 4 s), which a
/// watchdog stops when this process exits, however it exits.
///
/// It never builds the binaries: a first build takes about 14 minutes with no output, which a test
/// harness would show as a hang (and parallel test binaries would race to build). Instead it fails
/// with [`Error::BinariesMissing`], which says to run `make controlplane`.
pub async fn control_plane() -> Result<&'static ControlPlane> {
    CONTROL_PLANE
        .get_or_try_init(ControlPlane::start_or_attach)
        .await
}

impl ControlPlane {
    async fn start_or_attach() -> Result<ControlPlane> {
        let repo = repo_root();
        let bin_dir = bin_dir(&repo, &[]).await?;
        let (kubeconfig_path, owned_dir) = match std::env::var_os(KUBECONFIG_ENV) {
            Some(path) if !path.is_empty() => {
                let path = PathBuf::from(path);
                if !path.is_file() {
                    return Err(Error::Unexpected(format!(
                        "{KUBECONFIG_ENV}={} does not exist; start a cluster with `make light-cluster-up` or unset it",
                        path.display()
                    )));
                }
                (path, None)
            }
            _ => {
                let dir = target_dir(&repo)
                    .join("testenv")
                    .join(std::process::id().to_string());
                start_cluster(&repo, &dir, &bin_dir).await?;
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        Self::load(kubeconfig_path, bin_dir, owned_dir).await
    }

    pub(crate) async fn load(
        kubeconfig_path: PathBuf,
        bin_dir: PathBuf,
        owned_dir: Option<PathBuf>,
    ) -> Result<ControlPlane> {
        let kc_err = |source| Error::Kubeconfig {
            path: kubeconfig_path.clone(),
            source,
        };
        let kubeconfig = Kubeconfig::read_from(&kubeconfig_path).map_err(kc_err)?;
        // Kept for kubeconfigs with a token (see `token_kubeconfig`): the server and its CA of
        // the current context.
        let context_cluster = kubeconfig
            .current_context
            .as_ref()
            .and_then(|name| kubeconfig.contexts.iter().find(|c| &c.name == name))
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone());
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| context_cluster.as_ref().is_none_or(|name| &c.name == name))
            .and_then(|c| c.cluster.clone())
            .ok_or_else(|| {
                Error::Unexpected(format!(
                    "{}: no cluster for the current context",
                    kubeconfig_path.display()
                ))
            })?;
        let server = cluster.server.clone().unwrap_or_default();
        let ca_data = cluster
            .certificate_authority_data
            .clone()
            .unwrap_or_default();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(kc_err)?;
        Ok(ControlPlane {
            kubeconfig_path,
            bin_dir,
            config,
            server,
            ca_data,
            owned_dir,
        })
    }

    /// The folder holding the kubeconfig: for the real cluster, its folder (`realcluster.sh
    /// --dir`), with the nodes' `node<N>/containerd.sock`.
    pub fn dir(&self) -> &Path {
        self.kubeconfig_path.parent().unwrap_or(Path::new("."))
    }

    /// The cluster CA's certificate, base64-encoded PEM (a webhook's `caBundle`).
    pub fn ca_data(&self) -> &str {
        &self.ca_data
    }

    /// The admin kubeconfig (user `admin` in group `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The folder holding the pinned `etcd`, `kube-apiserver`, `kubectl` and `helm`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster folder (logs: `kube-apiserver.log`, `etcd.log`) when this process started the
    /// control plane; `None` when attached through [`KUBECONFIG_ENV`].
    pub fn cluster_dir(&self) -> Option<&Path> {
        self.owned_dir.as_deref()
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// A new admin client, bound to the calling runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.config.clone()).map_err(Error::kube("building an admin client"))
    }

    /// A new client that authenticates with a bearer token only (for example a ServiceAccount
    /// token from [`crate::TestNamespace::service_account_token`]), so RBAC applies to it.
    pub async fn client_with_token(&self, token: &str) -> Result<kube::Client> {
        self.client_with_token_via(token, None).await
    }

    /// [`ControlPlane::client_with_token`], talking to `server` instead when given (a
    /// [`crate::Proxy`] in front of the API server: the certificate covers 127.0.0.1).
    pub async fn client_with_token_via(
        &self,
        token: &str,
        server: Option<std::net::SocketAddr>,
    ) -> Result<kube::Client> {
        let mut config = self.config_via(server)?;
        // Through serde because AuthInfo keeps the token as a secrecy::SecretString; this avoids
        // depending on the exact secrecy version kube uses. Replacing the whole AuthInfo drops the
        // admin client certificate.
        config.auth_info =
            serde_json::from_value::<AuthInfo>(serde_json::json!({ "token": token }))
                .map_err(|e| Error::Unexpected(format!("building a token AuthInfo: {e}")))?;
        kube::Client::try_from(config).map_err(Error::kube("building a token client"))
    }

    /// [`ControlPlane::client`], talking to `server` (a [`crate::Proxy`] in front of the API
    /// server) instead.
    pub async fn client_via(&self, server: std::net::SocketAddr) -> Result<kube::Client> {
        kube::Client::try_from(self.config_via(Some(server))?)
            .map_err(Error::kube("building an admin client through a proxy"))
    }

    /// The admin client's configuration, talking to `server` instead when given (the
    /// certificate covers 127.0.0.1).
    fn config_via(&self, server: Option<std::net::SocketAddr>) -> Result<kube::Config> {
        let mut config = self.config.clone();
        if let Some(server) = server {
            config.cluster_url = format!("https://{server}")
                .parse()
                .map_err(|e| Error::Unexpected(format!("the proxy's URL https://{server}: {e}")))?;
        }
        Ok(config)
    }

    /// A new client that impersonates user `user` (in no group but `system:authenticated`): the
    /// admin certificate authenticates, then RBAC and admission see only `user`, as for a
    /// person's own credentials (`kubectl --as=user`).
    pub async fn client_as(&self, user: &str) -> Result<kube::Client> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        kube::Client::try_from(config).map_err(Error::kube(format!("building a client as {user}")))
    }

    /// A new client that sends no credentials at all (an anonymous request).
    pub async fn anonymous_client(&self) -> Result<kube::Client> {
        let mut config = self.config.clone();
        config.auth_info = AuthInfo::default();
        kube::Client::try_from(config).map_err(Error::kube("building an anonymous client"))
    }

    /// The admin kubeconfig with the server replaced by `via` (a [`crate::Proxy`] in front of the
    /// API server: the certificate covers 127.0.0.1), written beside the admin one; its path, for
    /// a process such as the operator binary.
    pub fn kubeconfig_via(&self, via: std::net::SocketAddr) -> Result<PathBuf> {
        let admin = std::fs::read_to_string(&self.kubeconfig_path).map_err(Error::io(format!(
            "reading {}",
            self.kubeconfig_path.display()
        )))?;
        let path = self
            .kubeconfig_path
            .with_file_name(format!("via-{}.kubeconfig", via.port()));
        let server = self.server.trim_start_matches("https://");
        std::fs::write(&path, admin.replace(server, &via.to_string()))
            .map_err(Error::io(format!("writing {}", path.display())))?;
        Ok(path)
    }

    /// A kubeconfig (YAML text) for this server that authenticates with `token`: what a process
    /// such as the operator binary gets with `--kubeconfig` to run as a ServiceAccount.
    pub fn token_kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: token\n  user:\n    token: {token}\ncontexts:\n- name: testenv\n  context: {{cluster: testenv, user: token}}\n\
             current-context: testenv\n",
            server = self.server,
            ca = self.ca_data,
        )
    }

    /// `kubectl` of the pinned version with `KUBECONFIG` set to the admin kubeconfig.
    /// For async code: `tokio::process::Command::from(cp.kubectl())`.
    pub fn kubectl(&self) -> std::process::Command {
        self.tool("kubectl")
    }

    /// `helm` of the pinned version with `KUBECONFIG` set to the admin kubeconfig.
    pub fn helm(&self) -> std::process::Command {
        self.tool("helm")
    }

    /// The pinned tool `name` (kubectl, helm) with `KUBECONFIG` set to the admin kubeconfig.
    pub fn tool(&self, name: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new(self.bin_dir.join(name));
        cmd.env("KUBECONFIG", &self.kubeconfig_path);
        cmd
    }
}

/// The repository: this crate lives in `<repo>/testenv`.
pub(crate) fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(1)
        .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set, else the ancestor of the test binary that
/// holds `CACHEDIR.TAG` (cargo writes it at the target root, but only when it creates that
/// folder: not when a script made it first), else the folder above the binary's profile
/// (`<target>/<profile>/deps/<binary>`), else `<repo>/target`.
pub(crate) fn target_dir(repo: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().ok();
    let tagged = exe.as_deref().and_then(|exe| {
        exe.ancestors()
            .find(|d| d.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
    });
    let above_profile = || {
        exe.as_deref()?
            .ancestors()
            .find(|d| d.file_name().is_some_and(|n| n == "deps"))
            .and_then(|deps| deps.ancestors().nth(2))
            .map(Path::to_path_buf)
    };
    tagged
        .or_else(above_profile)
        .unwrap_or_else(|| repo.join("target"))
}

/// `cluster.sh up` in `dir`, stopped by its watchdog when this process exits.
pub(crate) async fn start_cluster(repo: &Path, dir: &Path, bin_dir: &Path) -> Result<()> {
    let started = Instant::now();
    let script = repo.join("controlplane/cluster.sh");
    let mut cmd = tokio::process::Command::new(&script);
    cmd.arg("up")
        .arg("--dir")
        .arg(dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .arg("--bin-dir")
        .arg(bin_dir);
    run(
        cmd,
        &format!("{} up --dir {}", script.display(), dir.display()),
    )
    .await?;
    eprintln!(
        "testenv: control plane started in {:.1} s in {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    Ok(())
}

/// The bin folder [`BIN_DIR_ENV`] names, or else asks `build.sh` for the cached one without
/// letting it build. `env`: extra variables for build.sh (tests point `LEADERGROUP_CACHE` at an
/// empty folder).
pub(crate) async fn bin_dir(repo: &Path, env: &[(&str, &Path)]) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let script = repo.join("controlplane/build.sh");
    let output = tokio::process::Command::new(&script)
        .env("LEADERGROUP_NO_BUILD", "1")
        .envs(env.iter().copied())
        .output()
        .await
        .map_err(Error::io(format!("running {}", script.display())))?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if output.status.code() == Some(NOT_BUILT) {
        return Err(Error::BinariesMissing { detail: stderr });
    }
    if !output.status.success() {
        return Err(Error::Command {
            command: format!("LEADERGROUP_NO_BUILD=1 {}", script.display()),
            status: output.status.to_string(),
            output: stderr,
        });
    }
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok(PathBuf::from(dir))
}

pub(crate) async fn run(mut cmd: tokio::process::Command, shown: &str) -> Result<()> {
    let output = cmd
        .output()
        .await
        .map_err(Error::io(format!("running {shown}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command: shown.to_owned(),
        status: output.status.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn missing_binaries_say_run_make_controlplane() {
        let empty =
            std::env::temp_dir().join(format!("testenv-empty-cache-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let err = bin_dir(&repo_root(), &[("LEADERGROUP_CACHE", &empty)])
            .await
            .unwrap_err();
        std::fs::remove_dir_all(&empty).unwrap();
        assert!(matches!(err, Error::BinariesMissing { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("run `make controlplane`"), "{text}");
        assert!(text.contains("etcd is not built yet"), "{text}");
    }

    #[test]
    fn target_dir_is_the_cargo_target_root() {
        let dir = target_dir(&repo_root());
        let exe = std::env::current_exe().unwrap();
        // This test binary is `<target>/<profile>/deps/<name>`.
        assert_eq!(
            exe.ancestors().nth(3),
            Some(dir.as_path()),
            "{}",
            exe.display()
        );
    }
}
