"""A test OTLP/HTTP receiver (issue #57): decodes each `POST /v1/traces` with the official
protobuf definitions (`opentelemetry-proto` from PyPI) and appends one JSON line per span to
the file named by its first argument. Prints `listening <port>` once it listens on loopback.

    otlp_collector.py SPANS.jsonl [--mode ok|hang|garbage]

`hang` accepts each request and never answers; `garbage` answers 200 with bytes that are no
protobuf message. Each span's line: trace_id, span_id, parent_span_id (hex), name, kind, and
its attributes as a flat object; the resource's `service.name` as `service`. Metrics
(`POST /v1/metrics`) go to SPANS with `.metrics` added: a line per histogram data point,
with the metric's name, the point's attributes, count, sum and bucket bounds.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

SPANS, MODE = sys.argv[1], (sys.argv[3] if len(sys.argv) > 3 else "ok")


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Receiver(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if MODE == "hang":
            time.sleep(3600)
            return
        if MODE == "garbage":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"\xff\x00 no protobuf")
            return
        if self.path == "/v1/metrics":
            self.metrics(body)
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        with open(SPANS, "a") as out:
            for resource_spans in request.resource_spans:
                resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.write(json.dumps({
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "attributes": {a.key: value_of(a.value) for a in span.attributes},
                            "links": [{
                                "trace_id": link.trace_id.hex(),
                                "span_id": link.span_id.hex(),
                                "attributes": {a.key: value_of(a.value) for a in link.attributes},
                            } for link in span.links],
                            "service": resource.get("service.name"),
                        }) + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def metrics(self, body):
    request = metrics_service_pb2.ExportMetricsServiceRequest()
    request.ParseFromString(body)
    with open(SPANS + ".metrics", "a") as out:
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.histogram.data_points:
                        out.write(json.dumps({
                            "name": metric.name,
                            "attributes": {a.key: value_of(a.value) for a in point.attributes},
                            "count": point.count,
                            "sum": point.sum,
                            "bounds": list(point.explicit_bounds),
                        }) + "\n")
    answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
    self.send_response(200)
    self.send_header("content-type", "application/x-protobuf")
    self.send_header("content-length", str(len(answer)))
    self.end_headers()
    self.wfile.write(answer)


Receiver.metrics = metrics
server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
