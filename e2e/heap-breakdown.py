#!/usr/bin/env python3
"""Peak heap of the operator by what holds it, from a heaptrack trace.

    heaptrack_print -f TRACE.zst --print-peaks 0 --print-allocators 0 \
        --print-temporary 0 --print-leaks 0 --flamegraph-cost-type peak -F peak.folded
    e2e/heap-breakdown.py peak.folded

Each stack's bytes at the peak go to the frame nearest the allocation that
names an owner: a cached type of the operator (its cache, or a copy of one
being made), the per-plan memory, the reconcile; else to the library
doing the allocation (serde decoding, hyper/TLS buffers). Prints a markdown
table (docs/benchmarks.md, "the heap"). The trace: e2e/heaptrack-operator.sh.
"""
import re,sys,collections
cached = {"CachedPlan":"plans","CachedDeployment":"Deployments","CachedDeploymentSpec":"Deployments",
          "CachedPod":"pods","CachedRevision":"ControllerRevisions","CachedConfig":"ConfigMaps and Secrets (and copies)",
          "Packed":None,"Labels":None}
def owner(f):
    m=re.match(r'^(?:_\$LT\$)?releaseplan_core(?:::|\.\.)api(?:::|\.\.)cached(?:::|\.\.)(\w+?)(?:\$|::|$)',f)
    if m and cached.get(m.group(1)): return "cache: "+cached[m.group(1)]
    if re.match(r'^kube_runtime::reflector::store::Writer',f): return "cache: plans"
    if re.match(r'^releaseplan::controller::config_cache',f): return "cache: ConfigMaps and Secrets (and copies)"
    if re.match(r'^releaseplan::controller::memory',f): return "per-plan memory (kept writes, stand-ins, backoff)"
    if re.match(r'^(releaseplan::controller::(observe|act|write|config::|quiet|reconcile|adopt|gates|traffic|autoscale)|releaseplan_core::plan)',f): return "reconciles (observe, decide, act, write)"
    if re.match(r'^releaseplan::controller::events',f): return "Events"
    return None
lib=[("connections (hyper, TLS buffers)",r'hyper::|h2::|rustls|tokio_rustls'),
     ("decoding watch events and list pages (serde)",r'serde_json|kube_runtime::watcher|kube_client'),
     ("metrics",r'prometheus'),
     ("runtime and the rest",r'.')]
tot=collections.Counter(); total=0
for line in open(sys.argv[1]):
    stack,_,n=line.rstrip('\n').rpartition(' ')
    n=int(n); total+=n
    frames=stack.split(';')
    cat=None
    for f in reversed(frames):
        cat=owner(f)
        if cat: break
    if not cat:
        for name,pat in lib:
            if re.search(pat,stack): cat=name; break
    tot[cat]+=n
for k,v in tot.most_common():
    print(f"| {k} | {v/1048576:.2f} MiB | {100*v/total:.0f}% |")
print(f"| total heap at the peak | {total/1048576:.2f} MiB | |")
