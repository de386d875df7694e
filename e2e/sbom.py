#!/usr/bin/env python3
"""A CycloneDX 1.5 JSON SBOM of the crates linked into the released binaries.

    e2e/sbom.py [--ca-bundle PATH --ca-version V] EPOCH METADATA.json... > releaseplan.cdx.json

Each METADATA.json is the output of
`cargo metadata --locked --format-version 1 --filter-platform TARGET` for one
release target; the SBOM lists the union of their crates reachable from the
root package (releaseplan) through normal dependencies: what ends up in the
operator and the plugin. Build scripts, proc macros' own dependencies and
dev-dependencies are left out (they run at build time, they are not shipped);
proc macros themselves are kept (their code expands into the binary).
Checksums come from Cargo.lock (crates.io's SHA-256 of the .crate file).
With --ca-bundle, the image's other file is listed too: the CA bundle at
/etc/ssl/certs/ca-certificates.crt, as Debian's ca-certificates package at
version V (its purl, for scanners) with the file's own SHA-256; an empty V
(a bundle from elsewhere) lists the file by its hash only.

Reproducible: components sorted by purl, the timestamp is EPOCH (the
commit's time) and the serial number is derived from the content.
Standard library only.
"""

import hashlib
import json
import os
import sys
import time
import tomllib
import uuid


def purl(pkg):
    """The package URL of a cargo package (a path crate has no registry)."""
    return f"pkg:cargo/{pkg['name']}@{pkg['version']}"


def shipped(meta):
    """Ids of the packages reachable from the root through normal dependencies."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = meta["resolve"]["root"]
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return seen, nodes


def ca_component(path, version):
    """The image's CA bundle: Debian's ca-certificates when VERSION is known."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    c = {
        "type": "data",
        "bom-ref": "file:/etc/ssl/certs/ca-certificates.crt",
        "name": "ca-certificates",
        "description": "CA bundle at /etc/ssl/certs/ca-certificates.crt in the operator's image",
        "hashes": [{"alg": "SHA-256", "content": digest}],
        "properties": [{"name": "releaseplan:image-path", "value": "/etc/ssl/certs/ca-certificates.crt"}],
    }
    if version:
        c["version"] = version
        c["purl"] = f"pkg:deb/debian/ca-certificates@{version}?arch=all"
        c["bom-ref"] = c["purl"]
        c["licenses"] = [{"expression": "GPL-2.0-or-later AND MPL-2.0"}]
    return c


def main(argv):
    """Reads the metadata files and prints the SBOM."""
    ca_bundle, ca_version = None, ""
    while len(argv) > 1 and argv[1].startswith("--"):
        if argv[1] == "--ca-bundle" and len(argv) > 2:
            ca_bundle, argv = argv[2], argv[:1] + argv[3:]
        elif argv[1] == "--ca-version" and len(argv) > 2:
            ca_version, argv = argv[2], argv[:1] + argv[3:]
        else:
            sys.exit(f"sbom: unknown option {argv[1]}\n" + __doc__.split("\n\n")[1])
    if len(argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    epoch = int(argv[1])
    packages, edges, root = {}, {}, None
    workspace = None
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        workspace = meta["workspace_root"]
        by_id = {p["id"]: p for p in meta["packages"]}
        ids, nodes = shipped(meta)
        root = by_id[meta["resolve"]["root"]]
        for pid in ids:
            pkg = by_id[pid]
            packages[purl(pkg)] = pkg
            deps = edges.setdefault(purl(pkg), set())
            for dep in nodes[pid]["deps"]:
                if dep["pkg"] in ids and any(k["kind"] is None for k in dep["dep_kinds"]):
                    deps.add(purl(by_id[dep["pkg"]]))
    with open(os.path.join(workspace, "Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    checksums = {f"pkg:cargo/{p['name']}@{p['version']}": p.get("checksum") for p in lock["package"]}

    def component(pkg, kind):
        c = {"type": kind, "bom-ref": purl(pkg), "name": pkg["name"], "version": pkg["version"]}
        if pkg.get("description"):
            c["description"] = " ".join(pkg["description"].split())
        if pkg.get("license"):
            c["licenses"] = [{"expression": pkg["license"]}]
        if pkg["source"]:
            c["purl"] = purl(pkg)
        if checksums.get(purl(pkg)):
            c["hashes"] = [{"alg": "SHA-256", "content": checksums[purl(pkg)]}]
        return c

    root_ref = purl(root)
    components = [component(packages[r], "library") for r in sorted(packages) if r != root_ref]
    if ca_bundle:
        components.append(ca_component(ca_bundle, ca_version))
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
            "tools": {"components": [{"type": "application", "name": "e2e/sbom.py (releaseplan)"}]},
            "component": component(root, "application"),
        },
        "components": components,
        "dependencies": [{"ref": r, "dependsOn": sorted(edges[r])} for r in sorted(edges)],
    }
    body = json.dumps(bom, sort_keys=True, indent=2)
    bom["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, body))
    print(json.dumps(bom, sort_keys=True, indent=2))


if __name__ == "__main__":
    main(sys.argv)
