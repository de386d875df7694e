#!/usr/bin/env python3
"""Backends for the traffic demo (e2e/demo-traffic.sh), in place of kube-proxy
and the pods: kwok's pods run nothing, so this answers for them.

    e2e/demo-backends.py NAMESPACE     (with a cluster's env sourced)

It watches the namespace's Services, EndpointSlices and Pods on the API
server (RP_API_URL, as the admin of RP_CLUSTER_DIR/pki), as kube-proxy does,
and for each Service that selects a revision (selector
releaseplan.io/revision) and has a loopback ClusterIP (the demo cluster's
Service CIDR is on 127.0.0.0/8) keeps an HTTP server bound on ClusterIP:port
for each of its ports. Like kube-proxy, a request goes to one of the
Service's ready endpoints (round robin) and is answered (200) with that
pod's releaseplan.io/revision label, or with the revision the selector names
when the pod is not known yet; 503 when the Service has no ready endpoint.
So during the EndpointSlice controller's lag after a selector change the
previous revision still answers, as it would in a real cluster. Servers of
Services that are gone are stopped. Nothing listens outside 127.0.0.0/8.

Watches, not polling: a poll every 0.5 s (two kubectl runs) answered with a
state up to a second old on a busy machine, so requests the route had
already moved still met the previous revision. Python 3 standard library only.
"""

import http.client
import http.server
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse

REVISION = "releaseplan.io/revision"
LOCK = threading.Lock()
# (ip, port) -> (selected revision, [revision of each ready endpoint],
# service name); read by the handlers.
ROUTES = {}
# Watched objects by kind, then name.
OBJECTS = {"services": {}, "endpointslices": {}, "pods": {}}
NEXT = [0]  # round robin over a Service's ready endpoints


def log(msg):
    t = time.time()
    print(time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}",
          msg, flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY the second
    # waits for the peer's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True

    def do_GET(self):
        ip, port = self.server.server_address[:2]
        with LOCK:
            _, ready, _ = ROUTES.get((ip, port), (None, [], None))
            NEXT[0] += 1
            revision = ready[NEXT[0] % len(ready)] if ready else None
        if revision:
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


def recompute():
    """ROUTES from OBJECTS; logs what changed. Call with LOCK held."""
    pods = {name: (p["metadata"].get("labels") or {}).get(REVISION)
            for name, p in OBJECTS["pods"].items()}
    ready = {}  # service name -> [pod name or None], ready endpoints
    for s in OBJECTS["endpointslices"].values():
        name = s["metadata"].get("labels", {}).get("kubernetes.io/service-name")
        for ep in s.get("endpoints") or []:
            if name and (ep.get("conditions") or {}).get("ready"):
                ready.setdefault(name, []).append((ep.get("targetRef") or {}).get("name"))
    want = {}
    for name, svc in OBJECTS["services"].items():
        spec = svc.get("spec", {})
        selected = (spec.get("selector") or {}).get(REVISION)
        ip = spec.get("clusterIP") or ""
        if not selected or not ip.startswith("127."):
            continue
        revs = sorted(pods.get(pod) or selected for pod in ready.get(name, []))
        for p in spec.get("ports") or []:
            want[(ip, p["port"])] = (selected, revs, name)
    for key, (selected, revs, name) in want.items():
        if ROUTES.get(key) != want[key]:
            eps = ", ".join(f"{revs.count(r)} {r}" for r in sorted(set(revs))) or "none"
            log(f"{name}: selects {selected}; ready endpoints: {eps}")
    ROUTES.clear()
    ROUTES.update(want)


class Api:
    def __init__(self):
        self.url = urllib.parse.urlsplit(os.environ["RP_API_URL"])
        pki = os.path.join(os.environ["RP_CLUSTER_DIR"], "pki")
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def get(self, path, timeout):
        conn = http.client.HTTPSConnection(self.url.hostname, self.url.port,
                                           context=self.ctx, timeout=timeout)
        conn.request("GET", path)
        r = conn.getresponse()
        if r.status != 200:
            raise OSError(f"GET {path}: {r.status} {r.read()[:200]!r}")
        return r


def watch(api, kind, path):
    """List then watch one kind forever, keeping OBJECTS[kind] current."""
    while True:
        try:
            r = api.get(path, timeout=10)
            listed = json.loads(r.read())
            with LOCK:
                OBJECTS[kind] = {o["metadata"]["name"]: o for o in listed["items"]}
                recompute()
            rv = listed["metadata"]["resourceVersion"]
            r = api.get(f"{path}?watch=1&resourceVersion={rv}&timeoutSeconds=300", timeout=330)
            while True:
                line = r.readline()
                if not line:
                    break  # the watch ended: list again
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    break  # e.g. 410 Gone: list again
                obj = ev["object"]
                with LOCK:
                    if ev["type"] == "DELETED":
                        OBJECTS[kind].pop(obj["metadata"]["name"], None)
                    else:
                        OBJECTS[kind][obj["metadata"]["name"]] = obj
                    recompute()
        except (OSError, ValueError, KeyError, http.client.HTTPException) as e:
            log(f"watching {kind}: {e}; again in 0.5s")
            time.sleep(0.5)


def main():
    ns = sys.argv[1]
    api = Api()
    for kind, path in (("pods", f"/api/v1/namespaces/{ns}/pods"),
                       ("services", f"/api/v1/namespaces/{ns}/services"),
                       ("endpointslices", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices")):
        threading.Thread(target=watch, args=(api, kind, path), daemon=True).start()
    servers = {}  # (ip, port) -> Server
    failed = set()  # (ip, port) that could not be bound: logged once, retried
    while True:
        with LOCK:
            want = dict(ROUTES)
        for key, (_, _, name) in want.items():
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
        time.sleep(0.1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
