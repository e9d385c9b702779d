"""A bounded stress test of `vse serve` under attack, sent only to localhost.

`vse serve` runs in its own process over a small index of Flickr8k dev photos (built
here with the shipped model). Four phases, the first three of ``--seconds`` each:

1. **calm**: ``--clients`` threads send valid requests (text searches with dev captions,
   thumbnails, annotations of indexed photos);
2. **attack**: the same valid clients, plus ``--attackers`` threads cycling through every
   bad-input class: decompression bombs (30000^2 and 19000^2 PNGs of a few KB) and a
   49-megapixel PNG that is legal but heavy, uploads over the limit (declared and streamed
   without a length), non-images, empty uploads, bad and missing query fields, unknown
   and malformed ids, path traversal, a foreign Host header, wrong methods.

3. **writer**: ``--clients`` threads search while another process re-indexes the folder
   in a loop (half of the photos moved away and back, each update followed by a
   compaction and the caches ``vse index`` stores). Every search answer is checked
   against the two states the index can be in (all photos, half of them), computed
   before the phase: a result from neither is a wrong result (goal 0);
4. **cold annotations**: a second server on a fresh cache (no caption pool yet) gets
   ``--clients`` + 1 concurrent first annotations, each client retrying on 503 until 200;
   every answer must equal the warm server's (goal: 0 wrong, and no 5xx but the 503
   with Retry-After that says the pool is being prepared).

Reports requests served, the count of 5xx responses (goal 0), the server's peak RSS
(VmHWM; goal under 1.5 GB with 4 concurrent bombs), and the p99 latency of valid
requests during the attack against the calm phase.

Run: python benchmarks/service_stress.py [--seconds 30] [--clients 2] [--attackers 4]
"""

from __future__ import annotations

import argparse
import http.client
import io
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multipart(name: str, data: bytes, ctype: str = "image/png") -> tuple[bytes, str]:
    b = uuid.uuid4().hex
    body = (
        (
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{b}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={b}"


def png(size: tuple[int, int], mode: str = "1") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size).save(buf, "PNG", optimize=True)
    return buf.getvalue()


class Client:
    """One keep-alive connection to the server; ``request`` returns (status, seconds)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.body = b""
        self.retry_after: str | None = None

    def request(self, method, url, body=None, headers=None, chunks=None):
        t0 = time.perf_counter()
        try:
            if chunks is not None:  # a streamed body without Content-Length
                self.conn.putrequest(method, url)
                for k, v in (headers or {}).items():
                    self.conn.putheader(k, v)
                self.conn.putheader("Transfer-Encoding", "chunked")
                self.conn.endheaders()
                try:
                    for c in chunks:
                        self.conn.send(f"{len(c):x}\r\n".encode() + c + b"\r\n")
                    self.conn.send(b"0\r\n\r\n")
                except OSError:
                    pass  # the server answered and closed early: read its answer
            else:
                self.conn.request(method, url, body=body, headers=headers or {})
            r = self.conn.getresponse()
            self.body = r.read()
            self.retry_after = r.getheader("retry-after")
            status = r.status
            if r.getheader("connection", "").lower() == "close":
                self.reset()
        except (OSError, http.client.HTTPException):
            self.reset()
            status = -1  # connection error (counted apart from HTTP statuses)
        return status, time.perf_counter() - t0

    def reset(self) -> None:
        self.conn.close()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)


def attacks(ids: list[int]) -> list[tuple[str, dict]]:
    """(label, request kwargs) for every bad-input class."""
    bomb30, bomb19 = png((30_000, 30_000)), png((19_000, 19_000))
    heavy = png((7_000, 7_000))  # 49 MP: under the pixel budget, decoded for real
    big = os.urandom(21 * 2**20)  # over the 20 MB upload limit
    out = []
    for label, data in [("bomb-30k", bomb30), ("bomb-19k", bomb19), ("heavy-49mp", heavy)]:
        for url in ("/search/image", "/annotate"):
            body, ctype = multipart(f"{label}.png", data)
            out.append((label, {"method": "POST", "url": url, "body": body,
                                "headers": {"Content-Type": ctype}}))  # fmt: skip
    body, ctype = multipart("big.jpg", big, "image/jpeg")
    out.append(("upload-declared-21mb", {"method": "POST", "url": "/search/image", "body": body,
                                         "headers": {"Content-Type": ctype}}))  # fmt: skip
    out.append(("upload-streamed-21mb", {"method": "POST", "url": "/annotate",
                "headers": {"Content-Type": ctype},
                "chunks": [body[a : a + 2**20] for a in range(0, len(body), 2**20)]}))  # fmt: skip
    for label, data in [("not-an-image", b"hello" * 100), ("empty-upload", b"")]:
        body, ctype = multipart("x.jpg", data, "image/jpeg")
        out.append((label, {"method": "POST", "url": "/search/image", "body": body,
                            "headers": {"Content-Type": ctype}}))  # fmt: skip
    no_file = {"Content-Type": "multipart/form-data; boundary=x"}
    out.append(("no-file", {"method": "POST", "url": "/annotate", "body": b"", "headers": no_file}))
    as_json = {"Content-Type": "application/json"}
    out.append(
        ("wrong-type", {"method": "POST", "url": "/annotate", "body": b"{}", "headers": as_json})
    )
    for url in ["/search?q=", "/search?q=%20%20", "/search?k=5", "/search?q=dog&k=0",
                "/search?q=dog&k=99999", "/search?q=dog&k=abc", "/search?q=" + "x" * 600,
                "/images/999999", "/thumbs/-1", "/annotate/abc", "/images/..%2F..%2Fetc%2Fpasswd",
                "/images/../../etc/passwd", f"/thumbs/{ids[0]}?k=%00", "/nope"]:  # fmt: skip
        out.append(("bad-url", {"method": "GET", "url": url}))
    out.append(("foreign-host", {"method": "GET", "url": "/health",
                                 "headers": {"Host": "attacker.example"}}))  # fmt: skip
    out.append(("wrong-method", {"method": "DELETE", "url": f"/images/{ids[0]}"}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--attackers", type=int, default=4)
    ap.add_argument("--photos", type=int, default=40)
    args = ap.parse_args()

    dev = load_dataset(FLICKR8K).split("dev")
    photos = Path(tempfile.mkdtemp()) / "photos"
    photos.mkdir()
    for im in dev.images[: args.photos]:
        shutil.copy2(im.path, photos / Path(im.path).name)
    idx = photos.parent / "index"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    vse = [sys.executable, "-m", "vsekit"]
    subprocess.run([*vse, "index", str(photos), "--index", str(idx), "--quiet"],
                   check=True, env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    port = free_port()
    server = subprocess.Popen([*vse, "serve", "--index", str(idx), "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    server.stdout.readline()  # "serving N images ..."
    c = Client(port)
    for _ in range(600):
        if c.request("GET", "/health")[0] == 200:
            break
        time.sleep(0.1)
    ids = [r["id"] for r in json.loads(_get(port, "/search?q=dog&k=40"))["results"]]
    first: dict[int, str] = {}
    for text, i in zip(dev.texts, dev.caption_to_image, strict=True):
        first.setdefault(int(i), text)
    from urllib.parse import quote

    valid = [("GET", f"/search?q={quote(first[k])}&k=20") for k in range(200)]
    valid += [("GET", f"/thumbs/{i}") for i in ids] + [("GET", f"/annotate/{i}") for i in ids]
    bad = attacks(ids)

    def run_phase(attackers: int) -> dict:
        stop = time.perf_counter() + args.seconds
        lat: list[float] = []
        statuses: Counter = Counter()
        by_label: dict[str, Counter] = {}
        lock = threading.Lock()

        def good_client(seed: int) -> None:
            cl, it = Client(port), itertools.cycle(valid[seed:] + valid[:seed])
            while time.perf_counter() < stop:
                m, url = next(it)
                s, dt = cl.request(m, url)
                with lock:
                    statuses[s] += 1
                    if s == 200:
                        lat.append(dt)

        def attacker(seed: int) -> None:
            cl = Client(port)
            it = itertools.cycle(bad[seed % len(bad) :] + bad[: seed % len(bad)])
            while time.perf_counter() < stop:
                label, kw = next(it)
                s, _ = cl.request(**kw)
                with lock:
                    statuses[s] += 1
                    by_label.setdefault(label, Counter())[s] += 1

        threads = [
            threading.Thread(target=good_client, args=(k * 37,)) for k in range(args.clients)
        ]
        threads += [threading.Thread(target=attacker, args=(k * 7,)) for k in range(attackers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {
            "valid_requests_ok": len(lat),
            "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1) if lat else None,
            "p99_ms": round(float(np.percentile(lat, 99)) * 1000, 1) if lat else None,
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "attack_statuses": {k: {str(s): n for s, n in v.items()} for k, v in by_label.items()},
            "requests": sum(statuses.values()),
            "5xx": sum(v for k, v in statuses.items() if k >= 500),
            "connection_errors": statuses.get(-1, 0),
        }

    def peak_mb() -> float:
        status = Path(f"/proc/{server.pid}/status").read_text()
        kb = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1])
        return round(kb / 1024, 1)

    calm = run_phase(0)
    calm_peak = peak_mb()
    attack = run_phase(args.attackers)
    attack_peak = peak_mb()
    writer = writer_phase(port, idx, photos, dev, args.seconds, args.clients)
    writer_peak = peak_mb()
    ids = [r["id"] for r in json.loads(_get(port, "/search?q=dog&k=4"))["results"]]
    annotations = {i: json.loads(_get(port, f"/annotate/{i}")) for i in ids}  # warm
    server.terminate()
    server.wait()
    cold = cold_phase(vse, env, idx, annotations, args.clients + 1)
    out = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/service_stress.py " + " ".join(sys.argv[1:]),
            "photos": args.photos,
            "seconds_per_phase": args.seconds,
            "clients": args.clients,
            "attackers": args.attackers,
            "calm": calm,
            "attack": attack,
            "server_peak_rss_mb_after_calm": calm_peak,
            "server_peak_rss_mb": attack_peak,
            "writer": writer,
            "server_peak_rss_mb_after_writer": writer_peak,
            "cold_annotations": cold,
            "p99_ratio_attack_vs_calm": round(attack["p99_ms"] / calm["p99_ms"], 2),
        },
    )
    shown = ("calm", "attack", "server_peak_rss_mb", "writer", "cold_annotations")
    print(json.dumps({k: out[k] for k in shown}, indent=1))


WRITER = """
import shutil, sys, time
from pathlib import Path
from vsekit.index.query import open_collection, store_caches
idx, photos, aside = (Path(a) for a in sys.argv[1:4])
seconds = float(sys.argv[4])
coll, model = open_collection(idx)
half = sorted(photos.iterdir())[::2]
stop, cycles = time.perf_counter() + seconds, 0
def update():
    # one batch: each update is one commit, so the index is only ever in the two states
    coll.update(photos, model.encode_image, batch_size=1000, progress=False,
                reduce_to=model.decode_size)
    store_caches(coll, model)
    coll.compact(min_garbage=1)
while True:
    for p in half:
        shutil.move(p, aside / p.name)
    update()
    for p in half:
        shutil.move(aside / p.name, p)
    update()
    cycles += 1
    if sys.argv[5] == "once" or time.perf_counter() > stop:
        break
print(cycles)
"""


def _results(body: bytes) -> list[tuple[str, float]]:
    return [(r["path"], r["score"]) for r in json.loads(body)["results"]]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]], tol: float = 2e-3) -> bool:
    """The same photos in the same order with the same scores (``tol``: the int8 graph's
    run-to-run noise), allowing two photos within ``tol`` of each other to swap."""
    if len(a) != len(b) or {p for p, _ in a} != {p for p, _ in b}:
        return False
    want = dict(b)
    return all(abs(s - want[p]) <= tol for p, s in a)


def writer_phase(port, idx, photos, dev, seconds, clients) -> dict:
    """Searches while another process re-indexes and compacts; each answer is checked
    against the index's two possible states."""
    from urllib.parse import quote

    queries = [f"/search?q={quote(t)}&k=10" for t in dev.texts[:400:20]]
    aside = photos.parent / "aside"
    aside.mkdir(exist_ok=True)
    cmd = [sys.executable, "-c", WRITER, str(idx), str(photos), str(aside)]

    def state() -> dict[str, list]:
        return {q: _results(_get(port, q).encode()) for q in queries}

    full = state()
    subprocess.run([*cmd, "0", "once"], check=True, stdout=subprocess.DEVNULL)  # one cycle
    again = state()  # the same photos re-embedded by the writer: the reference holds
    drift = sum(not _same(again[q], full[q]) for q in queries)
    # the half state: move every other photo away, re-index, read, bring them back
    half = sorted(photos.iterdir())[::2]
    for p in half:
        shutil.move(p, aside / p.name)
    subprocess.run([sys.executable, "-m", "vsekit", "index", str(photos), "--index", str(idx),
                    "--quiet"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    halfway = state()
    for p in half:
        shutil.move(aside / p.name, p)
    subprocess.run([sys.executable, "-m", "vsekit", "index", str(photos), "--index", str(idx),
                    "--quiet"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    proc = subprocess.Popen([*cmd, str(seconds), "loop"], stdout=subprocess.PIPE, text=True)
    statuses: Counter = Counter()
    wrong: list[str] = []
    seen = Counter()
    lock = threading.Lock()

    def client(seed: int) -> None:
        cl, it = Client(port), itertools.cycle(queries[seed:] + queries[:seed])
        while proc.poll() is None:
            q = next(it)
            s, _ = cl.request("GET", q)
            with lock:
                statuses[s] += 1
                if s == 200:
                    got = _results(cl.body)
                    if _same(got, full[q]):
                        seen["full"] += 1
                    elif _same(got, halfway[q]):
                        seen["half"] += 1
                    else:
                        wrong.append(q)

    threads = [threading.Thread(target=client, args=(k * 7,)) for k in range(clients)]
    for t in threads:
        t.start()
    cycles = int(proc.communicate()[0].strip() or 0)
    for t in threads:
        t.join()
    return {
        "writer_cycles": cycles,
        "reference_drift_after_one_cycle": drift,
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "answers_matching_full_state": seen["full"],
        "answers_matching_half_state": seen["half"],
        "wrong_results": len(wrong),
        "5xx": sum(v for k, v in statuses.items() if k >= 500),
        "connection_errors": statuses.get(-1, 0),
    }


def cold_phase(vse, env, idx, annotations: dict, clients: int) -> dict:
    """A server on an empty cache: concurrent first annotations, retried on 503."""
    cache = Path(tempfile.mkdtemp())
    port = free_port()
    server = subprocess.Popen([*vse, "serve", "--index", str(idx), "--port", str(port)],
                              env={**env, "VSEKIT_CACHE": str(cache)},
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    server.stdout.readline()
    t0 = time.perf_counter()
    statuses: Counter = Counter()
    wrong, first_ok = [], []
    lock = threading.Lock()
    ids = list(annotations)
    retry_503 = [0]

    def client(k: int) -> None:
        cl, i = Client(port), ids[k % len(ids)]
        while True:
            s, _ = cl.request("GET", f"/annotate/{i}")
            with lock:
                statuses[s] += 1
                if s == 503 and cl.retry_after:
                    retry_503[0] += 1
            if s == 200:
                with lock:
                    first_ok.append(time.perf_counter() - t0)
                    if json.loads(cl.body) != annotations[i]:
                        wrong.append(i)
                return
            if s != 503 and s != -1:
                return
            time.sleep(1.0)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status = Path(f"/proc/{server.pid}/status").read_text()
    kb = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1])
    server.terminate()
    server.wait()
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "clients": clients,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "seconds_to_first_200": round(min(first_ok), 1) if first_ok else None,
        "seconds_to_last_200": round(max(first_ok), 1) if first_ok else None,
        "wrong_results": len(wrong),
        # 503 with Retry-After is the service's answer while the pool is prepared (the
        # client retries); any other 5xx is an error
        "not_ready_503_with_retry_after": retry_503[0],
        "5xx_errors": sum(v for k, v in statuses.items() if k >= 500) - retry_503[0],
        "server_peak_rss_mb": round(kb / 1024, 1),
    }


def _get(port: int, url: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", url)
    return conn.getresponse().read().decode()


if __name__ == "__main__":
    main()
