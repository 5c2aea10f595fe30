"""Prometheus text-format metrics for the server, without a client library (counters and histograms)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence

__all__ = ["Histogram", "Metrics"]


class Histogram:
    """A cumulative-bucket histogram (Prometheus semantics: ``le`` buckets, ``_sum`` and ``_count``)."""

    def __init__(self, name: str, help_: str, buckets: Sequence[float]) -> None:
        self.name, self.help, self.buckets = name, help_, list(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.sum += value
        self.count += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cum = 0
        for b, c in zip(self.buckets, self.counts):
            cum += c
            lines.append(f'{self.name}_bucket{{le="{b:g}"}} {cum}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines += [f"{self.name}_sum {self.sum:.6f}", f"{self.name}_count {self.count}"]
        return lines


_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Request counts by endpoint and status, batch sizes, queue and inference times; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.batch_size = Histogram(
            "bertkit_batch_size", "Texts per model forward.", (1, 2, 4, 8, 16, 32, 64, 128, 256)
        )
        self.batch_tokens = Histogram(
            "bertkit_batch_tokens", "Real tokens per model forward.", (64, 256, 1024, 2048, 4096, 8192, 16384)
        )
        self.queue_time = Histogram(
            "bertkit_queue_seconds", "Time a request waited before its batch ran.", _TIME_BUCKETS
        )
        self.inference_time = Histogram("bertkit_inference_seconds", "Model time per batch.", _TIME_BUCKETS)
        self.dropped = 0
        self.truncated_inputs = 0
        self.truncated_tokens = 0

    def count_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1

    def count_dropped(self, n: int) -> None:
        with self._lock:
            self.dropped += n

    def count_truncated(self, dropped: Sequence[int]) -> None:
        """Texts a request's truncation "cut" shortened, and the tokens they lost."""
        with self._lock:
            self.truncated_inputs += sum(1 for d in dropped if d)
            self.truncated_tokens += sum(dropped)

    def observe_batch(self, size: int, tokens: int, seconds: float, queue_seconds: Sequence[float]) -> None:
        with self._lock:
            self.batch_size.observe(size)
            self.batch_tokens.observe(tokens)
            self.inference_time.observe(seconds)
            for q in queue_seconds:
                self.queue_time.observe(q)

    def render(self, queue_depth: int) -> str:
        """The whole exposition, Prometheus text format 0.0.4."""
        with self._lock:
            lines = [
                "# HELP bertkit_requests_total HTTP requests by endpoint and status code.",
                "# TYPE bertkit_requests_total counter",
            ]
            for (endpoint, status), n in sorted(self.requests.items()):
                lines.append(f'bertkit_requests_total{{endpoint="{endpoint}",status="{status}"}} {n}')
            lines += [
                "# HELP bertkit_queue_depth Requests waiting for the model.",
                "# TYPE bertkit_queue_depth gauge",
                f"bertkit_queue_depth {queue_depth}",
                "# HELP bertkit_dropped_total Requests whose client left (or timed out) before their batch ran.",
                "# TYPE bertkit_dropped_total counter",
                f"bertkit_dropped_total {self.dropped}",
                "# HELP bertkit_truncated_inputs_total Texts cut to the token limit (truncation cut).",
                "# TYPE bertkit_truncated_inputs_total counter",
                f"bertkit_truncated_inputs_total {self.truncated_inputs}",
                "# HELP bertkit_truncated_tokens_total Tokens dropped by cutting texts to the token limit.",
                "# TYPE bertkit_truncated_tokens_total counter",
                f"bertkit_truncated_tokens_total {self.truncated_tokens}",
            ]
            for h in (self.batch_size, self.batch_tokens, self.queue_time, self.inference_time):
                lines += h.render()
        return "\n".join(lines) + "\n"
