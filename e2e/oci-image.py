#!/usr/bin/env python3
"""Writes the operator's OCI image layout without a container engine.

    e2e/oci-image.py OUT_DIR VERSION REVISION EPOCH SOURCE ARCH=BINARY...

OUT_DIR becomes an OCI image layout (oci-layout, index.json, blobs/sha256/)
holding one image per ARCH (amd64, arm64), each FROM scratch: a single layer
with the static BINARY at /releaseplan (mode 0755, owner 0), run as user
65532:65532 with Entrypoint ["/releaseplan"]. The images are gathered in one
multi-arch image index, tagged VERSION (the org.opencontainers.image.ref.name
of index.json's only entry), so that
`skopeo copy --all oci:OUT_DIR:VERSION docker://...` pushes all of them.

There is no base image, hence no base digest to pin: the binary is static
(musl) and needs one other file, the system's CA bundle at
/etc/ssl/certs/ca-certificates.crt, copied from the building machine
(Debian's ca-certificates; CA_BUNDLE overrides the path): gates calling
HTTPS endpoints with public certificates verify them against it (the API
server is reached with the ServiceAccount's token and CA, mounted by
Kubernetes).

Reproducible: the same binaries and arguments give the same bytes. Tar
entries carry mtime EPOCH (SOURCE_DATE_EPOCH, the commit's time), owner 0
and no user or group names; gzip streams have no name and mtime 0; JSON is
written with sorted keys; `created` is EPOCH in RFC 3339. Standard library
only, so that it runs on a fresh machine's python3.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ARCHES = {"amd64": "amd64", "arm64": "arm64"}


def canonical(obj):
    """JSON bytes that depend only on the value (sorted keys, no spaces)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class Layout:
    """An OCI image layout directory being written: blobs by digest."""

    def __init__(self, root):
        self.root = root
        self.blobs = os.path.join(root, "blobs", "sha256")
        os.makedirs(self.blobs)

    def blob(self, data, media_type, **extra):
        """Stores DATA as a blob; returns its descriptor."""
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.blobs, digest), "wb") as f:
            f.write(data)
        desc = {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}
        desc.update(extra)
        return desc


def entry(name, mode, epoch, kind=tarfile.REGTYPE, size=0):
    """A tar header with normalised metadata: mtime EPOCH, owner 0, no names."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def layer_tar(binary, ca_bundle, epoch):
    """The uncompressed layer: the CA bundle and /releaseplan, normalised metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ["etc", "etc/ssl", "etc/ssl/certs"]:
            tar.addfile(entry(d, 0o755, epoch, tarfile.DIRTYPE))
        for name, path, mode in [
            ("etc/ssl/certs/ca-certificates.crt", ca_bundle, 0o644),
            ("releaseplan", binary, 0o755),
        ]:
            with open(path, "rb") as f:
                tar.addfile(entry(name, mode, epoch, size=os.path.getsize(path)), f)
    return buf.getvalue()


def gzipped(data):
    """gzip without a file name or timestamp (like gzip -n)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def main(argv):
    """Parses the arguments and writes the layout."""
    if len(argv) < 7:
        sys.exit(__doc__.split("\n\n")[1])
    out, version, revision, epoch, source = argv[1:6]
    epoch = int(epoch)
    binaries = dict(a.split("=", 1) for a in argv[6:])
    for arch in binaries:
        if arch not in ARCHES:
            sys.exit(f"oci-image: unknown arch {arch!r} (amd64 or arm64)")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = {
        "org.opencontainers.image.title": "releaseplan",
        "org.opencontainers.image.description": "A Kubernetes operator that releases workloads "
        "safely: canary steps, health gates, automatic rollback",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.source": source,
    }

    if os.path.exists(out):
        shutil.rmtree(out)
    layout = Layout(out)
    manifests = []
    ca_bundle = os.environ.get("CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    if not os.path.isfile(ca_bundle):
        sys.exit(f"oci-image: no CA bundle at {ca_bundle} (install ca-certificates, or set CA_BUNDLE)")
    for arch in sorted(binaries):
        tar = layer_tar(binaries[arch], ca_bundle, epoch)
        layer = layout.blob(gzipped(tar), MT_LAYER)
        config = {
            "architecture": ARCHES[arch],
            "os": "linux",
            "created": created,
            "config": {
                "User": "65532:65532",
                "Entrypoint": ["/releaseplan"],
                "ExposedPorts": {"8080/tcp": {}},
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
            "history": [{"created": created, "created_by": "e2e/oci-image.py: /releaseplan (static binary) and /etc/ssl/certs/ca-certificates.crt"}],
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": layout.blob(canonical(config), MT_CONFIG),
            "layers": [layer],
            "annotations": labels,
        }
        manifests.append(
            layout.blob(canonical(manifest), MT_MANIFEST, platform={"architecture": ARCHES[arch], "os": "linux"})
        )
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests, "annotations": labels}
    index_desc = layout.blob(
        canonical(index), MT_INDEX, annotations={"org.opencontainers.image.ref.name": version}
    )
    with open(os.path.join(out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    with open(os.path.join(out, "index.json"), "wb") as f:
        f.write(canonical({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [index_desc]}))
    print(index_desc["digest"])


if __name__ == "__main__":
    main(sys.argv)
