#!/usr/bin/env python3
"""Backends for the traffic demo (e2e/demo-traffic.sh), in place of kube-proxy
and the pods: kwok's pods run nothing, so this answers for them.

    e2e/demo-backends.py NAMESPACE

Every 0.5 s it lists the namespace's Services and EndpointSlices (kubectl,
with the cluster's KUBECONFIG) and, for each Service that selects a revision
(selector releaseplan.io/revision) and has a loopback ClusterIP (the demo
cluster's Service CIDR is on 127.0.0.0/8), keeps an HTTP server bound on
ClusterIP:port for each of its ports. A request is answered with the
revision hash the Service selects at that moment (200), or 503 when the
Service has no ready endpoint. Servers of Services that are gone are
stopped. Nothing listens outside 127.0.0.0/8. Python 3 standard library only.
"""

import http.server
import json
import subprocess
import sys
import threading
import time

REVISION = "releaseplan.io/revision"
# (ip, port) -> (revision, ready endpoints); read by the handlers.
ROUTES = {}
LOCK = threading.Lock()


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY the second
    # waits for the peer's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True

    def do_GET(self):
        ip, port = self.server.server_address[:2]
        with LOCK:
            revision, ready = ROUTES.get((ip, port), (None, False))
        if revision and ready:
            code, body = 200, revision.encode()
        else:
            code, body = 503, b"no ready endpoints"
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def kubectl_items(ns, kind):
    out = subprocess.run(
        ["kubectl", "-n", ns, "get", kind, "-o", "json"],
        check=True, capture_output=True, text=True, timeout=10,
    ).stdout
    return json.loads(out)["items"]


def ready_services(slices):
    """Names of the Services with at least one ready endpoint."""
    ready = set()
    for s in slices:
        name = s["metadata"].get("labels", {}).get("kubernetes.io/service-name")
        for ep in s.get("endpoints") or []:
            if name and (ep.get("conditions") or {}).get("ready"):
                ready.add(name)
    return ready


def main():
    ns = sys.argv[1]
    servers = {}  # (ip, port) -> Server
    failed = set()  # (ip, port) that could not be bound: logged once, retried
    while True:
        try:
            services = kubectl_items(ns, "services")
            ready = ready_services(kubectl_items(ns, "endpointslices"))
        except (subprocess.SubprocessError, ValueError, KeyError) as e:
            log(f"listing failed, keeping the last state: {e}")
            time.sleep(0.5)
            continue
        want = {}
        for svc in services:
            spec = svc.get("spec", {})
            revision = (spec.get("selector") or {}).get(REVISION)
            ip = spec.get("clusterIP") or ""
            if not revision or not ip.startswith("127."):
                continue
            name = svc["metadata"]["name"]
            for p in spec.get("ports") or []:
                want[(ip, p["port"])] = (revision, name in ready, name)
        with LOCK:
            ROUTES.clear()
            ROUTES.update({k: v[:2] for k, v in want.items()})
        for key, (revision, is_ready, name) in want.items():
            if key in servers:
                continue
            try:
                srv = Server(key, Handler)
            except OSError as e:
                if key not in failed:
                    log(f"cannot bind {name} on {key[0]}:{key[1]} (retrying): {e}")
                failed.add(key)
                continue
            failed.discard(key)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            servers[key] = srv
            log(f"serving {name} on {key[0]}:{key[1]}")
        for key in [k for k in servers if k not in want]:
            srv = servers.pop(key)
            srv.shutdown()
            srv.server_close()
            log(f"stopped {key[0]}:{key[1]}")
        time.sleep(0.5)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
