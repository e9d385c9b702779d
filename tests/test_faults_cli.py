"""CLI edges: undecodable arguments, FIFOs and devices as inputs, a full disk, and
thousands of unreadable files, each a one-line error (or summary) that loses nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_tiny_model, write_image
from tests.test_faults import ROOT
from vsekit.cli import main
from vsekit.index import Collection


def _vse(*argv: str | bytes, timeout: float = 60) -> subprocess.CompletedProcess:
    """``vse`` in a child process, with raw bytes arguments as a shell passes them."""
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from vsekit.cli import main; "
    code += "sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                          timeout=timeout)  # fmt: skip


def test_a_query_of_bytes_that_are_not_utf8_is_one_line(tmp_path):
    r = _vse("search", b"\xff\xfe dog", "--index", str(tmp_path / "none"))
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and err == ["vse: error: query: not valid UTF-8 text (at character 1)"]


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
@pytest.mark.parametrize("command", ["search", "annotate"])
def test_fifos_and_devices_are_refused_before_any_read(tmp_path, kind, command):
    """A FIFO given to `search --image` or `annotate` hung for ever (a read that never
    returns); now a one-line error, in well under the 60 s timeout."""
    if kind == "fifo":
        path = tmp_path / "x.jpg"
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "d.jpg"
        path.mkdir()
    argv = ["search", "--image", str(path)] if command == "search" else ["annotate", str(path)]
    r = _vse(*argv, "--model", "default", timeout=30)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "not a regular file" in err[0], err


def test_load_image_refuses_a_fifo(tmp_path):
    from vsekit.media.images import ImageError, load_image

    os.mkfifo(tmp_path / "f.png")
    with pytest.raises(ImageError, match="not a regular file"):
        load_image(tmp_path / "f.png")


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs the right to mount: root, as in CI)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()})")
    yield mnt
    subprocess.run(["umount", "--lazy", str(mnt)], check=True)  # open handles may remain


def _fill(disk: Path, leave: int) -> None:
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    (disk / "ballast").write_bytes(b"\0" * max(0, free - leave))


def test_a_full_disk_is_one_line_naming_the_file_and_keeps_committed_rows(
    tmp_path, small_disk, capsys
):
    bundle = make_tiny_model().save(tmp_path / "m")
    first, more = tmp_path / "first", tmp_path / "more"
    for i in range(3):
        write_image(first / f"{i}.png", seed=i)
    for i in range(400):
        write_image(more / f"{i}.png", seed=100 + i)
    idx = small_disk / "idx"
    args = ["--index", str(idx), "--model", str(bundle), "--quiet", "--batch-size", "4"]
    assert main(["index", str(first), *args]) == 0
    capsys.readouterr()
    _fill(small_disk, leave=24 * 1024)
    assert main(["index", str(more), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vse: error: ") and str(idx) in err[0], err
    assert "full" in err[0] or "No space" in err[0], err
    (small_disk / "ballast").unlink()
    coll = Collection(idx)  # opens, consistent, the first rows kept
    coll.check()
    assert len(coll) >= 3 and len(set(coll.rows.tolist())) == len(coll)
    assert main(["index", str(more), *args]) == 0  # and the next run completes it
    assert len(Collection(idx)) == 403


def test_thousands_of_unreadable_files_are_summarised(tmp_path, capsys):
    bundle = make_tiny_model().save(tmp_path / "m")
    photos = tmp_path / "photos"
    write_image(photos / "ok.png")
    for i in range(300):
        (photos / f"empty{i:03d}.jpg").write_bytes(b"")
    args = ["index", str(photos), "--index", str(tmp_path / "idx"), "--model", str(bundle)]
    assert main([*args, "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 6, err
    assert err[-1] == "... and 295 more skipped (295 not an image); --verbose lists them"
    assert main([*args, "--quiet", "--verbose"]) == 0  # again: the failures are remembered
    err = capsys.readouterr().err.strip().splitlines()
    assert len([e for e in err if e.startswith("skipped ")]) == 300


@pytest.mark.parametrize("host", ["", "0", "0.0", "0.0.0.0", "0x0", "::", "[::]", "::0", " :: "])
def test_every_wildcard_bind_needs_allow_host(host, capsys):
    from vsekit.cli.serve import is_wildcard

    assert is_wildcard(host)
    assert main(["serve", "--host", host, "--index", "/nonexistent"]) == 2
    assert "needs --allow-host" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "192.168.1.5", "::1", "photos.lan"])
def test_named_hosts_are_not_wildcards(host):
    from vsekit.cli.serve import is_wildcard

    assert not is_wildcard(host)


def test_a_100k_character_query_gets_json_from_a_real_server(tmp_path):
    """uvicorn answered a request line over its 16 KB buffer with a plain-text 400; with
    `vse serve`'s settings the request reaches the app, which refuses it in JSON."""
    import http.client
    import json

    from tests.test_serve import running_server
    from vsekit.index import model_info
    from vsekit.serve.app import create_app

    model = make_tiny_model()
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    with running_server(create_app(coll, model)) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/search?q=" + "a" * 100_000)
        r = conn.getresponse()
        body = json.loads(r.read())
        assert r.status == 422 and body["error"].startswith("q: String should have at most")


def test_help_lists_everyday_commands_first(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert out.index("commands:") < out.index("  search") < out.index("research commands")
    assert out.index("research commands") < out.index("  train ")


@pytest.mark.parametrize("typo,near", [("serch", "search"), ("indx", "index"), ("tran", "train")])
def test_a_typo_gets_the_nearest_command(typo, near, capsys):
    assert main([typo, "x"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"vse: error: unknown command {typo!r}; did you mean {near!r}?"
    )


def test_a_closed_pipe_is_not_an_error(tmp_path):
    """`vse search ... -f | head -1` ended with "[Errno 32] Broken pipe"."""
    photos = tmp_path / "p"
    for i in range(40):
        write_image(photos / f"{i:02d}.png", seed=i)
    bundle = make_tiny_model().save(tmp_path / "m")
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--index", str(idx), "--model", str(bundle),
                 "--quiet"]) == 0  # fmt: skip
    script = tmp_path / "vse.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from vsekit.cli import main\nsys.exit(main())\n")  # fmt: skip
    # `true` exits at once, long before the search prints: every write meets a closed pipe
    cmd = f"{sys.executable} {script} search 'a dog' --index {idx} --k 40 -f | true;"
    cmd += " echo ${PIPESTATUS[0]}"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "141", (r.stdout, r.stderr)
    assert "Broken pipe" not in r.stderr and "Traceback" not in r.stderr


def test_an_empty_folder_is_a_warning(tmp_path, capsys):
    bundle = make_tiny_model().save(tmp_path / "m")
    (tmp_path / "empty").mkdir()
    argv = ["index", str(tmp_path / "empty"), "--index", str(tmp_path / "i"), "--model",
            str(bundle), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "no photos or videos found" in err and ".jpg" in err


def test_serve_exits_on_sigterm_within_5_s_with_a_request_in_flight(tmp_path):
    """An upload that never ends is in flight: SIGTERM still ends the server within 5 s
    (uvicorn's graceful shutdown is capped at 3 s)."""
    import signal
    import socket
    import time

    from tests.test_serve import free_port

    bundle = make_tiny_model().save(tmp_path / "m")
    photos = tmp_path / "p"
    write_image(photos / "a.png")
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--index", str(idx), "--model", str(bundle),
                 "--quiet"]) == 0  # fmt: skip
    script = tmp_path / "vse.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "import tests.conftest  # the tiny backbone\n"
                      "from vsekit.cli import main\nsys.exit(main())\n")  # fmt: skip
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), "serve", "--index", str(idx),
                             "--port", str(port)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert "serving 1 images" in proc.stdout.readline()
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /annotate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: multipart/form-data; boundary=x\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\n--x\r\n\r\n")  # fmt: skip
        time.sleep(0.5)  # the request is in the server, its body unfinished
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.perf_counter() - t0 < 5.0
        sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
