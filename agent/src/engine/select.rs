//! A ProbeSpec's selector, compiled once: whether it selects a process (and its container).
//! Every field given must match (AND).

use crate::discover::cri::Container;
use crate::discover::ProcInfo;
use gprobe_crds::glob::{Glob, GlobError};
use gprobe_crds::ProbeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// A standard Kubernetes label selector: matchLabels and matchExpressions (In, NotIn,
/// Exists, DoesNotExist), all ANDed. An empty selector matches everything.
pub fn labels_match(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &sel.match_labels {
        if ml.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let val = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        let ok = match e.operator.as_str() {
            "In" => val.is_some_and(|v| values.contains(v)),
            "NotIn" => val.is_none_or(|v| !values.contains(v)),
            "Exists" => val.is_some(),
            "DoesNotExist" => val.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// The spellings of one image reference that name the same image, so that a pattern
/// matches however the pod spec, the pattern or the runtime's repo tag spelled it: as given,
/// fully qualified (`nginx` -> `docker.io/library/nginx`, as containerd tags images) and
/// short as Docker shows it (`docker.io/library/nginx` -> `nginx`), each with and without
/// the implied `:latest` tag. An image id (`sha256:...`) has only itself.
fn reference_forms(image: &str) -> Vec<String> {
    let mut forms = vec![image.to_string()];
    if image.is_empty() || image.starts_with("sha256:") {
        return forms;
    }
    let (domain, path) = match image.split_once('/') {
        Some((d, p)) if d.contains(['.', ':']) || d == "localhost" => (d, p),
        _ => ("docker.io", image),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let (full, short) = if domain == "docker.io" {
        let repo = path.strip_prefix("library/").unwrap_or(path);
        if repo.contains('/') {
            (format!("docker.io/{repo}"), repo.to_string())
        } else {
            (format!("docker.io/library/{repo}"), repo.to_string())
        }
    } else {
        (image.to_string(), image.to_string())
    };
    for f in [full, short] {
        let last = f.rsplit('/').next().unwrap_or("");
        let other = if last.contains('@') {
            None
        } else if let Some(bare) = f.strip_suffix(":latest") {
            Some(bare.to_string())
        } else if !last.contains(':') {
            Some(format!("{f}:latest"))
        } else {
            None
        };
        for g in std::iter::once(f).chain(other) {
            if !forms.contains(&g) {
                forms.push(g);
            }
        }
    }
    forms
}

#[derive(Debug, Clone)]
enum ImagePattern {
    /// `sha256:...`: the image id or digest.
    Digest(String),
    Glob(Glob),
}

/// The compiled selector of one spec.
#[derive(Debug, Clone)]
pub struct Selector {
    /// Cluster mode: a spec selects only pods of its own namespace (namespace RBAC decides
    /// who may trace what). `None` in local mode.
    namespace: Option<String>,
    images: Vec<ImagePattern>,
    pods: Option<LabelSelector>,
    containers: Vec<Glob>,
    exe: Option<Glob>,
    exe_pattern: Option<String>,
}

impl Selector {
    /// Compiles `spec`'s selector; `namespace` is the spec's namespace in cluster mode.
    pub fn new(spec: &ProbeSpec, namespace: Option<String>) -> Result<Self, GlobError> {
        let sel = &spec.spec.selector;
        let images = sel
            .images
            .iter()
            .map(|p| {
                if p.starts_with("sha256:") {
                    Ok(ImagePattern::Digest(p.clone()))
                } else {
                    Glob::new(p).map(ImagePattern::Glob)
                }
            })
            .collect::<Result<_, _>>()?;
        let containers = sel
            .container_names
            .iter()
            .map(|c| Glob::new(c))
            .collect::<Result<_, _>>()?;
        let exe = sel.executable.as_deref().map(Glob::new).transpose()?;
        Ok(Self {
            namespace,
            images,
            pods: sel.pod_selector.clone(),
            containers,
            exe,
            exe_pattern: sel.executable.clone(),
        })
    }

    /// True when only containers can match (images, pod labels or container names given):
    /// such a spec selects nothing where no container runtime is seen.
    pub fn needs_container(&self) -> bool {
        !self.images.is_empty() || self.pods.is_some() || !self.containers.is_empty()
    }

    pub fn executable_pattern(&self) -> Option<&str> {
        self.exe_pattern.as_deref()
    }

    /// The executable glob's last component when it is literal (`**/http-client` ->
    /// `http-client`): processes of that name are worth holding at exec.
    pub fn literal_exe_name(&self) -> Option<&str> {
        let p = self.exe_pattern.as_deref()?;
        let name = p.rsplit('/').next()?;
        let literal = !name.is_empty() && !name.contains(['*', '?', '[', ']']);
        literal.then_some(name)
    }

    /// The executable glob itself when it has no metacharacters at all (an exact path).
    pub fn exact_exe_path(&self) -> Option<&str> {
        let p = self.exe_pattern.as_deref()?;
        (!p.contains(['*', '?', '[', ']'])).then_some(p)
    }

    fn container_matches(&self, c: &Container) -> bool {
        if self
            .namespace
            .as_deref()
            .is_some_and(|ns| c.pod_namespace != ns)
        {
            return false;
        }
        if !self.images.is_empty()
            && !self.images.iter().any(|p| match p {
                ImagePattern::Digest(d) => c.image_id.ends_with(d.as_str()) || c.image == *d,
                ImagePattern::Glob(g) => reference_forms(&c.image).iter().any(|r| g.matches(r)),
            })
        {
            return false;
        }
        if let Some(ls) = &self.pods {
            if !labels_match(ls, &c.pod_labels) {
                return false;
            }
        }
        if !self.containers.is_empty() && !self.containers.iter().any(|g| g.matches(&c.name)) {
            return false;
        }
        true
    }

    /// Whether the selector selects `p` (in `container`, if it runs in one the runtime
    /// reported). The executable glob matches the file's path or the path the process was
    /// started with (a symlink such as /usr/bin/redis-server -> redis-check-rdb).
    pub fn selects(&self, p: &ProcInfo, container: Option<&Container>) -> bool {
        match container {
            Some(c) if !self.container_matches(c) => return false,
            Some(_) => {}
            // Cluster mode selects processes of known containers only.
            None if self.namespace.is_some() || self.needs_container() => return false,
            None => {}
        }
        match &self.exe {
            None => true,
            Some(g) => {
                g.matches(&p.exe.to_string_lossy())
                    || p.exec_path
                        .as_ref()
                        .is_some_and(|e| g.matches(&e.to_string_lossy()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::FileKey;
    use gprobe_crds::load_specs;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use std::path::PathBuf;

    fn container(ns: &str, image: &str, labels: &[(&str, &str)], name: &str) -> Container {
        Container {
            id: "c".repeat(64),
            name: name.into(),
            image: image.into(),
            image_id: "sha256:abcdef".into(),
            pod_name: "p".into(),
            pod_namespace: ns.into(),
            pod_uid: "u".into(),
            pod_labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pid: 1,
        }
    }

    fn spec(sel: &str) -> ProbeSpec {
        let text = format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: s, namespace: \
            shop}}\nspec:\n  selector: {sel}\n  probes: [{{symbol: main.f}}]\n"
        );
        load_specs(&text, "t").unwrap().remove(0)
    }

    fn proc(exe: &str, exec_path: Option<&str>) -> ProcInfo {
        ProcInfo {
            pid: 7,
            exe: exe.into(),
            exec_path: exec_path.map(PathBuf::from),
            exe_link: "/proc/7/exe".into(),
            key: FileKey { dev: 1, ino: 2 },
            exe_ino: 2,
            comm: "x".into(),
            container_id: None,
            start_time: 1,
            libraries: Vec::new(),
        }
    }

    fn cluster(s: &ProbeSpec) -> Selector {
        Selector::new(s, Some("shop".into())).unwrap()
    }

    #[test]
    fn all_given_fields_must_match_and_only_in_the_specs_namespace() {
        let s = cluster(&spec(
            r#"{images: ["registry.example/shop/*:v1.*"], podSelector: {matchLabels: {app: shop}},
                containerNames: [app]}"#,
        ));
        let p = proc("/app/shop", None);
        let good = container(
            "shop",
            "registry.example/shop/cart:v1.2",
            &[("app", "shop")],
            "app",
        );
        assert!(s.selects(&p, Some(&good)));
        for bad in [
            container(
                "other",
                "registry.example/shop/cart:v1.2",
                &[("app", "shop")],
                "app",
            ),
            container(
                "shop",
                "registry.example/shop/cart:v2.0",
                &[("app", "shop")],
                "app",
            ),
            container(
                "shop",
                "registry.example/shop/cart:v1.2",
                &[("app", "web")],
                "app",
            ),
            container(
                "shop",
                "registry.example/shop/cart:v1.2",
                &[("app", "shop")],
                "sidecar",
            ),
        ] {
            assert!(!s.selects(&p, Some(&bad)), "{bad:?}");
        }
        assert!(
            !s.selects(&p, None),
            "cluster mode: host processes are not selected"
        );
        let by_digest = cluster(&spec(r#"{images: ["sha256:abcdef"]}"#));
        assert!(by_digest.selects(&p, Some(&good)));
    }

    #[test]
    fn image_references_have_their_docker_spellings() {
        assert_eq!(
            reference_forms("http-client:dev"),
            ["http-client:dev", "docker.io/library/http-client:dev"]
        );
        assert_eq!(
            reference_forms("docker.io/library/http-client:dev"),
            ["docker.io/library/http-client:dev", "http-client:dev"]
        );
        assert_eq!(
            reference_forms("docker.io/library/nginx:latest"),
            [
                "docker.io/library/nginx:latest",
                "docker.io/library/nginx",
                "nginx:latest",
                "nginx"
            ]
        );
        assert_eq!(
            reference_forms("bitnami/redis"),
            [
                "bitnami/redis",
                "docker.io/bitnami/redis",
                "docker.io/bitnami/redis:latest",
                "bitnami/redis:latest"
            ]
        );
        for only in [
            "registry.test/shop/http-client:v1.2",
            "localhost:5000/x:v1",
            "r.example/x@sha256:abc",
            "sha256:abcdef",
            "",
        ] {
            assert_eq!(reference_forms(only), [only], "{only}");
        }
    }

    #[test]
    fn image_patterns_match_the_runtime_tag_and_the_pod_spec_spelling_alike() {
        let p = proc("/app/http-client", None);
        for pattern in [
            "http-client:dev",
            "docker.io/library/http-client:dev",
            "*:dev",
            "**/http-client:*",
        ] {
            let s = cluster(&spec(&format!("{{images: [{pattern:?}]}}")));
            for image in ["http-client:dev", "docker.io/library/http-client:dev"] {
                let c = container("shop", image, &[("app", "shop")], "app");
                assert!(s.selects(&p, Some(&c)), "{pattern} / {image}");
            }
        }
        let latest = cluster(&spec(r#"{images: ["nginx"]}"#));
        let c = container("shop", "docker.io/library/nginx:latest", &[], "app");
        assert!(latest.selects(&p, Some(&c)));
        let other = cluster(&spec(r#"{images: ["http-client:v2"]}"#));
        let c = container("shop", "docker.io/library/http-client:dev", &[], "app");
        assert!(!other.selects(&p, Some(&c)));
        // An image the runtime knows no name for: only its id selects it.
        let id = container("shop", "sha256:abcdef", &[], "app");
        assert!(!cluster(&spec(r#"{images: ["**/http-client:*"]}"#)).selects(&p, Some(&id)));
        assert!(cluster(&spec(r#"{images: ["sha256:abcdef"]}"#)).selects(&p, Some(&id)));
    }

    #[test]
    fn match_expressions() {
        let labels: BTreeMap<String, String> = [
            ("app".to_string(), "shop".to_string()),
            ("tier".to_string(), "web".to_string()),
        ]
        .into();
        let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let sel = |exprs| LabelSelector {
            match_expressions: Some(exprs),
            match_labels: None,
        };
        assert!(labels_match(
            &sel(vec![req("app", "In", &["shop", "cart"])]),
            &labels
        ));
        assert!(!labels_match(
            &sel(vec![req("app", "NotIn", &["shop"])]),
            &labels
        ));
        assert!(labels_match(
            &sel(vec![req("tier", "Exists", &[])]),
            &labels
        ));
        assert!(labels_match(
            &sel(vec![req("canary", "DoesNotExist", &[])]),
            &labels
        ));
        assert!(!labels_match(
            &sel(vec![req("tier", "Frobs", &[])]),
            &labels
        ));
        assert!(labels_match(&LabelSelector::default(), &labels));
    }

    #[test]
    fn executable_globs_match_the_file_or_the_path_it_was_started_with() {
        let s = spec(r#"{executable: "/usr/bin/redis-server"}"#);
        let local = Selector::new(&s, None).unwrap();
        // /usr/bin/redis-server is a symlink to redis-check-rdb.
        assert!(local.selects(
            &proc("/usr/bin/redis-check-rdb", Some("/usr/bin/redis-server")),
            None
        ));
        assert!(!local.selects(&proc("/usr/bin/redis-check-rdb", None), None));
        assert!(local.selects(&proc("/usr/bin/redis-server", None), None));
        assert_eq!(local.literal_exe_name(), Some("redis-server"));
        assert_eq!(local.exact_exe_path(), Some("/usr/bin/redis-server"));

        let glob = Selector::new(&spec(r#"{executable: "/app/*"}"#), None).unwrap();
        assert!(glob.selects(&proc("/app/shop", None), None));
        assert!(!glob.selects(&proc("/usr/bin/sh", None), None));
        assert_eq!(glob.literal_exe_name(), None);
        let deep = Selector::new(&spec(r#"{executable: "**/http-client"}"#), None).unwrap();
        assert_eq!(deep.literal_exe_name(), Some("http-client"));
        assert_eq!(deep.exact_exe_path(), None);
    }

    #[test]
    fn container_selectors_select_nothing_without_containers() {
        let s = Selector::new(&spec(r#"{images: ["x/*"], executable: "/app/*"}"#), None).unwrap();
        assert!(s.needs_container());
        assert!(!s.selects(&proc("/app/shop", None), None));
    }
}
