"""prepare.sh: the offline path (WIKITEXT_DIR), a verified download (a local zip through a file:// URL),
mirrors tried in order on a loopback HTTP server (a 403, a User-Agent, a wrong checksum), and bad input:
a missing or truncated download, a folder without the three splits."""

import hashlib
import http.server
import subprocess
import threading
import zipfile

import pytest

from .conftest import FIXTURE, RECIPES, recipe_env, run_recipe

SCRIPTS = ("prepare.sh", "binarize.sh", "train.sh", "eval.sh", "run_baselines.sh")
SPLITS = ("train", "valid", "test")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_header_comment_from_any_directory(script, outside):
    result = subprocess.run(["bash", str(RECIPES / script), "--help"], cwd=outside, capture_output=True, text=True,
                            timeout=30, env=recipe_env("wt103"))
    assert result.returncode == 0, result.stderr
    header = [line[2:] for line in (RECIPES / script).read_text().splitlines()[1:] if line.startswith("# ")]
    assert result.stdout.splitlines()[0] == header[0]
    assert "Knobs (environment variables" in result.stdout
    assert "set -euo" not in result.stdout  # the header only
    assert not list(outside.iterdir())  # --help writes nothing


def fake_zip(tmp_path, splits=SPLITS):
    """A zip laid out like wikitext-103-v1.zip (a folder wikitext-103/) holding the fixture's splits."""
    path = tmp_path / "wikitext-103-v1.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for split in splits:
            archive.write(FIXTURE / f"wiki.{split}.tokens", f"wikitext-103/wiki.{split}.tokens")
    data = path.read_bytes()
    return path, len(data), hashlib.sha256(data).hexdigest()


def test_offline_copy_is_linked_and_marked_done(outside):
    run = run_recipe("prepare.sh", outside, "wt103", WIKITEXT_DIR=FIXTURE).check()
    assert f"WIKITEXT_DIR={FIXTURE}" in run.output  # knobs are printed at start
    raw = outside / "wt103" / "raw" / "wikitext-103"
    for split in SPLITS:
        assert (raw / f"wiki.{split}.tokens").read_bytes() == (FIXTURE / f"wiki.{split}.tokens").read_bytes()
    assert (raw / ".done").is_file()
    again = run_recipe("prepare.sh", outside, "wt103", WIKITEXT_DIR=FIXTURE).check()
    assert "already prepared" in again.output
    assert sorted(p.name for p in raw.parent.iterdir()) == ["wikitext-103"]  # no staging folder left


def test_download_is_verified_then_unzipped(tmp_path, outside):
    path, size, sha = fake_zip(tmp_path)
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=path.as_uri(), EXPECTED_SIZE=size, EXPECTED_SHA256=sha).check()
    raw = outside / "wt103" / "raw" / "wikitext-103"
    for split in SPLITS:
        assert (raw / f"wiki.{split}.tokens").read_bytes() == (FIXTURE / f"wiki.{split}.tokens").read_bytes()
    assert (outside / "wt103" / "downloads" / "wikitext-103-v1.zip").read_bytes() == path.read_bytes()
    assert "using the verified" not in run.output
    # A rerun after removing the marker reuses the verified zip instead of downloading again.
    (raw / ".done").unlink()
    again = run_recipe("prepare.sh", outside, "wt103", MIRRORS="file:///nonexistent.zip", EXPECTED_SIZE=size,
                       EXPECTED_SHA256=sha).check()
    assert "using the verified" in again.output


def assert_nothing_trusted(wt103):
    """No split folder (nor a staging folder) and no zip that a rerun would use."""
    raw = wt103 / "raw"
    assert not raw.exists() or not list(raw.iterdir()), list(raw.iterdir())
    downloads = wt103 / "downloads"
    assert not downloads.exists() or not list(downloads.iterdir()), list(downloads.iterdir())


def test_truncated_download_fails_naming_the_size_and_leaves_nothing(tmp_path, outside):
    path, size, sha = fake_zip(tmp_path)
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(path.read_bytes()[: size // 2])
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=truncated.as_uri(), EXPECTED_SIZE=size, EXPECTED_SHA256=sha)
    assert run.returncode != 0
    assert f"does not verify: {size // 2} bytes, expected EXPECTED_SIZE={size} (truncated download?)" in run.output
    assert_nothing_trusted(outside / "wt103")


def test_corrupted_download_fails_on_the_checksum(tmp_path, outside):
    path, size, sha = fake_zip(tmp_path)
    corrupted = tmp_path / "corrupted.zip"
    data = bytearray(path.read_bytes())
    data[size // 2] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=corrupted.as_uri(), EXPECTED_SIZE=size, EXPECTED_SHA256=sha)
    assert run.returncode != 0
    assert f"expected EXPECTED_SHA256={sha}" in run.output
    assert_nothing_trusted(outside / "wt103")


def test_missing_download_fails_naming_the_url(tmp_path, outside):
    url = (tmp_path / "nowhere" / "wikitext-103-v1.zip").as_uri()
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=url)
    assert run.returncode != 0
    assert f"prepare.sh: error: no mirror gave a verified wikitext-103-v1.zip. Tried, in order: {url}: download failed:" in run.output
    assert_nothing_trusted(outside / "wt103")


def test_zip_without_a_split_fails_naming_it(tmp_path, outside):
    path, size, sha = fake_zip(tmp_path, splits=("train", "valid"))
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=path.as_uri(), EXPECTED_SIZE=size, EXPECTED_SHA256=sha)
    assert run.returncode != 0
    assert "missing " in run.output and "wikitext-103/wiki.test.tokens" in run.output
    assert not (outside / "wt103" / "raw" / "wikitext-103").exists()


@pytest.mark.parametrize("missing", SPLITS)
def test_folder_without_a_split_fails_naming_the_file(tmp_path, outside, missing):
    folder = tmp_path / "partial"
    folder.mkdir()
    for split in SPLITS:
        if split != missing:
            (folder / f"wiki.{split}.tokens").write_bytes((FIXTURE / f"wiki.{split}.tokens").read_bytes())
    run = run_recipe("prepare.sh", outside, "wt103", WIKITEXT_DIR=folder)
    assert run.returncode != 0
    assert f"prepare.sh: error: missing {folder}/wiki.{missing}.tokens" in run.output
    assert not (outside / "wt103" / "raw").exists()


def test_empty_split_fails_naming_the_file(tmp_path, outside):
    folder = tmp_path / "empty"
    folder.mkdir()
    for split in SPLITS:
        (folder / f"wiki.{split}.tokens").write_text("" if split == "valid" else " \n = A = \n")
    run = run_recipe("prepare.sh", outside, "wt103", WIKITEXT_DIR=folder)
    assert run.returncode != 0
    assert f"prepare.sh: error: empty file: {folder}/wiki.valid.tokens" in run.output
    assert not (outside / "wt103" / "raw").exists()


BROWSER = "Mozilla/5.0 (X11; Linux x86_64) test"


class Mirrors(http.server.BaseHTTPRequestHandler):
    """/forbidden/: 403, as the dead S3 bucket; /agent/: the zip only to BROWSER's User-Agent, 403 to any other
    (as wikitext.smerity.com to Python's); /corrupt/: a zip with one byte changed. ``requests`` logs each."""

    zip_bytes = b""
    requests = []

    def do_GET(self):
        agent = self.headers.get("User-Agent", "")
        Mirrors.requests.append((self.path, agent))
        if self.path.startswith("/agent/") and agent == BROWSER:
            body = self.zip_bytes
        elif self.path.startswith("/corrupt/"):
            body = bytearray(self.zip_bytes)
            body[len(body) // 2] ^= 0xFF
            body = bytes(body)
        else:
            self.send_error(403, "Forbidden")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror_server(tmp_path):
    path, size, sha = fake_zip(tmp_path)
    Mirrors.zip_bytes, Mirrors.requests = path.read_bytes(), []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mirrors)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", size, sha
    server.shutdown()
    server.server_close()


def test_mirrors_are_tried_in_order_each_with_its_user_agent_until_one_verifies(outside, mirror_server):
    base, size, sha = mirror_server
    mirrors = (f"{base}/forbidden/wikitext-103-v1.zip\n"
               f"{base}/agent/wikitext-103-v1.zip {BROWSER}\n"
               f"{base}/never-asked/wikitext-103-v1.zip")
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=mirrors, EXPECTED_SIZE=size, EXPECTED_SHA256=sha).check()
    assert [path for path, _ in Mirrors.requests] == ["/forbidden/wikitext-103-v1.zip", "/agent/wikitext-103-v1.zip"]
    assert Mirrors.requests[1][1] == BROWSER and Mirrors.requests[0][1].startswith("Python-urllib")
    assert f"prepare.sh: {base}/forbidden/wikitext-103-v1.zip: download failed: HTTP Error 403: Forbidden" in run.output
    assert f"== verified {outside}/wt103/downloads/wikitext-103-v1.zip from {base}/agent/wikitext-103-v1.zip" in run.output
    raw = outside / "wt103" / "raw" / "wikitext-103"
    for split in SPLITS:
        assert (raw / f"wiki.{split}.tokens").read_bytes() == (FIXTURE / f"wiki.{split}.tokens").read_bytes()


def test_no_verified_mirror_fails_naming_every_mirror_and_the_way_by_hand(outside, mirror_server):
    base, size, sha = mirror_server
    mirrors = f"{base}/corrupt/wikitext-103-v1.zip\n{base}/agent/wikitext-103-v1.zip"  # no User-Agent given: 403
    run = run_recipe("prepare.sh", outside, "wt103", MIRRORS=mirrors, EXPECTED_SIZE=size, EXPECTED_SHA256=sha)
    assert run.returncode != 0
    error = run.output.split("prepare.sh: error: ")[1]
    assert error.startswith("no mirror gave a verified wikitext-103-v1.zip. Tried, in order: "
                            f"{base}/corrupt/wikitext-103-v1.zip: does not verify: SHA-256 ")
    assert f"expected EXPECTED_SHA256={sha}; {base}/agent/wikitext-103-v1.zip: download failed: HTTP Error 403" in error
    assert f"put it at {outside}/wt103/downloads/wikitext-103-v1.zip and rerun" in error and "WIKITEXT_DIR=" in error
    assert_nothing_trusted(outside / "wt103")


def test_default_mirrors_start_with_the_datasets_own_host_and_its_user_agent_not_the_dead_s3_bucket(tmp_path, outside):
    raw = tmp_path / "prepared"
    raw.mkdir()
    for split in SPLITS:
        (raw / f"wiki.{split}.tokens").write_text(" = A = \n")
    (raw / ".done").write_text("earlier\n")
    run = run_recipe("prepare.sh", outside, "wt103", RAW_DIR=raw, timeout=30).check()  # prepared: prints its knobs, stops
    assert "already prepared" in run.output
    mirrors = run.output.split("  MIRRORS=", 1)[1].split("\n  EXPECTED_SIZE=")[0].splitlines()
    assert mirrors[0].startswith("https://wikitext.smerity.com/wikitext-103-v1.zip Mozilla/5.0 ")
    assert mirrors[-1] == "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
