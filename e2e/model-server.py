#!/usr/bin/env python3
"""A small stand-in of our own for a vLLM OpenAI-compatible model server, for
the integration tests and the demo. Python 3 standard library only.

    e2e/model-server.py --listen 127.81.0.5:8000 --model llama --version 0.7.0 \\
        [--load-seconds 20] [--ttft-ms 80] [--itl-ms 20] [--error-rate 0.0] \\
        [--rps 5] [--labels k=v,...]

Endpoints, as vLLM answers them:
  GET  /health               200 at once, even while the model loads (vLLM's
                             /health does not say the model is served: the
                             readiness it gives lies, which is the point)
  GET  /v1/models            503 while loading (--load-seconds), then the
                             OpenAI model list
  POST /v1/completions       503 while loading, then a short completion (also
  POST /v1/chat/completions  "stream": true, as server-sent events); a share
                             --error-rate of them answer 500
  GET  /version              {"version": "<--version>"}
  GET  /metrics              Prometheus text format 0.0.4
Anything else is 404. Requests are answered at once: the latencies below are
drawn and recorded, never slept.

Metrics. Names, types, label names and buckets are vLLM's own, transcribed
(not copied) from vllm-project/vllm, vllm/v1/metrics/loggers.py
(PrometheusStatLogger, V1 engine, v0.8 to v0.11), checked against
vllm/v1/engine/__init__.py (FINISH_REASON_STRINGS) for the finished_reason
values and vllm/entrypoints/openai/api_server.py (prometheus-fastapi-
instrumentator) for http_requests_total. Labels are model_name (--model)
and engine ("0", one engine core) as in v0.8+; vLLM v0.7's V1 logger had
model_name only. Where vLLM renamed a metric both names are exposed, with the
same observations, as vLLM did while the old one was deprecated:
vllm:inter_token_latency_seconds (0.11) and vllm:time_per_output_token_seconds;
vllm:kv_cache_usage_perc (0.9.2) and vllm:gpu_cache_usage_perc;
vllm:prefix_cache_{queries,hits} (0.9.2) and vllm:gpu_prefix_cache_*. As in
vLLM, the per-token histograms get one observation per output token after the
first, the per-request ones one per finished request; the vllm:* families
appear once the model is loaded (vLLM registers them when its engine starts).
prometheus_client's *_created series are left out.

Errors. vLLM has no error counter. A failed request shows up as vLLM would
show it: in http_requests_total{handler=...,method="POST",status="5xx"}
(prometheus-fastapi-instrumentator, status codes grouped) and, since the
engine gave up on it, in vllm:request_success_total{finished_reason="abort"}
(it is not observed in the latency histograms). So the error rate is
  sum(rate(http_requests_total{status="5xx",handler=~"/v1/.*completions"}[1m]))
    / sum(rate(http_requests_total{handler=~"/v1/.*completions"}[1m]))
or, from the engine's metrics alone,
  sum(rate(vllm:request_success_total{finished_reason="abort"}[1m]))
    / sum(rate(vllm:request_success_total[1m]))
and --error-rate sets it (synthetic and real requests alike).

Synthetic traffic. Once loaded, a thread makes --rps requests a second
(Poisson arrivals), each recorded as if it had run: queue time a few percent
of TTFT, TTFT --ttft-ms +-10% (queue included, as vLLM measures it from
arrival), --itl-ms +-10% per output token, 16..64 output tokens, 32..256
prompt tokens, e2e = TTFT + the inter-token gaps. The gauges follow from the
requests in flight in that virtual time (running ~ rps x e2e by Little's
law, waiting those still queued, KV cache usage their tokens over a cache
of KV_CACHE_TOKENS).

--labels is accepted and ignored: Prometheus adds target labels itself.
SIGTERM (or SIGINT) exits 0 at once.
"""

import argparse
import bisect
import collections
import http.server
import json
import math
import random
import signal
import socket
import sys
import threading
import time
import uuid

MAX_MODEL_LEN = 4096
KV_CACHE_TOKENS = 2 * MAX_MODEL_LEN  # a small GPU's KV cache, in tokens
PREFIX_HIT_SHARE = 0.25  # of prompt tokens found in the prefix cache
ENGINE = "0"
FINISH_REASONS = ("stop", "length", "abort")  # vLLM 0.7 .. 0.10
# prometheus-fastapi-instrumentator as vLLM mounts it leaves these out.
HTTP_EXCLUDED = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


def one_two_five(max_value):
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's token-count buckets)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TOKEN_GAP_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                     1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                           30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                           1920.0, 7680.0]
TOKEN_COUNT_BUCKETS = one_two_five(MAX_MODEL_LEN)


def fmt(v):
    if v == math.inf:
        return "+Inf"
    return repr(float(v))


def esc(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labelstr(pairs):
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs) + "}"


class Histogram:
    def __init__(self, name, doc, buckets):
        self.name, self.doc = name, doc
        self.bounds = [float(b) for b in buckets]
        self.counts = [0] * (len(self.bounds) + 1)  # the last is +Inf only
        self.sum = 0.0
        self.n = 0

    def observe(self, v):
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.sum += v
        self.n += 1

    def render(self, base, out):
        out.append(f"# HELP {self.name} {self.doc}")
        out.append(f"# TYPE {self.name} histogram")
        acc = 0
        for bound, c in zip(self.bounds + [math.inf], self.counts):
            acc += c
            out.append(f"{self.name}_bucket{labelstr(base + [('le', fmt(bound))])} {fmt(acc)}")
        out.append(f"{self.name}_sum{labelstr(base)} {fmt(self.sum)}")
        out.append(f"{self.name}_count{labelstr(base)} {fmt(self.n)}")


class Counter:
    """A counter family; children keyed by the values of extra label names."""

    def __init__(self, name, doc, extra=(), children=()):
        self.name, self.doc, self.extra = name, doc, tuple(extra)
        self.values = collections.OrderedDict((c, 0.0) for c in children)

    def inc(self, amount=1.0, *key):
        self.values[key] = self.values.get(key, 0.0) + amount

    def render(self, base, out):
        out.append(f"# HELP {self.name}_total {self.doc}")
        out.append(f"# TYPE {self.name}_total counter")
        if not self.extra and () not in self.values:
            self.values[()] = 0.0
        for key, v in self.values.items():
            out.append(f"{self.name}_total{labelstr(base + list(zip(self.extra, key)))} {fmt(v)}")


class Metrics:
    """vLLM's PrometheusStatLogger, fed with drawn rather than measured numbers."""

    def __init__(self, model):
        self.lock = threading.Lock()
        self.base = [("model_name", model), ("engine", ENGINE)]
        H, C = Histogram, Counter
        self.ttft = H("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = H("vllm:inter_token_latency_seconds",
                     "Histogram of inter-token latency in seconds.", TOKEN_GAP_BUCKETS)
        self.tpot = H("vllm:time_per_output_token_seconds",
                      "Histogram of time per output token in seconds."
                      "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                      TOKEN_GAP_BUCKETS)
        self.e2e = H("vllm:e2e_request_latency_seconds",
                     "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS)
        self.queue = H("vllm:request_queue_time_seconds",
                       "Histogram of time spent in WAITING phase for request.",
                       REQUEST_LATENCY_BUCKETS)
        self.inference = H("vllm:request_inference_time_seconds",
                           "Histogram of time spent in RUNNING phase for request.",
                           REQUEST_LATENCY_BUCKETS)
        self.prefill = H("vllm:request_prefill_time_seconds",
                         "Histogram of time spent in PREFILL phase for request.",
                         REQUEST_LATENCY_BUCKETS)
        self.decode = H("vllm:request_decode_time_seconds",
                        "Histogram of time spent in DECODE phase for request.",
                        REQUEST_LATENCY_BUCKETS)
        self.req_prompt = H("vllm:request_prompt_tokens",
                            "Number of prefill tokens processed.", TOKEN_COUNT_BUCKETS)
        self.req_gen = H("vllm:request_generation_tokens",
                         "Number of generation tokens processed.", TOKEN_COUNT_BUCKETS)
        self.prompt_tokens = C("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.gen_tokens = C("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = C("vllm:request_success", "Count of successfully processed requests.",
                         ["finished_reason"], [(r,) for r in FINISH_REASONS])
        self.preemptions = C("vllm:num_preemptions",
                             "Cumulative number of preemption from the engine.")
        self.pc_queries = C("vllm:prefix_cache_queries",
                            "Prefix cache queries, in terms of number of queried tokens.")
        self.pc_hits = C("vllm:prefix_cache_hits",
                         "Prefix cache hits, in terms of number of cached tokens.")
        self.gpu_pc_queries = C("vllm:gpu_prefix_cache_queries",
                                "GPU prefix cache queries, in terms of number of queried "
                                "tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.")
        self.gpu_pc_hits = C("vllm:gpu_prefix_cache_hits",
                             "GPU prefix cache hits, in terms of number of cached tokens. "
                             "DEPRECATED: Use vllm:prefix_cache_hits instead.")
        self.http = C("http_requests",
                      "Total number of requests by method, status and handler.",
                      ["handler", "method", "status"])
        # (arrival, running from, finished at, prompt tokens, output tokens), virtual time
        self.inflight = []

    def http_request(self, handler, method, status):
        if handler in HTTP_EXCLUDED:
            return
        with self.lock:
            self.http.inc(1.0, handler, method, f"{status // 100}xx")

    def request(self, now, ttft_s, itl_s, prompt_tokens, out_tokens, failed, reason):
        """Records one request that arrived at `now` as vLLM would once it finished."""
        queue = ttft_s * random.uniform(0.02, 0.08)
        ttft = ttft_s * random.uniform(0.9, 1.1)
        gaps = [itl_s * random.uniform(0.9, 1.1) for _ in range(out_tokens - 1)]
        decode = sum(gaps)
        e2e = ttft + decode
        hits = int(prompt_tokens * PREFIX_HIT_SHARE)
        with self.lock:
            self.pc_queries.inc(prompt_tokens)
            self.gpu_pc_queries.inc(prompt_tokens)
            self.pc_hits.inc(hits)
            self.gpu_pc_hits.inc(hits)
            self.prompt_tokens.inc(prompt_tokens)
            if failed:
                self.success.inc(1.0, "abort")
                return
            self.gen_tokens.inc(out_tokens)
            self.ttft.observe(ttft)
            for g in gaps:
                self.itl.observe(g)
                self.tpot.observe(g)
            self.success.inc(1.0, reason)
            self.e2e.observe(e2e)
            self.queue.observe(queue)
            self.prefill.observe(ttft - queue)
            self.decode.observe(decode)
            self.inference.observe(ttft - queue + decode)
            self.req_prompt.observe(prompt_tokens)
            self.req_gen.observe(out_tokens)
            self.inflight.append((now, now + queue, now + e2e, prompt_tokens, out_tokens))

    def gauges(self, now):
        running = waiting = tokens = 0.0
        self.inflight = [r for r in self.inflight if r[2] > now]
        for arrival, start, end, prompt, out in self.inflight:
            if now < arrival:
                continue
            if now < start:
                waiting += 1
            else:
                running += 1
                tokens += prompt + out * (now - start) / max(end - start, 1e-9)
        return running, waiting, min(1.0, tokens / KV_CACHE_TOKENS)

    def render(self, loaded):
        out = []
        with self.lock:
            if loaded:
                running, waiting, kv = self.gauges(time.time())
                for name, doc, v in (
                        ("vllm:num_requests_running",
                         "Number of requests in model execution batches.", running),
                        ("vllm:num_requests_waiting",
                         "Number of requests waiting to be processed.", waiting),
                        ("vllm:kv_cache_usage_perc",
                         "KV-cache usage. 1 means 100 percent usage.", kv),
                        ("vllm:gpu_cache_usage_perc",
                         "GPU KV-cache usage. 1 means 100 percent usage. "
                         "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kv)):
                    out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge",
                            f"{name}{labelstr(self.base)} {fmt(v)}"]
                for m in (self.gpu_pc_queries, self.gpu_pc_hits, self.pc_queries,
                          self.pc_hits, self.preemptions, self.prompt_tokens,
                          self.gen_tokens, self.success, self.req_prompt, self.req_gen,
                          self.ttft, self.tpot, self.itl, self.e2e, self.queue,
                          self.inference, self.prefill, self.decode):
                    m.render(self.base, out)
            if self.http.values:
                self.http.render([], out)
        return ("\n".join(out) + "\n").encode()


class State:
    def __init__(self, args):
        self.args = args
        self.started = time.monotonic()
        self.created = int(time.time())
        self.metrics = Metrics(args.model)
        self.stop = threading.Event()

    def loaded(self):
        return time.monotonic() - self.started >= self.args.load_seconds

    def draw(self, max_tokens=None):
        """One request's fate: (output tokens, failed, finished_reason)."""
        out = random.randint(16, 64)
        reason = "stop" if random.random() < 0.8 else "length"
        if max_tokens is not None and max_tokens < out:
            out, reason = max(1, max_tokens), "length"
        return out, random.random() < self.args.error_rate, reason

    def record(self, prompt_tokens, out_tokens, failed, reason):
        self.metrics.request(time.time(), self.args.ttft_ms / 1000.0,
                             self.args.itl_ms / 1000.0, prompt_tokens, out_tokens,
                             failed, reason)

    def traffic(self):
        """Synthetic requests at --rps, Poisson arrivals, recorded not run."""
        while not self.stop.is_set():
            if self.args.rps <= 0:
                return
            if self.stop.wait(random.expovariate(self.args.rps)):
                return
            if not self.loaded():
                continue
            out, failed, reason = self.draw()
            handler = random.choice(("/v1/completions", "/v1/chat/completions"))
            self.metrics.http_request(handler, "POST", 500 if failed else 200)
            self.record(random.randint(32, 256), out, failed, reason)


WORDS = ("the", "model", "stands", "in", "for", "a", "real", "one", "and", "answers",
         "with", "a", "few", "plain", "words")


def error_body(code, kind, message):
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "model-server-standin"
    sys_version = ""

    def log_message(self, *a):
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True

    @property
    def st(self):
        return self.server.state

    def path_only(self):
        return self.path.split("?", 1)[0]

    def send(self, code, body, ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.st.metrics.http_request(self.handler_label(), self.command, code)
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handler_label(self):
        p = self.path_only()
        known = ("/health", "/version", "/metrics", "/v1/models", "/v1/completions",
                 "/v1/chat/completions")
        return p if p in known else "none"

    def not_found(self):
        self.send(404, error_body(404, "NotFoundError", f"no route {self.path_only()}"))

    def loading(self):
        self.send(503, error_body(503, "ServiceUnavailableError",
                                  f"model {self.st.args.model} is loading"))

    def do_GET(self):
        p, args = self.path_only(), self.st.args
        if p == "/health":
            self.send(200, b"", "text/plain")
        elif p == "/version":
            self.send(200, {"version": args.version})
        elif p == "/metrics":
            self.send(200, self.st.metrics.render(self.st.loaded()),
                      "text/plain; version=0.0.4; charset=utf-8")
        elif p == "/v1/models":
            if not self.st.loaded():
                return self.loading()
            self.send(200, {"object": "list", "data": [{
                "id": args.model, "object": "model", "created": self.st.created,
                "owned_by": "vllm", "root": args.model, "max_model_len": MAX_MODEL_LEN}]})
        else:
            self.not_found()

    do_HEAD = do_GET

    def do_POST(self):
        p = self.path_only()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > 16 << 20:
            self.close_connection = True
            return self.send(400, error_body(400, "BadRequestError", "bad Content-Length"))
        raw = self.rfile.read(length) if length else b""
        if p not in ("/v1/completions", "/v1/chat/completions"):
            return self.not_found()
        if not self.st.loaded():
            return self.loading()
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return self.send(400, error_body(400, "BadRequestError", f"invalid JSON body: {e}"))
        model = self.st.args.model
        if req.get("model") not in (None, model):
            return self.send(404, error_body(404, "NotFoundError",
                                             f"The model `{req.get('model')}` does not exist."))
        chat = p == "/v1/chat/completions"
        if chat:
            msgs = req.get("messages") if isinstance(req.get("messages"), list) else []
            text_in = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        else:
            text_in = str(req.get("prompt", ""))
        prompt_tokens = max(1, len(text_in) // 4)
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        out, failed, reason = self.st.draw(max_tokens)
        self.st.record(prompt_tokens, out, failed, reason)
        if failed:
            return self.send(500, error_body(500, "InternalServerError",
                                             "injected failure (--error-rate)"))
        words = [WORDS[i % len(WORDS)] for i in range(out)]
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + out,
                 "completion_tokens": out}
        if req.get("stream"):
            opts = req.get("stream_options")
            include = isinstance(opts, dict) and opts.get("include_usage") is True
            return self.stream(chat, ident, words, reason, usage if include else None)
        text = " ".join(words)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text,
                                              "tool_calls": []},
                      "logprobs": None, "finish_reason": reason, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                      "stop_reason": None}
        self.send(200, {"id": ident, "object": "chat.completion" if chat else "text_completion",
                        "created": int(time.time()), "model": model, "choices": [choice],
                        "usage": usage})

    def stream(self, chat, ident, words, reason, usage):
        self.st.metrics.http_request(self.handler_label(), "POST", 200)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"
        created, model = int(time.time()), self.st.args.model

        def event(payload):
            data = b"data: " + (payload if isinstance(payload, bytes)
                                else json.dumps(payload).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        for i, w in enumerate(words):
            last = i == len(words) - 1
            piece = (" " if i else "") + w
            if chat:
                delta = {"content": piece}
                if i == 0:
                    delta["role"] = "assistant"
                choice = {"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": reason if last else None}
            else:
                choice = {"index": 0, "text": piece, "logprobs": None,
                          "finish_reason": reason if last else None}
            event({"id": ident, "object": obj, "created": created, "model": model,
                   "choices": [choice]})
        if usage:
            event({"id": ident, "object": obj, "created": created, "model": model,
                   "choices": [], "usage": usage})
        event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # No tracebacks: a client that went away is not our error.
        err = sys.exc_info()[1]
        if not isinstance(err, (ConnectionError, TimeoutError, OSError)):
            print(f"model-server: error serving {client_address}: {err!r}", file=sys.stderr)


class Server6(Server):
    address_family = socket.AF_INET6


def parse_listen(s):
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"--listen must be HOST:PORT, got {s!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def share(s):
    v = float(s)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {s}")
    return v


def non_negative(s):
    v = float(s)
    if v < 0 or math.isnan(v) or math.isinf(v):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {s}")
    return v


def main():
    ap = argparse.ArgumentParser(description="Stand-in for a vLLM OpenAI-compatible server.")
    ap.add_argument("--listen", required=True, type=parse_listen, help="HOST:PORT to bind")
    ap.add_argument("--model", required=True, help="served model name (model_name label)")
    ap.add_argument("--version", required=True, help="what GET /version answers")
    ap.add_argument("--load-seconds", type=non_negative, default=20.0,
                    help="seconds 'loading the model' after start (default 20)")
    ap.add_argument("--ttft-ms", type=non_negative, default=80.0,
                    help="mean time to first token, ms (default 80)")
    ap.add_argument("--itl-ms", type=non_negative, default=20.0,
                    help="mean inter-token latency, ms (default 20)")
    ap.add_argument("--error-rate", type=share, default=0.0,
                    help="share of requests that fail, 0..1 (default 0)")
    ap.add_argument("--rps", type=non_negative, default=5.0,
                    help="synthetic requests a second once loaded, 0 for none (default 5)")
    ap.add_argument("--labels", default="",
                    help="ignored: Prometheus adds target labels itself")
    args = ap.parse_args()

    host, port = args.listen
    cls = Server6 if ":" in host else Server
    try:
        server = cls((host, port), Handler)
    except OSError as e:
        print(f"model-server: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    state = State(args)
    server.state = state

    # SIGTERM and SIGINT are blocked in every thread (the threads started
    # below inherit the mask) and taken here by sigwait: a handler would run
    # only when the main thread next runs Python code, up to a wait later
    # when the kernel hands the signal to another thread.
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    threading.Thread(target=state.traffic, daemon=True).start()
    print(f"model-server: serving model {args.model} (version {args.version}) on "
          f"{host}:{port}; loading {args.load_seconds:g}s, ttft {args.ttft_ms:g}ms, "
          f"itl {args.itl_ms:g}ms, error rate {args.error_rate:g}, {args.rps:g} rps",
          file=sys.stderr, flush=True)
    signal.sigwait(stops)
    state.stop.set()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
