#!/usr/bin/env python3
"""A webhook receiver for the demos' notifications (docs/notifications.md).

    e2e/demo-notify.py PORT_FILE LOG

Listens on 127.0.0.1 (a free port, written to PORT_FILE once it listens)
and appends one line per notification it receives to LOG: trigger, plan,
step and message. Answers 200 to every POST. Python 3 standard library only.
"""

import http.server
import json
import os
import sys

def line(body):
    """One line for a notification body (schema releaseplan.io/notification/v1)."""
    plan = body.get("plan") or {}
    step, steps = body.get("step"), body.get("steps")
    # `steps + 1` is the implicit final step to 100%.
    if isinstance(step, int) and isinstance(steps, int) and step > steps:
        where = "final step"
    else:
        where = f"step {step}/{steps}"
    name = f"{plan.get('namespace')}/{plan.get('name')}"
    trigger = body.get("trigger", "?")
    return f"  notification  {trigger:<16} {name:<16} {where:<10} {body.get('message', '')}"

def main():
    port_file, log = sys.argv[1], sys.argv[2]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                text = line(json.loads(raw))
            except (ValueError, AttributeError):
                text = f"  notification  (not JSON: {raw[:80]!r})"
            with open(log, "a", encoding="utf-8") as f:
                f.write(text + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))

    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()

if __name__ == "__main__":
    main()
