"""The API server's pods, as far as a node agent sees them: list and watch of core/v1 Pods bound
to one node, written from the API's conventions alone (not from the plugin's client).

- GET /api/v1/pods?fieldSelector=spec.nodeName=<node> answers a PodList whose
  metadata.resourceVersion the watch starts from;
- the same with watch=1&resourceVersion=<rv> streams one JSON watch event per line (ADDED,
  MODIFIED, DELETED, and BOOKMARK when asked for) of every change after <rv>, until
  timeoutSeconds, and answers 410 Gone for a version older than it keeps;
- a deletion is graceful: MODIFIED with metadata.deletionTimestamp, then DELETED.

`down` makes every request fail with 503, as an API server that lost etcd does.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse


class ApiServer:
    def __init__(self, node_name: str):
        self.node_name = node_name
        self.lock = threading.Condition()
        self.version = 1
        self.pods: dict[str, dict] = {}  # uid -> Pod object
        self.events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, object)
        self.down = False
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def write_kubeconfig(self, path):
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: peer\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: node\n  user:\n    token: peer-token\n"
            "contexts:\n- name: peer\n  context: {cluster: peer, user: node}\n"
            "current-context: peer\n"
        )

    # --- the pods ---------------------------------------------------------------------------

    def _change(self, kind: str, pod: dict):
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        self.events.append((self.version, kind, json.loads(json.dumps(pod))))
        self.lock.notify_all()

    def bind(self, uid: str, namespace: str, name: str, containers, phase="Running"):
        """A pod scheduled to this node. `containers`: (name, init, {resource: count})."""

        def spec(c):
            name_, _, resources = c
            limits = {r: str(n) for r, n in resources.items()}
            return {"name": name_, "image": "peer", "resources": {"limits": limits}}

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {
                "nodeName": self.node_name,
                "containers": [spec(c) for c in containers if not c[1]],
                "initContainers": [spec(c) for c in containers if c[1]],
            },
            "status": {"phase": phase},
        }
        with self.lock:
            self.pods[uid] = pod
            self._change("ADDED", pod)

    def delete(self, uid: str):
        with self.lock:
            pod = self.pods.pop(uid, None)
            if pod is None:
                return
            pod["metadata"]["deletionTimestamp"] = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
            )
            self._change("MODIFIED", pod)
            self._change("DELETED", pod)

    # --- HTTP -------------------------------------------------------------------------------

    def _handler(self):
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send_json(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str):
                self._send_json(
                    code,
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "message": message, "reason": reason, "code": code},
                )

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                self._send_json(201, {})

            def do_GET(self):
                if api.down:
                    return self._status(503, "ServiceUnavailable", "etcd is not answering")
                url = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(url.query)
                if url.path != "/api/v1/pods" or query.get("fieldSelector") != [
                    f"spec.nodeName={api.node_name}"
                ]:
                    return self._status(404, "NotFound", "only this node's pods are served")
                if query.get("watch") == ["1"]:
                    return self._watch(query)
                with api.lock:
                    items = [json.loads(json.dumps(p)) for p in api.pods.values()]
                    version = str(api.version)
                self._send_json(
                    200,
                    {"kind": "PodList", "apiVersion": "v1",
                     "metadata": {"resourceVersion": version}, "items": items},
                )

            def _watch(self, query):
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                timeout = float(query.get("timeoutSeconds", ["300"])[0])
                bookmarks = query.get("allowWatchBookmarks") == ["true"]
                with api.lock:
                    if api.events and since < api.events[0][0] - 1 and since < api.version - 1000:
                        return self._status(410, "Expired", "too old resource version")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + timeout
                last_bookmark = time.monotonic()
                try:
                    while time.monotonic() < deadline and not api.down:
                        with api.lock:
                            pending = [e for e in api.events if e[0] > since]
                            if not pending:
                                api.lock.wait(0.2)
                                pending = [e for e in api.events if e[0] > since]
                            version = api.version
                        for rv, kind, obj in pending:
                            self._chunk({"type": kind, "object": obj})
                            since = rv
                        if bookmarks and time.monotonic() - last_bookmark > 5:
                            self._chunk(
                                {"type": "BOOKMARK",
                                 "object": {"kind": "Pod", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(version)}}}
                            )
                            last_bookmark = time.monotonic()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _chunk(self, event: dict):
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler
