#!/usr/bin/env python3
"""Requests through the Gateway while a ReleasePlan rolls out, for the traffic
demo (e2e/demo-traffic.sh): a live count of responses per revision.

    e2e/demo-load.py URL NAMESPACE PLAN EXPECT [TIMEOUT]

Sends RATE (50) requests a second to URL, evenly spaced, and prints one line a
second: the plan's phase, step and status.trafficWeight, and how many
responses each revision gave (a revision is named by its image tag, found
through the Deployments labelled with its hash), plus errors (any other
answer, or none). Stops a few seconds after the plan has acted on its
current spec and reached phase EXPECT (Stable or RolledBack).

Exits 1, saying why, when the plan reaches the other final phase, or does not
settle within TIMEOUT seconds (180), or the traffic does not show what the
phase claims: Stable must end with every request on the new revision and no
error in the last seconds; RolledBack must have sent requests to the canary
before the failure and none in the last seconds.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

RATE = 50
TAIL = 3  # seconds printed after the plan settled; the checks use them


def kubectl_json(*args):
    out = subprocess.run(
        ["kubectl", *args, "-o", "json"],
        check=True, capture_output=True, text=True, timeout=10,
    ).stdout
    return json.loads(out)


class Status(threading.Thread):
    """Polls the plan twice a second; `plan` is the latest object."""

    def __init__(self, ns, name):
        super().__init__(daemon=True)
        self.ns, self.name, self.plan, self.error = ns, name, None, None
        # Wall time the status first showed RollbackInProgress or RolledBack
        # after RollingOut (polled: up to ~0.5 s late).
        self.left_rolling, self.rolling = None, False

    def run(self):
        while True:
            try:
                self.plan = kubectl_json("-n", self.ns, "get", "releaseplan", self.name)
                self.error = None
                phase = (self.plan.get("status") or {}).get("phase")
                if phase == "RollingOut":
                    self.rolling = True
                elif self.rolling and self.left_rolling is None and phase in (
                        "RollbackInProgress", "RolledBack"):
                    self.left_rolling = time.time()
            except (subprocess.SubprocessError, ValueError) as e:
                self.error = e
            time.sleep(0.5)


class Names:
    """Revision hash -> image tag, from the plan's Deployments."""

    def __init__(self, ns, plan):
        self.ns, self.plan, self.names = ns, plan, {}

    def __call__(self, rev):
        if rev not in self.names:
            try:
                deps = kubectl_json("-n", self.ns, "get", "deployments",
                                    "-l", f"releaseplan.io/plan={self.plan}")
            except (subprocess.SubprocessError, ValueError):
                deps = {"items": []}
            for d in deps["items"]:
                h = d["metadata"].get("labels", {}).get("releaseplan.io/revision")
                image = d["spec"]["template"]["spec"]["containers"][0]["image"]
                if h:
                    self.names[h] = image.rsplit(":", 1)[-1]
        return self.names.get(rev, rev[:8])


def log_error(what):
    """An error answer, with its time, on stderr when DEMO_LOAD_ERRORS=1."""
    if os.environ.get("DEMO_LOAD_ERRORS") == "1":
        print(f"  {clock(time.time())} error: {what}", file=sys.stderr, flush=True)


def clock(t):
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def step_text(plan):
    s, status = plan["spec"], plan.get("status") or {}
    phase = status.get("phase", "-")
    steps = (s.get("strategy") or {}).get("steps") or []
    cur = status.get("currentStep", 0)
    if phase != "RollingOut":
        where = ""
    elif cur >= len(steps):
        where = "final step (100%)"
    else:
        st = steps[cur]
        if "setWeight" in st:
            what = f"setWeight {st['setWeight']}"
        elif "pause" in st:
            what = f"pause {st['pause'].get('duration', '')}".strip()
        else:
            what = next(iter(st), "?")
        where = f"step {cur + 1}/{len(steps)} ({what})"
    tw = status.get("trafficWeight")
    traffic = f"{tw:3d}%" if tw is not None else "   -"
    return f"{phase:<18} {where:<26} {traffic:>7}"


def main():
    url, ns, name, expect = sys.argv[1:5]
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 180.0
    other = {"Stable": "RolledBack", "RolledBack": "Stable"}[expect]
    u = urllib.parse.urlsplit(url)
    status = Status(ns, name)
    status.start()
    names = Names(ns, name)
    conn = None
    seen = []  # revision names in order of first response
    seconds = []  # (counts, errors, phase, current hash) per printed second
    canary_before_failure = 0
    last_ok = {}  # revision -> wall time of its last 200
    print(f"{'time':<8}  {'phase':<18} {'step':<26} {'traffic':>7}   "
          f"responses per version, of {RATE} requests a second", flush=True)
    start = time.monotonic()
    settled_at = None
    while True:
        plan = status.plan
        t0 = time.monotonic()
        counts, errors = {}, 0
        for i in range(RATE):
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=2)
                conn.request("GET", u.path or "/")
                r = conn.getresponse()
                body = r.read().decode(errors="replace").strip()
                if r.status == 200:
                    counts[body] = counts.get(body, 0) + 1
                    last_ok[body] = time.time()
                else:
                    errors += 1
                    log_error(f"{r.status} {body[:60]}")
            except (OSError, http.client.HTTPException) as e:
                errors += 1
                log_error(repr(e))
                if conn is not None:
                    conn.close()
                conn = None
            pause = t0 + (i + 1) / RATE - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            elif pause < -2:
                break  # requests hang (each may wait 2 s): print what we have
        plan = status.plan or plan
        if plan is None:
            sys.exit(f"cannot read releaseplan {name}: {status.error}")
        st = plan.get("status") or {}
        cur = ((st.get("components") or [{}])[0]).get("currentHash")
        named = {}
        for rev, n in counts.items():
            label = names(rev)
            named[label] = named.get(label, 0) + n
            if label not in seen:
                seen.append(label)
        cols = "  ".join(f"{label} {named.get(label, 0):3d}" for label in seen)
        print(f"{time.strftime('%H:%M:%S')}  {step_text(plan)}   {cols}  errors {errors}",
              flush=True)
        phase = st.get("phase")
        if phase == "RollingOut" and cur:
            canary_before_failure += counts.get(cur, 0)
        seconds.append((counts, errors, phase, cur))
        acted = st.get("observedGeneration") == plan["metadata"].get("generation")
        if settled_at is None and acted and phase == other:
            sys.exit(f"the plan reached {other}, not {expect}: {st.get('message', '')}")
        if settled_at is None and acted and phase == expect:
            settled_at = len(seconds)
        if settled_at is not None and len(seconds) >= settled_at + TAIL:
            break
        if time.monotonic() - start > timeout:
            sys.exit(f"the plan did not reach {expect} within {timeout:.0f}s "
                     f"(phase {phase}: {st.get('message', '')})")
    tail = seconds[-TAIL:]
    if expect == "Stable":
        cur = tail[-1][3]
        bad = [(c, e) for c, e, _, _ in tail if e or set(c) != {cur}]
        if bad:
            sys.exit(f"Stable, but the last {TAIL}s did not all reach the new revision: {bad}")
        print(f"Stable: the last {TAIL}s of requests all reached {names(cur)}, no errors")
    else:
        failure = st.get("failure") or {}
        stable = ((st.get("components") or [{}])[0]).get("stableHash")
        canary = {c for _, _, ph, c in seconds if ph == "RollingOut" and c and c != stable}
        late = sum(c.get(h, 0) for c, _, _, _ in tail for h in canary)
        if canary_before_failure == 0:
            sys.exit("rolled back, but the canary never served a request before")
        if late:
            sys.exit(f"rolled back, but the canary still served {late} requests in the last {TAIL}s")
        last = max((last_ok.get(h, 0) for h in canary), default=0)
        print(f"RolledBack ({failure.get('gate', '?')}: {failure.get('reason', '?')}): the canary "
              f"served {canary_before_failure} requests while rolling out, none in the last {TAIL}s")
        if status.left_rolling:
            print(f"  the canary's last response at {clock(last)}; the status showed the "
                  f"rollback from {clock(status.left_rolling)} (polled every 0.5s)")


if __name__ == "__main__":
    main()
