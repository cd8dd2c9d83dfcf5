//! Images without a registry: a one-layer OCI archive holding one static binary, written
//! here and imported with `ctr`.

use super::Containerd;
use k8s_cri::v1::{ImageSpec, ImageStatusRequest};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

impl Containerd {
    /// Builds a one-layer OCI image holding `binary` at `/app/<file name>` (and an empty
    /// `/tmp`), entrypoint `/app/<file name>`, tagged `reference`; imports it into the
    /// `k8s.io` namespace and waits until the CRI sees it.
    pub fn import_image(&self, reference: &str, binary: &Path) -> Result<(), String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = binary
            .file_name()
            .ok_or_else(|| format!("{} has no file name", binary.display()))?
            .to_string_lossy()
            .into_owned();
        let slug: String = reference
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let work = self
            .dir
            .join("images")
            .join(format!("{slug}-{}", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
        let tar = write_oci_archive(&work, reference, binary, &name)?;
        let out = Command::new("ctr")
            .arg("-n")
            .arg("k8s.io")
            .arg("-a")
            .arg(&self.socket)
            .args(["image", "import", "--snapshotter", self.snapshotter])
            .arg(&tar)
            .output()
            .map_err(|e| format!("run ctr: {e}"))?;
        let _ = std::fs::remove_dir_all(&work);
        if !out.status.success() {
            return Err(format!(
                "ctr image import {reference} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The CRI learns about imported images from containerd's events: wait for it.
        let t0 = Instant::now();
        loop {
            let mut client = self.image_client()?;
            let image = reference.to_string();
            let found = self.run(async move {
                let r = client
                    .image_status(ImageStatusRequest {
                        image: Some(ImageSpec {
                            image,
                            ..Default::default()
                        }),
                        verbose: false,
                    })
                    .await
                    .map_err(|s| format!("ImageStatus: {s}"))?;
                Ok(r.into_inner().image.is_some())
            })?;
            if found {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(format!(
                    "imported {reference}, but the CRI does not see it after 15s"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Containerd {
    /// The id (`sha256:...`) the runtime gives the image `reference`: what the kubelet puts
    /// in a container's ImageSpec.image.
    pub fn image_id(&self, reference: &str) -> Result<String, String> {
        let mut client = self.image_client()?;
        let image = reference.to_string();
        let id = self.run(async move {
            let r = client
                .image_status(ImageStatusRequest {
                    image: Some(ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    verbose: false,
                })
                .await
                .map_err(|s| format!("ImageStatus: {s}"))?;
            Ok(r.into_inner().image.map(|i| i.id).unwrap_or_default())
        })?;
        if id.is_empty() {
            return Err(format!("the runtime does not know image {reference}"));
        }
        Ok(id)
    }
}

fn sha256_file(path: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("run sha256sum: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or("");
    if !out.status.success() || hex.len() != 64 {
        return Err(format!(
            "sha256sum {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(hex.to_string())
}

/// A blob written to `work`: its file, sha256 hex and size.
struct Blob {
    path: PathBuf,
    hex: String,
    size: u64,
}

fn blob_from_bytes(work: &Path, name: &str, data: &[u8]) -> Result<Blob, String> {
    let path = work.join(name);
    std::fs::write(&path, data).map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(Blob {
        hex: sha256_file(&path)?,
        size: data.len() as u64,
        path,
    })
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The tag of `reference` (`latest` when it has none).
fn tag_of(reference: &str) -> &str {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    match last.rsplit_once(':') {
        Some((_, tag)) if !last.contains('@') => tag,
        _ => "latest",
    }
}

/// Writes `<work>/image.tar`, an OCI layout archive of one image, and returns its path.
fn write_oci_archive(
    work: &Path,
    reference: &str,
    binary: &Path,
    name: &str,
) -> Result<PathBuf, String> {
    let err = |what: &str, e: std::io::Error| format!("{what}: {e}");
    // The layer: /app/<name>, /tmp.
    let layer_path = work.join("layer.tar");
    {
        let mut t = TarWriter::new(BufWriter::new(
            File::create(&layer_path).map_err(|e| err("layer.tar", e))?,
        ));
        t.dir("app/", 0o755).map_err(|e| err("layer.tar", e))?;
        t.file_from(&format!("app/{name}"), 0o755, binary)
            .map_err(|e| err(&format!("add {} to layer", binary.display()), e))?;
        t.dir("tmp/", 0o1777).map_err(|e| err("layer.tar", e))?;
        t.finish().map_err(|e| err("layer.tar", e))?;
    }
    let layer = Blob {
        hex: sha256_file(&layer_path)?,
        size: std::fs::metadata(&layer_path)
            .map_err(|e| err("layer.tar", e))?
            .len(),
        path: layer_path,
    };
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": [format!("/app/{name}")],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", layer.hex)]},
        "history": [{"created_by": "gprobe e2e cri_support", "comment": format!("/app/{name}")}],
    });
    let config = blob_from_bytes(work, "config.json", config.to_string().as_bytes())?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", config.hex),
            "size": config.size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{}", layer.hex),
            "size": layer.size,
        }],
    });
    let manifest = blob_from_bytes(work, "manifest.json", manifest.to_string().as_bytes())?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", manifest.hex),
            "size": manifest.size,
            "platform": {"architecture": oci_arch(), "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag_of(reference),
            },
        }],
    })
    .to_string();
    let tar_path = work.join("image.tar");
    let mut t = TarWriter::new(BufWriter::new(
        File::create(&tar_path).map_err(|e| err("image.tar", e))?,
    ));
    let w = (|| -> std::io::Result<()> {
        t.file_bytes("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        t.file_bytes("index.json", 0o644, index.as_bytes())?;
        t.dir("blobs/", 0o755)?;
        t.dir("blobs/sha256/", 0o755)?;
        for b in [&layer, &config, &manifest] {
            t.file_from(&format!("blobs/sha256/{}", b.hex), 0o644, &b.path)?;
        }
        t.finish()
    })();
    w.map_err(|e| err("image.tar", e))?;
    Ok(tar_path)
}

/// The little of ustar that images need: regular files and directories, owned by root.
struct TarWriter<W: Write> {
    w: W,
}

impl<W: Write> TarWriter<W> {
    fn new(w: W) -> Self {
        TarWriter { w }
    }

    fn header(&mut self, name: &str, mode: u32, size: u64, kind: u8) -> std::io::Result<()> {
        if name.len() > 99 {
            return Err(std::io::Error::other(format!(
                "tar entry name too long: {name}"
            )));
        }
        let mut h = [0u8; 512];
        fn put(h: &mut [u8; 512], at: usize, s: &[u8]) {
            h[at..at + s.len()].copy_from_slice(s);
        }
        put(&mut h, 0, name.as_bytes());
        put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
        put(&mut h, 108, b"0000000\0");
        put(&mut h, 116, b"0000000\0");
        put(&mut h, 124, format!("{size:011o}\0").as_bytes());
        put(&mut h, 136, b"00000000000\0");
        put(&mut h, 148, b"        ");
        h[156] = kind;
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        put(&mut h, 265, b"root");
        put(&mut h, 297, b"root");
        put(&mut h, 329, b"0000000\0");
        put(&mut h, 337, b"0000000\0");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.w.write_all(&h)
    }

    fn pad(&mut self, size: u64) -> std::io::Result<()> {
        let rem = (size % 512) as usize;
        if rem != 0 {
            self.w.write_all(&[0u8; 512][..512 - rem])?;
        }
        Ok(())
    }

    fn dir(&mut self, name: &str, mode: u32) -> std::io::Result<()> {
        self.header(name, mode, 0, b'5')
    }

    fn file_bytes(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        self.header(name, mode, data.len() as u64, b'0')?;
        self.w.write_all(data)?;
        self.pad(data.len() as u64)
    }

    fn file_from(&mut self, name: &str, mode: u32, path: &Path) -> std::io::Result<()> {
        let mut f = File::open(path)?;
        let size = f.metadata()?.len();
        self.header(name, mode, size, b'0')?;
        let copied = std::io::copy(&mut (&mut f).take(size), &mut self.w)?;
        if copied != size {
            return Err(std::io::Error::other(format!(
                "{} shrank while archiving",
                path.display()
            )));
        }
        self.pad(size)
    }

    fn finish(mut self) -> std::io::Result<()> {
        self.w.write_all(&[0u8; 1024])?;
        self.w.flush()
    }
}
