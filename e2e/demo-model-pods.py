#!/usr/bin/env python3
"""Plays the kubelet's part for the model-server demo's pods (standard
library only, and kubectl).

kwok runs no container. For each pod of the namespace that runs with an IP on
127.0.0.0/8 (the demo's GPU nodes have loopback pod CIDRs), this starts a
stand-in vLLM server, e2e/model-server.py, on the pod's own IP and port 8000,
configured by the container's env (MODEL, VERSION, LOAD_SECONDS, TTFT_MS,
ERROR_RATE, RPS), and stops it the moment the pod is deleted (a watch, not a
poll: kwok hands a deleted pod's IP to the next pod at once, and in a cluster
a pod's network goes with it). It keeps a Prometheus file_sd list of them,
each with the labels namespace, pod and revision (the pod's
releaseplan.io/revision label), as a cluster's relabelling would.

  e2e/demo-model-pods.py NAMESPACE TARGETS_JSON
"""

import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 8000


def env_of(pod, name, default):
    for c in pod.get("spec", {}).get("containers", [])[:1]:
        for e in c.get("env") or []:
            if e.get("name") == name and "value" in e:
                return e["value"]
    return default


class Servers:
    def __init__(self, ns, targets):
        self.ns = ns
        self.targets = targets
        self.running = {}  # uid -> (process, ip, pod, revision)
        self.write()

    def stop(self, uid):
        s = self.running.pop(uid, None)
        if s:
            s[0].kill()
            s[0].wait()
            return True
        return False

    def start(self, uid, pod, ip):
        name = pod["metadata"]["name"]
        args = [
            sys.executable, os.path.join(HERE, "model-server.py"),
            "--listen", f"{ip}:{PORT}",
            "--model", env_of(pod, "MODEL", "llama"),
            "--version", env_of(pod, "VERSION", "0"),
            "--load-seconds", env_of(pod, "LOAD_SECONDS", "0"),
            "--ttft-ms", env_of(pod, "TTFT_MS", "80"),
            "--error-rate", env_of(pod, "ERROR_RATE", "0"),
            "--rps", env_of(pod, "RPS", "10"),
        ]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rev = pod["metadata"].get("labels", {}).get("releaseplan.io/revision", "")
        self.running[uid] = (proc, ip, name, rev)

    def event(self, kind, pod):
        uid = pod["metadata"].get("uid", "")
        status = pod.get("status", {})
        ip = status.get("podIP", "")
        live = (kind != "DELETED" and not pod["metadata"].get("deletionTimestamp")
                and status.get("phase") == "Running" and ip.startswith("127."))
        changed = False
        if not live:
            changed = self.stop(uid)
        elif uid not in self.running:
            self.start(uid, pod, ip)
            changed = True
        if changed:
            self.write()

    def write(self):
        items = [{"targets": [f"{ip}:{PORT}"],
                  "labels": {"namespace": self.ns, "pod": pod, "revision": rev}}
                 for (_, ip, pod, rev) in self.running.values()]
        tmp = self.targets + ".tmp"
        with open(tmp, "w") as f:
            json.dump(items, f)
        os.replace(tmp, self.targets)

    def stop_all(self):
        for uid in list(self.running):
            self.stop(uid)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ns, targets = sys.argv[1], sys.argv[2]
    servers = Servers(ns, targets)
    watch = subprocess.Popen(
        ["kubectl", "get", "pods", "-n", ns, "--watch", "--output-watch-events", "-o", "json"],
        stdout=subprocess.PIPE, text=True)

    def bye(*_):
        watch.kill()
        servers.stop_all()
        sys.exit(0)

    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGINT, bye)
    decoder = json.JSONDecoder()
    buf = ""
    for line in watch.stdout:
        buf += line
        while True:
            buf = buf.lstrip()
            if not buf:
                break
            try:
                ev, end = decoder.raw_decode(buf)
            except json.JSONDecodeError:
                break
            buf = buf[end:]
            obj = ev.get("object", ev)
            if obj.get("kind") == "Pod":
                servers.event(ev.get("type", "ADDED"), obj)
    servers.stop_all()


if __name__ == "__main__":
    main()
